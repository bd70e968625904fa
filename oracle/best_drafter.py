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

from policies.base import Choice, RequestView
from oracle.exact import PLANS, PlanFollower
from oracle.ground_truth import GroundTruthPolicy, oracle_k


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

    def max_draft_tokens(self) -> int:
        return self.largest_reachable_k(self.drafters, self.k_max)

    def finish_request(self, request_id: str) -> None:
        super().finish_request(request_id)
        self._last.pop(request_id, None)
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
            t = view.step_time_estimate(drafter if k > 0 else None, k)
        else:
            t = 1.0 + (self.cost_ratios[drafter] if drafter is not None and k > 0 else 0.0)
        last = self._last.get(view.request_id)
        if drafter is not None and k > 0 and last is not None and drafter != last:
            t += self.switch_cost_s
        return t

    def candidates(self, view: RequestView) -> list[tuple[str, int]]:
        """(drafter, oracle k) for every drafter at this position."""
        return [(d, oracle_k(self.drafter_trace(view.request_id, d), view.position, self.k_max))
                for d in self.drafters]

    def pick(self, view: RequestView, options: list[tuple[str, int]]) -> tuple[str | None, int]:
        """The option with the most tokens per unit time; plain decoding when nothing is accepted."""
        best, best_rate = (None, 0), 1.0 / self._time(view, None, 0)
        for d, k in options:
            if k <= 0:
                continue
            rate = (1 + k) / self._time(view, d, k)
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
