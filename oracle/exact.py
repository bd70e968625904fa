"""Exact oracles: per request, the plan of (drafter, k) per step with the fewest steps or the least time.

Dynamic programming over output positions with the replay rule of `traces.acceptance`. From position p a
step may decode plainly (next p + 1) or draft m tokens with drafter d, 1 <= m <= reachable_drafts(d, p)
(acc_len[d][p] - 1 capped by proposal_len[d][p], the drafter's k limit and the output left): all m are
accepted and the step moves to p + 1 + m. Drafting more than will be accepted, or past the output's end,
moves no further and never costs less (step costs must not decrease with m), so the plan never does it.

Cost model (stated): a step's cost depends only on the action, not on the position or the batch:
`plain` for a plain decode step, `drafted[d][m]` for drafting m tokens with d (its draft cost plus the
verify of m + 1 tokens). Unit costs give the minimum number of steps. Ties go to plain decoding, then
to the earlier drafter, then to fewer drafted tokens.

`greedy_plan` is the reference's (SpecDecode-Bench's) oracle for comparison: at each step the drafter with
the longest acceptance, all of it. It is not optimal: a long run now can land on a position where every
drafter is poor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from policies.exact_plan import PLAIN, cost_ceiling, drafted_costs_ok, least_cost_actions, positive_cost
from traces.acceptance import FIRST_DRAFT_POSITION, reachable_drafts, trace_position
from traces.bundle import DrafterTrace, RequestTrace


@dataclass(frozen=True)
class StepCosts:
    """Cost of each action: `plain` for plain decoding, `drafted[d][m]` for drafting m tokens with drafter d
    (index 0 unused; its length - 1 is that drafter's k limit)."""

    plain: float
    drafted: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        if not positive_cost(self.plain):
            raise ValueError(f"StepCosts.plain: expected a finite cost > 0, got {self.plain!r}")
        for d, c in self.drafted.items():
            c = np.asarray(c, dtype=np.float64)
            if c.ndim != 1 or c.shape[0] < 1:
                raise ValueError(f"StepCosts.drafted[{d!r}]: expected a 1-D array indexed by k (index 0 unused)")
            if not drafted_costs_ok(c, c.shape[0] - 1):
                raise ValueError(f"StepCosts.drafted[{d!r}]: costs must be finite and > 0 and must not decrease with k, "
                                 f"got {c[1:].tolist()}")

    @classmethod
    def unit(cls, k_max: Mapping[str, int]) -> "StepCosts":
        """Every step costs 1: the plan with the fewest steps."""
        return cls(1.0, {d: np.ones(int(k) + 1) for d, k in k_max.items()})

    def k_max(self, drafter: str) -> int:
        return int(np.asarray(self.drafted[drafter]).shape[0]) - 1


@dataclass(frozen=True)
class Plan:
    """The best action at every position of one request, and the path it takes from position 1."""

    drafters: tuple[str, ...]
    action_drafter: np.ndarray  # per position: index into drafters, PLAIN for a plain step
    action_k: np.ndarray  # per position: tokens to draft (0 for a plain step)
    cost_to_go: np.ndarray  # per position: cost of the best plan from there (cost_to_go[output_len] = 0)
    path: np.ndarray  # positions the steps from position 1 start at

    @property
    def steps(self) -> int:
        return int(self.path.shape[0])

    @property
    def cost(self) -> float:
        return float(self.cost_to_go[FIRST_DRAFT_POSITION]) if self.cost_to_go.shape[0] > FIRST_DRAFT_POSITION else 0.0

    def choice(self, position: int) -> tuple[str | None, int]:
        """(drafter, k) of the plan at `position`; (None, 0) for a plain step."""
        d = int(self.action_drafter[position])
        return (None, 0) if d == PLAIN else (self.drafters[d], int(self.action_k[position]))


def _reach(traces: Sequence[DrafterTrace], k_max: Sequence[int | None], n: int) -> np.ndarray:
    """reach[i, p] = tokens drafter i can draft from p that will all be accepted (traces.acceptance)."""
    pos = np.arange(n)
    out = np.zeros((len(traces), n), dtype=np.int64)
    for i, (t, k) in enumerate(zip(traces, k_max)):
        out[i] = reachable_drafts(np.asarray(t.acc_len, dtype=np.int64), t.proposal_len, k, pos, n)
    out[:, :FIRST_DRAFT_POSITION] = 0
    return out


def _path(action_drafter: np.ndarray, action_k: np.ndarray, n: int) -> np.ndarray:
    p, out = FIRST_DRAFT_POSITION, []
    while p < n:
        out.append(p)
        p += 1 + int(action_k[p])
    return np.asarray(out, dtype=np.int64)


def exact_plan(request: RequestTrace, costs: StepCosts) -> Plan:
    """The least-cost plan over the drafters named in `costs` (each with its k limit) for one request."""
    drafters = tuple(costs.drafted)
    missing = [d for d in drafters if d not in request.drafters]
    if missing:
        raise ValueError(f"request {request.id!r} has no trace for drafter(s) {missing} "
                         f"(has {sorted(request.drafters)})")
    n = request.output_len
    reach = _reach([request.drafters[d] for d in drafters], [costs.k_max(d) for d in drafters], n)
    price = np.full((len(drafters), 1 + max((costs.k_max(d) for d in drafters), default=0)), np.inf)
    for i, d in enumerate(drafters):
        price[i, :costs.k_max(d) + 1] = costs.drafted[d]
    value = np.zeros(n + 1)
    act_d = np.full(n, PLAIN, dtype=np.int64)
    act_k = np.zeros(n, dtype=np.int64)
    least_cost_actions(reach, price, float(costs.plain), n, act_d, act_k, value)
    return Plan(drafters, act_d, act_k, value, _path(act_d, act_k, n))


def min_steps_plan(request: RequestTrace, drafters: Sequence[str], k_max: Mapping[str, int | None] | None = None) -> Plan:
    """The plan with the fewest steps; a drafter without a k limit may draft up to its longest acceptance."""
    limits = {}
    for d in drafters:
        k = (k_max or {}).get(d)
        limits[d] = int(k) if k is not None else max(int(request.drafters[d].acc_len.max()) - 1, 0)
    return exact_plan(request, StepCosts.unit(limits))


def greedy_plan(request: RequestTrace, drafters: Sequence[str], k_max: Mapping[str, int | None] | None = None) -> Plan:
    """The reference's greedy oracle: each step drafts everything the longest-accepting drafter would get
    accepted (ties: the first listed). Its `cost_to_go` counts steps."""
    drafters = tuple(drafters)
    n = request.output_len
    reach = _reach([request.drafters[d] for d in drafters], [(k_max or {}).get(d) for d in drafters], n)
    act_d = np.full(n, PLAIN, dtype=np.int64)
    act_k = np.zeros(n, dtype=np.int64)
    if n > FIRST_DRAFT_POSITION:
        best = np.argmax(reach, axis=0)
        k = reach[best, np.arange(n)]
        act_d = np.where(k > 0, best, PLAIN)
        act_k = k
    value = np.zeros(n + 1)
    for p in range(n - 1, FIRST_DRAFT_POSITION - 1, -1):
        value[p] = 1.0 + value[p + 1 + int(act_k[p])]
    return Plan(drafters, act_d, act_k, value, _path(act_d, act_k, n))


def plan_time(plan: Plan, costs: StepCosts) -> float:
    """Cost of following `plan` from position 1 under `costs` (e.g. a greedy plan priced like an exact one)."""
    total = 0.0
    for p in plan.path.tolist():
        d, k = plan.choice(p)
        if d is not None and k > costs.k_max(d):
            raise ValueError(f"plan drafts {k} tokens with {d!r} at position {p}; the costs stop at k = {costs.k_max(d)}")
        total += costs.plain if d is None else float(np.asarray(costs.drafted[d])[k])
    return total


PLANS = ("greedy", "min-steps", "min-time")


class PlanFollower:
    """Per request, an exact plan made at the request's first step; then the plan's action at each position.

    `min-steps` uses unit costs. `min-time` prices plain decoding and drafting m tokens with each drafter by
    the engine's step-time estimate at that first step (`view.step_time_estimate`: the batch's step time if
    every request took that action; constant for the rest of the request, as the DP's cost model states), drafting
    m at the most any m' <= m costs (cost_ceiling: an estimate can fall with m where drafts displace prompt chunks).
    """

    def __init__(self, kind: str, drafters: Sequence[str], k_max: Mapping[str, int | None], where: str,
                 fallback_time: Callable[[str | None, int], float] | None = None):
        if kind not in PLANS[1:]:
            raise ValueError(f"{where}: plan must be one of {PLANS}, got {kind!r}")
        self.kind, self.drafters, self.k_max, self.where = kind, tuple(drafters), dict(k_max), where
        self.fallback_time = fallback_time  # step time when the view carries no estimate (plain loops)
        self._plans: dict[str, Plan] = {}

    def forget(self, request_id: str) -> None:
        self._plans.pop(request_id, None)

    def reach(self, request: RequestTrace) -> np.ndarray:
        """reach[i, p]: the most drafts of drafter i (in `drafters` order, within its k limit) from position p that
        will all be accepted; what a plan may draft."""
        missing = [d for d in self.drafters if d not in request.drafters]
        if missing:
            raise ValueError(f"{self.where}: request {request.id!r} has no trace for drafter(s) {missing} "
                             f"(has {sorted(request.drafters)})")
        return _reach([request.drafters[d] for d in self.drafters], [self.k_max.get(d) for d in self.drafters],
                      request.output_len)

    def _costs(self, request: RequestTrace, view) -> StepCosts:
        """min-time's costs: each drafter priced for m = 1 up to the most it can draft on the request (reach)."""
        est = view.step_time_estimate or self.fallback_time
        if est is None:
            raise ValueError(f"{self.where}: plan 'min-time' needs the step-time estimate the simulator gives "
                             f"(view.step_time_estimate); use plan 'min-steps' elsewhere")
        reach = self.reach(request)
        drafted = {}
        for i, d in enumerate(self.drafters):
            top = int(reach[i].max(initial=0))
            drafted[d] = np.array([est(None, 0)] + [est(d, m) for m in range(1, top + 1)], dtype=np.float64)
            cost_ceiling(drafted[d], top)
        return StepCosts(float(est(None, 0)), drafted)

    def adopt(self, request_id: str, action_drafter: np.ndarray, action_k: np.ndarray,
              cost_to_go: np.ndarray) -> None:
        """Keep a plan the compiled engine made for the request (its actions and cost to go by position), as
        plan_of would have."""
        n = action_drafter.shape[0]
        act_d, act_k = action_drafter.astype(np.int64), action_k.astype(np.int64)
        act_d[:FIRST_DRAFT_POSITION], act_k[:FIRST_DRAFT_POSITION] = PLAIN, 0
        value = np.asarray(cost_to_go, dtype=np.float64).copy()
        value[:FIRST_DRAFT_POSITION] = 0.0
        self._plans[request_id] = Plan(self.drafters, act_d, act_k, value, _path(act_d, act_k, n))

    def plan_of(self, request_id: str, request: RequestTrace, view=None) -> Plan:
        """The request's plan, made at its first ask (`view`: the step-time estimate of min-time's first step)."""
        plan = self._plans.get(request_id)
        if plan is None:
            if self.kind == "min-steps":
                plan = min_steps_plan(request, self.drafters, self.k_max)
            else:
                plan = exact_plan(request, self._costs(request, view))
            self._plans[request_id] = plan
        return plan

    def choice(self, request: RequestTrace, view) -> tuple[str | None, int]:
        """The plan's action at the view's position (past the trace: its last, traces.acceptance.trace_position)."""
        plan = self.plan_of(view.request_id, request, view)
        return plan.choice(trace_position(view.position, plan.action_drafter.shape[0]))
