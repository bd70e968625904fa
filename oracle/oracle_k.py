"""Oracle k: for one drafter, propose exactly the tokens that will be accepted (nothing when none will be).

`plan: greedy` (the reference's) drafts everything that will be accepted at every step; `min-steps` and
`min-time` follow the exact plan of `oracle.exact` (fewest steps, or least time at the engine's step costs),
which may draft fewer at one step to land on a better position for the next.
"""
from __future__ import annotations

import numpy as np

from policies.base import Choice, RequestView
from oracle.exact import PLANS, PlanFollower
from oracle.ground_truth import GroundTruthPolicy
from traces.acceptance import reachable_drafts


class OracleKPolicy(GroundTruthPolicy):
    """Drafts acc_len[p] - 1 tokens with `drafter` (capped by k_max), or follows an exact plan; reads ground truth."""

    name = "oracle-k"
    description = ("ORACLE: one drafter proposing only tokens that will be accepted (plan: greedy = all of them; "
                   "min-steps / min-time = the exact plan).")

    def __init__(self, drafter: str, k_max: int | None = None, plan: str = "greedy"):
        super().__init__()
        if k_max is not None and int(k_max) < 0:
            raise ValueError(f"policy {self.name!r}: k_max must be >= 0 or null, got {k_max}")
        self.drafter = str(drafter)
        self.k_max = None if k_max is None else int(k_max)
        if plan not in PLANS:
            raise ValueError(f"policy {self.name!r}: plan must be one of {PLANS}, got {plan!r}")
        self.plan = plan
        self._follower = None if plan == "greedy" else PlanFollower(plan, [self.drafter], {self.drafter: self.k_max},
                                                                    f"policy {self.name!r}")
        self.by_position = plan != "min-time"  # min-time plans at the first step's time estimate

    def drafters_used(self) -> tuple[str, ...]:
        return (self.drafter,)

    @property
    def time_plan(self) -> PlanFollower | None:
        """Plan min-time's follower when `choose` is this class's (the compiled engine makes the same plans)."""
        return self._follower if self.plan == "min-time" and type(self) is OracleKPolicy else None

    def max_draft_tokens(self) -> int:
        return self.largest_reachable_k(self.drafters_used(), self.k_max)

    def finish_request(self, request_id: str) -> None:
        super().finish_request(request_id)
        if self._follower is not None:
            self._follower.forget(request_id)

    def position_choices(self, request_id: str) -> tuple[np.ndarray, np.ndarray]:
        """greedy: every position's acceptance that drafting reaches (traces.acceptance.reachable_drafts), the
        drafter where that is above 0; min-steps: the exact plan's action at every position."""
        t = self.drafter_trace(request_id, self.drafter)  # a clear error when the drafter is missing
        if self._follower is not None:
            plan = self._follower.plan_of(request_id, self.trace_of(request_id))
            return plan.action_drafter, plan.action_k
        n = t.acc_len.shape[0]
        k = np.asarray(reachable_drafts(t.acc_len, t.proposal_len, self.k_max, np.arange(n), n), dtype=np.int64)
        return np.where(k > 0, 0, -1), k

    def choose(self, view: RequestView) -> Choice:
        if self.by_position:
            return self.tabulated(view)
        self.drafter_trace(view.request_id, self.drafter)  # a clear error when the drafter is missing
        d, k = self._follower.choice(self.trace_of(view.request_id), view)
        return Choice(d, k)
