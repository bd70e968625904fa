"""Acceptance arithmetic: acc_len runs, TV distance on known distributions, sampled acceptance."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from calibration.acceptance_math import acc_len_from_matches, greedy_acc_len, sampled_acc_len, tv_distance


def test_acc_len_small_example():
    assert acc_len_from_matches(np.array([True, True, False, True, False])).tolist() == [3, 2, 1, 2, 1]


def test_acc_len_all_match_reaches_one_past_the_end():
    assert acc_len_from_matches(np.array([True, True, True])).tolist() == [4, 3, 2]


@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_acc_len_equals_brute_force_run(match):
    got = acc_len_from_matches(np.array(match))
    for p in range(len(match)):
        run = 0
        while p + run < len(match) and match[p + run]:
            run += 1
        assert got[p] == run + 1


def test_greedy_acc_len_compares_tokens():
    assert greedy_acc_len(np.array([5, 6, 9]), np.array([5, 6, 7])).tolist() == [3, 2, 1]
    with pytest.raises(ValueError, match="differ in shape"):
        greedy_acc_len(np.array([1, 2]), np.array([1]))


def test_tv_on_known_distributions():
    assert tv_distance([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)
    assert tv_distance([0.5, 0.5], [0.5, 0.5]) == pytest.approx(0.0)
    assert tv_distance([0.7, 0.2, 0.1], [0.4, 0.4, 0.2]) == pytest.approx(0.3)  # (0.3 + 0.2 + 0.1) / 2


@given(st.lists(st.floats(0.01, 1.0), min_size=2, max_size=8), st.lists(st.floats(0.01, 1.0), min_size=2, max_size=8))
def test_tv_is_one_minus_overlap(a, b):
    n = min(len(a), len(b))
    p, q = np.array(a[:n]) / sum(a[:n]), np.array(b[:n]) / sum(b[:n])
    assert tv_distance(p, q) == pytest.approx(1.0 - np.minimum(p, q).sum())


def test_sampled_acceptance_extremes_and_rate():
    rng = np.random.default_rng(0)
    assert sampled_acc_len(np.zeros(4), rng).tolist() == [5, 4, 3, 2]
    assert sampled_acc_len(np.ones(4), rng).tolist() == [1, 1, 1, 1]
    acc = sampled_acc_len(np.full(20000, 0.3), np.random.default_rng(1))
    # acc_len >= 2 exactly where the position is accepted: rate 1 - tv
    assert np.mean(acc >= 2) == pytest.approx(0.7, abs=0.02)
