"""Online n-gram/EAGLE combination using only what a server knows at that moment.

Server-visible inputs: the prompt-lookup match length `view.proposal_len[ngram]` (known before
drafting; absent when the trace does not say) and each drafter's recent acceptance on this
request. `combine-match` uses n-gram whenever it has a match of at least `min_match` tokens;
`combine-adaptive` compares expected tokens per unit time of the two, Leviathan's formula on the
running acceptance estimates, priced by `view.step_time_estimate` (or by cost ratios without it).
"""
from __future__ import annotations

from policies.acceptance_estimate import AcceptanceEstimate, check_estimate_params
from policies.base import Choice, Feedback, Policy, RequestView
from traces.expected_tokens import leviathan_tokens


def combine_match_rule(match: int, min_match: int, k_ngram: int, k_eagle: int) -> tuple[bool, int]:
    """(use n-gram, k): n-gram with min(k_ngram, match) drafts when the prompt-lookup match has at least
    `min_match` tokens, else EAGLE with k_eagle. Plain Python; the compiled kernel compiles this same function."""
    if match >= min_match:
        return True, min(k_ngram, match)
    return False, k_eagle


def combine_adaptive_rule(a_eagle: float, k_eagle: int, t_eagle: float, a_ngram: float, k_ngram: int,
                          t_ngram: float) -> tuple[bool, int]:
    """(use n-gram, k): n-gram with k_ngram drafts when k_ngram > 0 and its expected tokens per second (Leviathan's, at
    acceptance a_ngram, step time t_ngram) beat EAGLE's strictly, else EAGLE with k_eagle. Plain Python; the compiled
    kernel compiles this same function."""
    if k_ngram > 0 and leviathan_tokens(a_ngram, k_ngram) / t_ngram > leviathan_tokens(a_eagle, k_eagle) / t_eagle:
        return True, k_ngram
    return False, k_eagle


def missing_match_lengths(policy: Policy, drafters: list[str]) -> str:
    """The error for a policy that reads n-gram match lengths the traces of `drafters` do not carry."""
    return (f"policy {policy.name!r} needs the n-gram match length (proposal_len of drafter(s) {drafters}), which "
            "the traces do not provide; use combine-adaptive")


def _two_drafters(policy: str, ngram, eagle) -> tuple[str, str]:
    """A combination's n-gram and EAGLE drafters, refused where they name one drafter twice."""
    ngram, eagle = str(ngram), str(eagle)
    if ngram == eagle:
        raise ValueError(f"policy {policy!r}: ngram and eagle both name drafter {ngram!r}; a combination chooses "
                         "between two drafters (for one, use the fixed policy or adaptive-k)")
    return ngram, eagle


class CombineMatchPolicy(Policy):
    """n-gram when prompt lookup has a match of >= min_match tokens, else EAGLE."""

    name = "combine-match"
    description = "n-gram when prompt lookup has a match (>= min_match tokens), else EAGLE; server-visible only."

    def __init__(self, ngram: str = "ngram", eagle: str = "eagle3", k_ngram: int = 5, k_eagle: int = 3,
                 min_match: int = 1):
        if k_ngram < 1 or k_eagle < 1 or min_match < 1:
            raise ValueError(f"policy {self.name!r}: k_ngram, k_eagle and min_match must be >= 1")
        self.ngram, self.eagle = _two_drafters(self.name, ngram, eagle)
        self.k_ngram, self.k_eagle, self.min_match = int(k_ngram), int(k_eagle), int(min_match)

    def drafters_used(self) -> tuple[str, ...]:
        return (self.ngram, self.eagle)

    @property
    def needs_match_lengths(self) -> tuple[str, ...]:
        return (self.ngram,)

    def max_draft_tokens(self) -> int:
        return max(self.k_ngram, self.k_eagle)

    def choose(self, view: RequestView) -> Choice:
        match = view.proposal_len.get(self.ngram)
        if match is None:
            raise ValueError(missing_match_lengths(self, [self.ngram]))
        use_ngram, k = combine_match_rule(int(match), self.min_match, self.k_ngram, self.k_eagle)
        return Choice(self.ngram if use_ngram else self.eagle, k)


class CombineAdaptivePolicy(Policy):
    """Per step, the drafter with more expected tokens per unit time from recent acceptance and the match length."""

    name = "combine-adaptive"
    description = ("n-gram or EAGLE per step by expected tokens / step time (recent acceptance of each, "
                   "match length, step-time estimate); server-visible only.")

    def __init__(self, ngram: str = "ngram", eagle: str = "eagle3", k_ngram: int = 5, k_eagle: int = 3,
                 prior_ngram: float = 0.5, prior_eagle: float = 0.6, prior_weight: float = 2.0,
                 decay: float = 0.9, ngram_cost_ratio: float = 0.006, eagle_cost_ratio: float = 0.3):
        where = f"policy {self.name!r}"
        for p in (prior_ngram, prior_eagle):
            check_estimate_params(p, prior_weight, decay, where)
        if k_ngram < 1 or k_eagle < 1:
            raise ValueError(f"{where}: k_ngram and k_eagle must be >= 1")
        if ngram_cost_ratio < 0 or eagle_cost_ratio < 0:
            raise ValueError(f"{where}: cost ratios must be >= 0")
        self.ngram, self.eagle = _two_drafters(self.name, ngram, eagle)
        self.k_ngram, self.k_eagle = int(k_ngram), int(k_eagle)
        self.priors = {self.ngram: float(prior_ngram), self.eagle: float(prior_eagle)}
        self.prior_weight, self.decay = float(prior_weight), float(decay)
        self.cost_ratio = {self.ngram: float(ngram_cost_ratio), self.eagle: float(eagle_cost_ratio)}
        self._est: dict[str, dict[str, AcceptanceEstimate]] = {}

    def drafters_used(self) -> tuple[str, ...]:
        return (self.ngram, self.eagle)

    def max_draft_tokens(self) -> int:
        return max(self.k_ngram, self.k_eagle)

    def estimates(self, request_id: str) -> dict[str, AcceptanceEstimate]:
        """Each drafter's acceptance estimate on this request (made at its first use)."""
        est = self._est.get(request_id)
        if est is None:
            est = self._est[request_id] = {d: AcceptanceEstimate(p, self.prior_weight, self.decay)
                                           for d, p in self.priors.items()}
        return est

    def start_request(self, request_id: str) -> None:
        self._est.pop(request_id, None)

    def finish_request(self, request_id: str) -> None:
        self._est.pop(request_id, None)

    def choose(self, view: RequestView) -> Choice:
        est = self.estimates(view.request_id)
        match = view.proposal_len.get(self.ngram)
        k_n = self.k_ngram if match is None else min(self.k_ngram, int(match))

        def time(d: str, k: int) -> float:
            if view.step_time_estimate is not None:
                return view.step_time_estimate(d, k)
            return 1.0 + self.cost_ratio[d]

        use_ngram, k = combine_adaptive_rule(est[self.eagle].value, self.k_eagle, time(self.eagle, self.k_eagle),
                                             est[self.ngram].value, k_n, time(self.ngram, k_n) if k_n > 0 else 1.0)
        return Choice(self.ngram if use_ngram else self.eagle, k)

    def observe(self, feedback: Feedback) -> None:
        if feedback.drafter in self.priors:
            self.estimates(feedback.request_id)[feedback.drafter].update(feedback.accepted, feedback.proposed)
