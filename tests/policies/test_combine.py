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


def test_adaptive_rule_by_hand():
    """combine_adaptive_rule: tokens per second, n-gram only when strictly better and able to propose. a = 0.5, k = 3:
    1 + 0.5 + 0.25 + 0.125 = 1.875 tokens; a = 0.8, k = 2: 1 + 0.8 + 0.64 = 2.44."""
    from policies.combine import combine_adaptive_rule

    assert combine_adaptive_rule(0.8, 2, 1.0, 0.5, 3, 1.0) == (False, 2)  # 2.44 against 1.875 per second
    assert combine_adaptive_rule(0.8, 2, 1.5, 0.5, 3, 1.0) == (True, 3)  # 1.627 against 1.875
    assert combine_adaptive_rule(0.5, 3, 1.0, 0.5, 3, 1.0) == (False, 3)  # a tie: EAGLE, the first option
    assert combine_adaptive_rule(0.0, 1, 9.0, 1.0, 0, 1.0) == (False, 1)  # no match: n-gram proposes nothing


def test_adaptive_estimates_per_drafter_and_request():
    """observe moves only the observed drafter's estimate of that request; start_request resets a request."""
    pol = CombineAdaptivePolicy(prior_ngram=0.5, prior_eagle=0.6, prior_weight=2.0, decay=0.5)
    pol.observe(Feedback("r", 0, "ngram", 4, proposed=4, accepted=2))
    est = pol.estimates("r")
    assert (est["ngram"].successes, est["ngram"].failures) == (2.0, 1.0)
    assert est["ngram"].value == pytest.approx((2 + 0.5 * 2) / (3 + 2))
    assert (est["eagle3"].successes, est["eagle3"].failures) == (0.0, 0.0)
    assert pol.estimates("s")["ngram"].successes == 0.0
    pol.start_request("r")
    assert pol.estimates("r")["ngram"].successes == 0.0


@pytest.mark.parametrize("cls", [CombineMatchPolicy, CombineAdaptivePolicy])
def test_a_combination_of_one_drafter_with_itself_is_refused(cls):
    with pytest.raises(ValueError, match="ngram and eagle both name drafter 'g'"):
        cls(ngram="g", eagle="g")
