"""Oracle n-gram/EAGLE combine: per position, the better of the two at its oracle k.

`costs: reference` picks the option with the most emitted tokens, as "Performance or Illusion?"
does; that paper then charges only the n-gram's drafting cost, which a run reproduces by pricing
the EAGLE drafter like the n-gram one (see experiments/configs/adaptive_combine.yaml).
`costs: honest` picks by tokens per unit time with each drafter's real cost (and switching cost).
Both are greedy, step by step. `plan: min-steps` (the exact counterpart of `reference`) and `plan: min-time`
(of `honest`, at the engine's step costs) follow the exact plan of `oracle.exact`; `costs` is then unused.
"""
from __future__ import annotations

from policies.base import Choice, RequestView
from oracle.best_drafter import OracleBestDrafterPolicy

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

    def choose(self, view: RequestView) -> Choice:
        if self._follower is not None:
            return self.planned(view)
        options = self.candidates(view)
        if self.costs == "honest":
            d, k = self.pick(view, options)
            if d is not None:
                self._last[view.request_id] = d
            return Choice(d, k)
        (n, kn), (e, ke) = options
        if max(kn, ke) <= 0:
            return Choice(None, 0)
        return Choice(n, kn) if kn >= ke else Choice(e, ke)
