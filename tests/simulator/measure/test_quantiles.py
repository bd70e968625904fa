"""Percentiles without a copy (simulator/measure/quantiles.py): equal to np.percentile bit for bit, on the window
path (forced here with small sizes), its fallback and the copy path; the input is never changed."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simulator.measure import quantiles
from simulator.measure.quantiles import percentiles

PCTS = (50, 90, 99)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(v=arrays(np.float64, st.integers(1, 400), elements=finite),
       pcts=st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=5),
       sample_size=st.integers(1, 64), window=st.integers(0, 8))
def test_window_path_equals_numpy(v, pcts, sample_size, window):
    before = v.copy()
    got = percentiles(v, pcts, copy_below=0, sample_size=sample_size, window_samples=window)
    want = np.percentile(v, pcts)
    assert np.array_equal(got, want), (got, want)
    assert np.array_equal(v, before)  # the input is left as it was, order included


@settings(max_examples=100, deadline=None)
@given(v=arrays(np.float64, st.integers(1, 300), elements=st.sampled_from([0.0, 0.5, 1.0, 2.0, 1e-3])),
       window=st.integers(0, 3))
def test_many_ties_equal_numpy(v, window):
    got = percentiles(v, PCTS, copy_below=0, sample_size=16, window_samples=window)
    assert np.array_equal(got, np.percentile(v, PCTS))


def _no_copy(v, pcts):
    raise AssertionError("the window path missed and fell back to a copy")


@settings(max_examples=200, deadline=None)
@given(v=arrays(np.float64, st.integers(2, 300), elements=finite), sample_size=st.integers(1, 32))
def test_windows_as_wide_as_the_sample_always_answer_without_a_copy(v, sample_size):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quantiles, "_by_copy", _no_copy)
        got = percentiles(v, PCTS, copy_below=0, sample_size=sample_size, window_samples=sample_size + 1)
    assert np.array_equal(got, np.percentile(v, PCTS))


def test_a_large_array_on_the_default_sizes_equals_numpy_and_is_not_changed(monkeypatch):
    monkeypatch.setattr(quantiles, "_by_copy", _no_copy)  # the windows answer: no copy
    rng = np.random.default_rng(7)
    # a periodic block structure as a run's ITLs have (a batch's gaps together), plus a heavy tail
    v = np.repeat(rng.gamma(2.0, 0.004, size=40_000), 64)[: 2_500_000] + rng.pareto(3.0, size=2_500_000) * 1e-4
    before = v.copy()
    assert np.array_equal(percentiles(v, PCTS), np.percentile(v, PCTS))
    assert np.array_equal(v, before)


def test_a_hand_worked_case():
    # 11 values 0..10 (shuffled): p50 is the 6th smallest (5.0); p90 at position 9.0 -> 9.0; p99 at 9.9 -> 9.9
    v = np.array([3.0, 10.0, 0.0, 7.0, 1.0, 9.0, 2.0, 8.0, 4.0, 6.0, 5.0])
    got = percentiles(v, PCTS, copy_below=0, sample_size=4, window_samples=1)
    assert got.tolist() == pytest.approx([5.0, 9.0, 9.9], abs=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="no values"):
        percentiles(np.zeros(0), PCTS)
    with pytest.raises(ValueError, match="1-D"):
        percentiles(np.zeros((2, 2)), PCTS)
