"""Adaptive k: Leviathan expected tokens over estimated step time, from running acceptance."""
import numpy as np
import pytest

from policies.adaptive_k import AdaptiveKPolicy
from policies.base import BatchView, Feedback, RequestView


def feed(pol, rid, accepted, proposed, n):
    for t in range(n):
        pol.observe(Feedback(rid, t, "d", proposed, proposed=proposed, accepted=accepted))


def test_high_acceptance_cheap_drafts_gives_large_k_low_gives_none():
    pol = AdaptiveKPolicy("d", k_max=8, draft_cost_ratio=0.1)
    pol.start_request("good")
    pol.start_request("bad")
    feed(pol, "good", 4, 4, 30)   # every token accepted
    feed(pol, "bad", 0, 4, 30)    # nothing accepted
    assert pol.choose(RequestView("good", 0, 1)).k == 8
    c = pol.choose(RequestView("bad", 0, 1))
    assert c.k == 0 and c.drafter is None


def test_k_falls_when_step_time_grows_with_k():
    pol = AdaptiveKPolicy("d", k_max=8)
    pol.start_request("r")
    feed(pol, "r", 2, 4, 30)  # acceptance about 2/3
    cheap = pol.choose(RequestView("r", 0, 1, step_time_estimate=lambda d, k: 1.0 + 0.01 * k)).k
    dear = pol.choose(RequestView("r", 0, 64, step_time_estimate=lambda d, k: 1.0 + 0.5 * k)).k
    assert cheap > dear >= 0
    a = pol._estimate("r").value
    # independent of traces.expected_tokens: the mean tokens of one step is the sum of P(first i drafts accepted)
    rates = [sum(a**i for i in range(k + 1)) / (1.0 + 0.5 * k) for k in range(9)]
    assert dear == int(np.argmax(rates))


def test_batch_choice_equals_per_request_choice_and_respects_proposal_cap():
    pol = AdaptiveKPolicy("d", k_max=6, draft_cost_ratio=0.0)
    for rid in ("a", "b"):
        pol.start_request(rid)
    feed(pol, "a", 3, 3, 20)
    est = lambda d, k: 1.0 + 0.02 * k  # noqa: E731
    view = BatchView(0.0, ("d",), ["a", "b"], np.array([0, 0]), [None, None],
                     proposal_len={"d": np.array([2, 6])}, step_time_estimate=est)
    d, k = pol.choose_batch(view)
    singles = [pol.choose(view.request(i)).k for i in range(2)]
    assert k.tolist() == singles
    assert k[0] <= 2


def test_bad_parameters():
    with pytest.raises(ValueError, match="prior"):
        AdaptiveKPolicy("d", prior=1.5)
    with pytest.raises(ValueError, match="k_max"):
        AdaptiveKPolicy("d", k_max=0)
    with pytest.raises(ValueError, match="decay"):
        AdaptiveKPolicy("d", decay=0)


def test_adaptive_ks_reads_each_requests_row_and_cap_by_hand():
    """adaptive_ks over three requests at times 1 + 0.5 k (k <= 3): estimates (s, f) with prior 0.5 and weight 2 give
    a = 0.1 (row 0: 0, 8), 0.9 (row 1: 8, 0) and 0.5 (row 2: no evidence). Expected tokens per second at a = 0.9:
    k = 0..3 -> 1, 1.27, 1.36, 1.37: k = 3; at a = 0.5: 1, 1, 0.875, 0.75: k = 0 (the first on the tie);
    at a = 0.1: k = 0. Capped at the match lengths cap[pos[j]], row 1 stops at its match of 2; shared, every
    request reads row 0."""
    from policies.adaptive_k import adaptive_ks

    est_s, est_f = np.array([0.0, 8.0, 0.0]), np.array([8.0, 0.0, 0.0])
    times = 1.0 + 0.5 * np.arange(4)
    ks = np.full(3, -1, dtype=np.int64)
    adaptive_ks(np.array([0, 1, 2]), 3, est_s, est_f, False, 0.5, 2.0, times, 3, False, np.zeros(1, np.int64),
                np.zeros(3, np.int64), ks)
    assert ks.tolist() == [0, 3, 0]
    cap, pos = np.array([4, 2, 0, 9]), np.array([3, 1, 0])
    adaptive_ks(np.array([2, 1, 0]), 3, est_s, est_f, False, 0.5, 2.0, times, 3, True, cap, pos, ks)
    assert ks.tolist() == [0, 2, 0]  # row 2, then row 1 capped at cap[1] = 2, then row 0
    adaptive_ks(np.array([2, 1, 0]), 3, est_s[1:], est_f[1:], True, 0.5, 2.0, times, 3, False, cap, pos, ks)
    assert ks.tolist() == [3, 3, 3]  # shared: row 0 of the arrays given (a = 0.9) for every request
