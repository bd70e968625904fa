"""The exponential-frontier model: each system's optimum, the SD/PSD ratio, and where 1.59 holds."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from oracle.frontier import (ASSUMPTIONS, frontier_tokens, frontier_point,
                             frontier_summary)


def _brute(x, k, psd):
    u = np.linspace(0, 40 + 4 * x, 400_001)
    e = 1 + (1 - np.exp(-u)) if k == 1 else frontier_tokens(u, k)
    obj = (np.maximum(u, x) if psd else u + x) / e
    return float(obj.min()) / x


@settings(max_examples=25, deadline=None)
@given(st.floats(0.05, 20), st.sampled_from([1, 2, 3, 5]))
def test_optima_match_a_brute_force_grid(x, k):
    p = frontier_point(x, k)
    assert p.sd_time_per_token_over_v == pytest.approx(_brute(x, k, psd=False), rel=1e-4)
    assert p.psd_time_per_token_over_v == pytest.approx(_brute(x, k, psd=True), rel=1e-4)
    assert 1.0 <= p.ratio <= 2.0 + 1e-9


@settings(max_examples=25, deadline=None)
@given(st.floats(0.05, 20))
def test_k1_closed_forms(x):
    # k = 1: PSD drafts exactly as long as it verifies (t = V); SD's optimum solves 2 e^u - 1 = u + x
    # (first-order condition of (u + x) / (2 - e^-u)), or u = 0 when that has no positive root.
    p = frontier_point(x, 1)
    assert p.psd_best_t_over_v == pytest.approx(1.0, abs=1e-4)
    u = p.sd_best_t_over_v * x
    if x > 1.0:
        assert 2 * np.exp(u) - 1 == pytest.approx(u + x, rel=1e-4)
    else:
        assert u == pytest.approx(0.0, abs=1e-4)


def test_ratio_tends_to_one_at_both_ends():
    for k in (1, 3):
        assert frontier_point(1e-3, k).ratio < 1.01
        assert frontier_point(200.0, k).ratio < 1.05


def test_claim_holds_near_the_papers_point_and_fails_away_from_it():
    assert frontier_point(1.68, 1).meets_claim
    assert not frontier_point(0.2, 1).meets_claim
    assert not frontier_point(10.0, 1).meets_claim


def test_summary_interval_ends_sit_on_1_59():
    s = frontier_summary(k=1)
    assert s.claim_holds_from is not None and s.claim_holds_from < s.argmax_alpha_v < s.claim_holds_to
    assert frontier_point(s.claim_holds_from, 1).ratio == pytest.approx(1.59, abs=1e-6)
    assert frontier_point(s.claim_holds_to, 1).ratio == pytest.approx(1.59, abs=1e-6)
    assert s.max_ratio >= frontier_point(s.argmax_alpha_v * 1.1, 1).ratio
    assert s.ratio_at_low_end < 1.59 and s.ratio_at_high_end < 1.59
    assert "exp(-alpha t)" in s.assumptions and s.assumptions == ASSUMPTIONS


def test_bad_inputs():
    with pytest.raises(ValueError):
        frontier_point(0.0)
    with pytest.raises(ValueError):
        frontier_point(1.0, k=0)
