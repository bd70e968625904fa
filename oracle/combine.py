"""Oracle n-gram/EAGLE combine: per position, the better of the two at its oracle k.

`costs: reference` picks the option with the most emitted tokens, as "Performance or Illusion?"
does; that paper then charges only the n-gram's drafting cost, which a run reproduces by pricing
the EAGLE drafter like the n-gram one (see experiments/configs/adaptive_combine.yaml).
`costs: honest` picks by tokens per unit time with each drafter's real cost (and switching cost).
Both are greedy, step by step. `plan: min-steps` (the exact counterpart of `reference`) and `plan: min-time`
(of `honest`, at the engine's step costs) follow the exact plan of `oracle.exact`; `costs` is then unused.
"""
from __future__ import annotations

import numpy as np

from policies.base import Choice, RequestView
from oracle.best_drafter import OracleBestDrafterPolicy
from traces.acceptance import reachable_drafts

COST_MODES = ("reference", "honest")


class OracleCombinePolicy(OracleBestDrafterPolicy):
    """Best of n-gram and EAGLE per position; ties go to the n-gram (the cheaper drafter)."""

    name = "oracle-combine"
    description = "ORACLE: per position the better of n-gram and EAGLE (reference: most tokens; honest: per time)."

    def __init__(self, ngram: str = "ngram", eagle: str = "eagle3", costs: str = "reference",
                 k_max: int | None = None, switch_cost_s: float = 0.0, plan: str = "greedy"):
        if costs not in COST_MODES:
            raise ValueError(f"policy {self.name!r}: costs must be one of {COST_MODES}, got {costs!r}")
        super().__init__([ngram, eagle], k_max=k_max, switch_cost_s=switch_cost_s, plan=plan)
        self.costs = costs
        self.by_position = plan == "min-steps" or (plan == "greedy" and costs == "reference")

    @property
    def greedy_by_rate(self) -> bool:
        """`honest` and greedy: `pick` over `candidates` (OracleBestDrafterPolicy.greedy_by_rate)."""
        return type(self) is OracleCombinePolicy and self.plan == "greedy" and not self.by_position

    @property
    def time_plan(self):
        """OracleBestDrafterPolicy.time_plan: this class's `choose` follows the same plan."""
        return self._follower if self.plan == "min-time" and type(self) is OracleCombinePolicy else None

    def position_choices(self, request_id: str) -> tuple[np.ndarray, np.ndarray]:
        """greedy `reference`: at every position the drafter whose acceptance drafting reaches further
        (traces.acceptance.reachable_drafts), the n-gram on a tie, none where neither reaches a token; min-steps:
        the exact plan."""
        if self.plan != "greedy":
            return super().position_choices(request_id)
        tn, te = (self.drafter_trace(request_id, d) for d in self.drafters)
        n = tn.acc_len.shape[0]
        kn, ke = (np.asarray(reachable_drafts(t.acc_len, t.proposal_len, self.k_max, np.arange(n), n),
                             dtype=np.int64) for t in (tn, te))
        eagle = ke > kn
        return np.where(np.maximum(kn, ke) > 0, eagle.astype(np.int64), -1), np.where(eagle, ke, kn)

    def choose(self, view: RequestView) -> Choice:
        if self.by_position:
            return self.tabulated(view)
        if self._follower is not None:
            return self.planned(view)
        d, k = self.pick(view, self.candidates(view))  # honest: tokens per unit time
        if d is not None:
            self._last[view.request_id] = d
        return Choice(d, k)
