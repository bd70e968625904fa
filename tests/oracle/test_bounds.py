"""Analytic PSD pipeline bounds and Leviathan's expected tokens."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from oracle.bounds import (pipeline_bounds, pipeline_gain, pipeline_saving,
                           saving_band)

times = st.floats(min_value=1e-4, max_value=1e3, allow_nan=False, allow_infinity=False)


def test_hand_values():
    assert pipeline_gain(1.0, 1.0) == 2.0
    assert pipeline_saving(1.0, 1.0) == 0.5
    assert pipeline_gain(0.5, 2.0) == pytest.approx(1.25)
    assert pipeline_saving(0.5, 2.0) == pytest.approx(0.2)
    assert pipeline_gain(0.0, 3.0) == 1.0 and pipeline_saving(0.0, 3.0) == 0.0  # free drafting: nothing to hide


@given(times, times)
def test_gain_and_saving_properties(t, v):
    g, s = pipeline_gain(t, v), pipeline_saving(t, v)
    assert 1.0 <= g <= 2.0
    assert 0.0 <= s <= 0.5
    assert s == pytest.approx(1.0 - 1.0 / g)
    assert g == pytest.approx(pipeline_gain(v, t))  # symmetric in draft and verify


def test_saving_band_matches_design_figures():
    lo, hi = saving_band(0.37)
    assert lo == pytest.approx(0.587, abs=1e-3)
    assert hi == pytest.approx(1.703, abs=1e-3)
    assert saving_band(0.5) == (1.0, 1.0)


@given(st.floats(min_value=0.01, max_value=100))
def test_band_is_exactly_where_saving_reaches_37(r):
    lo, hi = saving_band(0.37)
    if abs(r - lo) > 1e-9 and abs(r - hi) > 1e-9:
        assert (lo <= r <= hi) == (pipeline_saving(r, 1.0) >= 0.37)
        assert pipeline_bounds(r, 1.0).within_37_band == (lo <= r <= hi)


@pytest.mark.parametrize("t,v", [(-1, 1), (1, math.inf), (0, 0), (math.nan, 1)])
def test_bad_times_are_errors(t, v):
    with pytest.raises(ValueError):
        pipeline_gain(t, v)


def test_bad_saving_band():
    with pytest.raises(ValueError):
        saving_band(0.6)
