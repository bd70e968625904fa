"""Online n-gram/EAGLE combination from server-visible information only."""
import pytest

from policies.base import Feedback, RequestView
from policies.combine import CombineAdaptivePolicy, CombineMatchPolicy


def test_match_policy_uses_ngram_only_with_a_match():
    pol = CombineMatchPolicy(k_ngram=5, k_eagle=3, min_match=2)
    assert pol.choose(RequestView("r", 0, 1, proposal_len={"ngram": 7})).drafter == "ngram"
    assert pol.choose(RequestView("r", 0, 1, proposal_len={"ngram": 3})).k == 3
    assert pol.choose(RequestView("r", 0, 1, proposal_len={"ngram": 1})).drafter == "eagle3"
    with pytest.raises(ValueError, match="combine-adaptive"):
        pol.choose(RequestView("r", 0, 1))


def test_adaptive_prefers_the_drafter_that_recently_worked():
    pol = CombineAdaptivePolicy(prior_weight=1.0)
    pol.start_request("r")
    for t in range(20):
        pol.observe(Feedback("r", t, "ngram", 5, proposed=5, accepted=5))
        pol.observe(Feedback("r", t, "eagle3", 3, proposed=3, accepted=0))
    assert pol.choose(RequestView("r", 0, 1, proposal_len={"ngram": 5})).drafter == "ngram"
    # no match: n-gram cannot propose, whatever its record
    assert pol.choose(RequestView("r", 0, 1, proposal_len={"ngram": 0})).drafter == "eagle3"
    pol.start_request("s")
    for t in range(20):
        pol.observe(Feedback("s", t, "ngram", 5, proposed=5, accepted=0))
        pol.observe(Feedback("s", t, "eagle3", 3, proposed=3, accepted=3))
    assert pol.choose(RequestView("s", 0, 1, proposal_len={"ngram": 5})).drafter == "eagle3"


def test_adaptive_prices_with_the_step_time_estimate():
    pol = CombineAdaptivePolicy(prior_ngram=0.6, prior_eagle=0.6)
    pol.start_request("r")
    dear_eagle = lambda d, k: 1.0 if d == "ngram" else 3.0  # noqa: E731
    dear_ngram = lambda d, k: 3.0 if d == "ngram" else 1.0  # noqa: E731
    assert pol.choose(RequestView("r", 0, 1, proposal_len={"ngram": 5}, step_time_estimate=dear_eagle)).drafter == "ngram"
    assert pol.choose(RequestView("r", 0, 1, proposal_len={"ngram": 5}, step_time_estimate=dear_ngram)).drafter == "eagle3"
