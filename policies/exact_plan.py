"""The exact plan's rules (oracle/exact.py states the cost model): the least-cost action at each output position of
one request, by dynamic programming, and the form and check of its costs. Plain Python over arrays, so the oracles
run them as they are and the compiled engine compiles them (simulator/engine/compiled_kernel.py, POL_PLAN)."""
from __future__ import annotations

import math

from traces.acceptance import FIRST_DRAFT_POSITION

PLAIN = -1  # drafter index of a plain decode step


def least_cost_actions(reach, price, plain, n, act_d, act_k, value):
    """From position n - 1 back to FIRST_DRAFT_POSITION: value[p] = the least of plain + value[p + 1] and, for each
    drafter i (row of `reach` and `price`) and 1 <= m <= reach[i, p], price[i, m] + value[p + 1 + m]. Ties go to
    plain decoding, then to the earlier drafter, then to fewer drafted tokens. Writes the action (act_d[p]: PLAIN or
    i; act_k[p]) and value[p] at those positions, and value[n] = 0."""
    value[n] = 0.0
    for p in range(n - 1, FIRST_DRAFT_POSITION - 1, -1):
        best = plain + value[p + 1]
        bd = PLAIN
        bk = 0
        for i in range(reach.shape[0]):
            for m in range(1, reach[i, p] + 1):
                v = price[i, m] + value[p + 1 + m]
                if v < best:
                    best = v
                    bd = i
                    bk = m
        value[p] = best
        act_d[p] = bd
        act_k[p] = bk


def cost_ceiling(costs, top):
    """costs[1..top] raised in place to their running maximum: drafting m tokens priced at the most any m' <= m
    costs. A step-time estimate can fall as m grows (the drafts take token budget from prompt chunks, which then wait),
    and the plan's cost model needs costs that do not: with them, drafting more than will be accepted never pays."""
    for m in range(2, top + 1):
        if costs[m] < costs[m - 1]:
            costs[m] = costs[m - 1]


def positive_cost(c) -> bool:
    """Whether a step cost is finite and above 0 (what the plan's costs must be)."""
    return math.isfinite(c) and c > 0.0


def drafted_costs_ok(costs, top) -> bool:
    """Whether drafting costs costs[1..top] (costs[m]: drafting m tokens) are finite, above 0 and do not decrease
    with m, as the plan's cost model needs (a step never costs less for drafting more)."""
    for m in range(1, top + 1):
        if not positive_cost(costs[m]):
            return False
        if m > 1 and costs[m] < costs[m - 1]:
            return False
    return True
