"""Oracle best drafter per position: each drafter's oracle k, priced honestly, plus a switching cost.

At each position every drafter would emit 1 + its oracle k tokens; the oracle takes the option
(or plain decoding) with the most tokens per second. Time comes from `view.step_time_estimate`
(the batch's step time if all used that drafter and k); without it, from `cost_ratios`
(step time = 1 + ratio of the drafter, in target steps; 0 when not given). Changing drafter
within a request adds `switch_cost_s` (in the same unit as the step time). That is a greedy choice, step by
step; `plan: min-steps | min-time` follows the exact plan of `oracle.exact` instead (no switch cost).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from policies.base import Choice, RequestView, tokens_per_time
from oracle.exact import PLANS, PlanFollower
from oracle.ground_truth import GroundTruthPolicy
from traces.acceptance import reachable_drafts, trace_position


class OracleBestDrafterPolicy(GroundTruthPolicy):
    """Per position, the drafter (and its oracle k) with the most emitted tokens per unit time."""

    name = "oracle-best-drafter"
    description = "ORACLE: per position, the drafter with most tokens per unit time at its oracle k (+ switch cost)."

    def __init__(self, drafters: Sequence[str], k_max: int | None = None, switch_cost_s: float = 0.0,
                 cost_ratios: Mapping[str, float] | None = None, plan: str = "greedy"):
        super().__init__()
        if isinstance(drafters, str) or not drafters:
            raise ValueError(f"policy {self.name!r}: drafters must be a non-empty list, got {drafters!r}")
        if switch_cost_s < 0:
            raise ValueError(f"policy {self.name!r}: switch_cost_s must be >= 0, got {switch_cost_s}")
        self.drafters = tuple(str(d) for d in drafters)
        self.k_max = None if k_max is None else int(k_max)
        self.switch_cost_s = float(switch_cost_s)
        self.cost_ratios = {d: float((cost_ratios or {}).get(d, 0.0)) for d in self.drafters}
        self._last: dict[str, str] = {}
        self._reach: dict[str, np.ndarray] = {}  # request id -> oracle_ks (made at its first greedy choice)
        if plan not in PLANS:
            raise ValueError(f"policy {self.name!r}: plan must be one of {PLANS}, got {plan!r}")
        if plan != "greedy" and self.switch_cost_s > 0:
            raise ValueError(f"policy {self.name!r}: plan {plan!r} does not model switch_cost_s; set it to 0")
        self.plan = plan
        self.by_position = plan == "min-steps"  # greedy weighs time and switches; min-time plans at a step's estimate
        self._follower = None if plan == "greedy" else PlanFollower(
            plan, self.drafters, {d: self.k_max for d in self.drafters}, f"policy {self.name!r}",
            fallback_time=lambda d, k: 1.0 + (self.cost_ratios[d] if d is not None and k > 0 else 0.0))

    def drafters_used(self) -> tuple[str, ...]:
        return self.drafters

    @property
    def greedy_by_rate(self) -> bool:
        """Whether `choose` is this class's greedy rule, `pick` over `candidates` (plan greedy), which the compiled
        engine runs too (a subclass may choose otherwise, so it runs step by step)."""
        return type(self) is OracleBestDrafterPolicy and self.plan == "greedy"

    @property
    def time_plan(self) -> PlanFollower | None:
        """Plan min-time's follower when `choose` is this class's (the compiled engine makes the same plans)."""
        return self._follower if self.plan == "min-time" and type(self) is OracleBestDrafterPolicy else None

    def max_draft_tokens(self) -> int:
        return self.largest_reachable_k(self.drafters, self.k_max)

    def finish_request(self, request_id: str) -> None:
        super().finish_request(request_id)
        self._last.pop(request_id, None)
        self._reach.pop(request_id, None)
        if self._follower is not None:
            self._follower.forget(request_id)

    def position_choices(self, request_id: str) -> tuple[np.ndarray, np.ndarray]:
        """min-steps: the exact plan's action at every position."""
        for d in self.drafters:
            self.drafter_trace(request_id, d)  # a clear error when a drafter is missing
        plan = self._follower.plan_of(request_id, self.trace_of(request_id))
        return plan.action_drafter, plan.action_k

    def planned(self, view: RequestView) -> Choice:
        """The exact plan's action at this position."""
        if self.by_position:
            return self.tabulated(view)
        for d in self.drafters:
            self.drafter_trace(view.request_id, d)  # a clear error when a drafter is missing
        d, k = self._follower.choice(self.trace_of(view.request_id), view)
        return Choice(d, k)

    def _time(self, view: RequestView, drafter: str | None, k: int) -> float:
        if view.step_time_estimate is not None:
            return view.step_time_estimate(drafter if k > 0 else None, k)
        return 1.0 + (self.cost_ratios[drafter] if drafter is not None and k > 0 else 0.0)

    def remember_drafter(self, request_id: str, drafter: str) -> None:
        """Set the request's last chosen drafter (the switching cost's reference), as a choice would: the compiled
        engine hands its choices back through this."""
        if drafter not in self.drafters:
            raise ValueError(f"oracle {self.name!r}: drafter {drafter!r} is not one of {list(self.drafters)}")
        self._last[request_id] = drafter

    def oracle_ks(self, request_id: str) -> np.ndarray:
        """Each drafter's oracle k (a row per drafter, in `drafters` order) at every output position of the request:
        the drafts from there that will all be accepted (`traces.acceptance.reachable_drafts`: acc_len - 1, capped
        by proposal_len, k_max and the output left)."""
        traces = [self.drafter_trace(request_id, d) for d in self.drafters]
        n = traces[0].acc_len.shape[0]
        for d, t in zip(self.drafters, traces):
            if t.acc_len.shape[0] != n:
                raise ValueError(f"oracle {self.name!r}: request {request_id!r}'s trace of drafter {d!r} has "
                                 f"{t.acc_len.shape[0]} positions, its trace of {self.drafters[0]!r} {n}")
        pos = np.arange(n)
        return np.array([reachable_drafts(t.acc_len.astype(np.int64), t.proposal_len, self.k_max, pos, n)
                         for t in traces],
                        dtype=np.int64).reshape(len(traces), n)

    def candidates(self, view: RequestView) -> list[tuple[str, int]]:
        """(drafter, oracle k) for every drafter at this position (past the trace: its last,
        traces.acceptance.trace_position; oracle_ks, made once per request)."""
        ks = self._reach.get(view.request_id)
        if ks is None:
            ks = self._reach[view.request_id] = self.oracle_ks(view.request_id)
        p = trace_position(view.position, ks.shape[1])
        return [(d, int(ks[i, p])) for i, d in enumerate(self.drafters)]

    def pick(self, view: RequestView, options: list[tuple[str, int]]) -> tuple[str | None, int]:
        """The option with the most tokens per unit time (tokens_per_time; the first on a tie, plain decoding
        before any); plain decoding when nothing is accepted. Changing drafter within a request adds
        `switch_cost_s`."""
        best, best_rate = (None, 0), tokens_per_time(0, self._time(view, None, 0), 0.0)
        last = self._last.get(view.request_id)
        for d, k in options:
            if k <= 0:
                continue
            switch = self.switch_cost_s if last is not None and d != last else 0.0
            rate = tokens_per_time(k, self._time(view, d, k), switch)
            if rate > best_rate:
                best, best_rate = (d, k), rate
        return best

    def choose(self, view: RequestView) -> Choice:
        if self._follower is not None:
            return self.planned(view)
        d, k = self.pick(view, self.candidates(view))
        if d is not None:
            self._last[view.request_id] = d
        return Choice(d, k)
