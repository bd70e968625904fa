"""Sampled verification (leading Bernoulli(1 - tv) run capped by k) and the BE/BD rewards."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from traces.sampled_acceptance import (MissingTVError, check_reward, reward_bd, reward_be, sample_accepted,
                                       tv_windows)


def test_tv_zero_accepts_all_up_to_k_and_tv_one_accepts_none():
    rng = np.random.default_rng(0)
    tv = np.zeros((3, 5))
    assert sample_accepted(tv, np.array([0, 2, 5]), rng).tolist() == [0, 2, 5]
    assert sample_accepted(np.ones((2, 4)), np.array([4, 1]), rng).tolist() == [0, 0]


def test_nan_past_end_stops_the_run():
    tv = np.array([[0.0, 0.0, np.nan, np.nan]])
    assert sample_accepted(tv, np.array([4]), np.random.default_rng(1)).tolist() == [2]


def test_acceptance_frequency_matches_one_minus_tv():
    # one drafted token, tv = 0.3: acceptance rate 0.7 within 4 standard errors
    n = 20000
    acc = sample_accepted(np.full((n, 1), 0.3), np.ones(n, dtype=int), np.random.default_rng(2))
    se = np.sqrt(0.7 * 0.3 / n)
    assert abs(acc.mean() - 0.7) < 4 * se


def test_mean_run_length_matches_leviathan_chain():
    # i.i.d. a = 0.6, k = 3: E[accepted] = a + a^2 + a^3
    n = 20000
    acc = sample_accepted(np.full((n, 3), 0.4), np.full(n, 3), np.random.default_rng(3))
    assert abs(acc.mean() - (0.6 + 0.36 + 0.216)) < 0.03


def test_same_seed_same_draws():
    tv = np.random.default_rng(9).random((50, 4))
    k = np.full(50, 4)
    a = sample_accepted(tv, k, np.random.default_rng(5))
    b = sample_accepted(tv, k, np.random.default_rng(5))
    assert (a == b).all()


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 20), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_accepted_within_zero_and_k(n, kmax, seed):
    rng = np.random.default_rng(seed)
    tv = rng.random((n, kmax))
    k = rng.integers(0, kmax + 1, size=n)
    acc = sample_accepted(tv, k, rng)
    assert ((acc >= 0) & (acc <= k)).all()


def test_bad_inputs_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="rows"):
        sample_accepted(np.zeros((2, 3)), np.array([1]), rng)
    with pytest.raises(ValueError, match=r"k must lie"):
        sample_accepted(np.zeros((1, 3)), np.array([4]), rng)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sample_accepted(np.full((1, 2), 1.5), np.array([2]), rng)


def test_tv_windows_pads_with_nan():
    w = tv_windows(np.array([0.1, 0.2, 0.3]), np.array([0, 2]), 3)
    assert np.allclose(w[0], [0.1, 0.2, 0.3])
    assert w[1, 0] == pytest.approx(0.3) and np.isnan(w[1, 1:]).all()


def test_tv_windows_of_concatenated_traces_stop_at_each_trace_end():
    flat = np.array([0.1, 0.2, 0.3, 0.7, 0.8])  # trace A = [0, 3), trace B = [3, 5)
    w = tv_windows(flat, np.array([1, 0, 1]), 3, starts=np.array([0, 3, 3]), ends=np.array([3, 5, 5]))
    assert np.allclose(w[0, :2], [0.2, 0.3]) and np.isnan(w[0, 2])
    assert np.allclose(w[1, :2], [0.7, 0.8]) and np.isnan(w[1, 2])
    assert w[2, 0] == pytest.approx(0.8) and np.isnan(w[2, 1:]).all()


def test_bd_reward_is_mean_of_one_minus_tv():
    tv = [0.1, 0.5, 0.9, 0.25]
    assert reward_bd(tv) == pytest.approx(np.mean([0.9, 0.5, 0.1, 0.75]))
    assert reward_bd(()) == 0.0


def test_be_reward_is_accepted_over_proposed():
    assert reward_be(2, 4) == 0.5
    assert reward_be(0, 0) == 0.0
    assert np.allclose(reward_be(np.array([1, 3]), np.array([3, 3])), [1 / 3, 1.0])


def test_bd_without_tv_is_refused_and_offers_be():
    with pytest.raises(MissingTVError, match="reward: be"):
        reward_bd(None)
    with pytest.raises(MissingTVError, match="block efficiency"):
        check_reward("bd", has_tv=False)
    check_reward("be", has_tv=False)
    with pytest.raises(ValueError, match="expected one of"):
        check_reward("xyz", has_tv=True)


def test_window_successes_and_block_divergence_by_hand():
    """The loop rules the engine compiles: a TV window over a flattened table (NaN past the trace's end), the leading
    successes u < 1 - tv capped by k, and MetaSD's block divergence mean(1 - tv) over the drafted positions."""
    from traces.sampled_acceptance import block_divergence, leading_successes, tv_window_rows

    tv = np.array([0.9, 0.1, 0.2, 0.5, 0.4, 0.3], np.float32)  # trace A = tv[0:4], trace B = tv[4:6]
    out = tv_window_rows(tv, np.array([0, 4]), np.array([1, 1]), np.array([4, 6]), 3, np.empty((2, 3)))
    assert np.allclose(out[0], [0.1, 0.2, 0.5]) and out[1, 0] == np.float32(0.3) and np.isnan(out[1, 1:]).all()
    u = np.array([[0.5, 0.7, 0.2], [0.1, 0.0, 0.0]])
    # row 0: 0.5 < 0.9, 0.7 < 0.8, then 0.2 < 0.5 but k = 2 stops it; row 1: 0.1 < 0.7, then NaN: never a success
    assert leading_successes(u, out, np.array([2, 3]), np.zeros(2, np.int64)).tolist() == [2, 1]
    assert leading_successes(u, out, np.array([3, 0]), np.zeros(2, np.int64)).tolist() == [3, 0]
    # trace A from position 1, 3 drafts: (0.9 + 0.8 + 0.5) / 3; trace B from 1, 3 drafts: one position left
    assert block_divergence(tv.astype(np.float64), 0, 1, 4, 3) == pytest.approx(2.2 / 3, rel=1e-7)
    assert block_divergence(tv, 4, 1, 6, 3) == pytest.approx(0.7, rel=1e-7)
    assert block_divergence(tv, 4, 2, 6, 3) == 0.0  # past the end: no drafted position
