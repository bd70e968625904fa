"""Leviathan's expected tokens per step and wall-time gain, against textbook values and a seeded simulation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from traces.expected_tokens import expected_tokens, leviathan_tokens, wall_time_gain


def test_textbook_values():
    assert expected_tokens(0.8, 5) == pytest.approx(3.689, abs=1e-3)  # SD-FACTS: a = 0.8, k = 5
    assert wall_time_gain(0.8, 5, 0.0) == pytest.approx(3.69, abs=5e-3)  # ... 3.69x at c = 0 (Table 1)
    assert wall_time_gain(0.8, 5, 0.1) == pytest.approx(3.689 / 1.5, abs=1e-3)
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 1) == 1.5
    assert expected_tokens(0.3, 0) == 1.0


def test_arrays_broadcast():
    out = expected_tokens(np.array([0.0, 0.5, 1.0]), np.array([[1], [2]]))
    assert out.shape == (2, 3)
    assert out[1].tolist() == pytest.approx([1.0, 1.75, 3.0])


def test_precise_near_one():
    a = 1.0 - 1e-10
    assert expected_tokens(a, 7) == pytest.approx(8.0 - 28e-10, rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.floats(0.0, 0.97), st.integers(0, 8))
def test_matches_a_simulated_verify_step(a, k):
    # accepted drafts = leading run of Bernoulli(a) successes, capped at k; emitted = 1 + accepted
    rng = np.random.default_rng(0)
    hits = rng.random((40_000, max(k, 1)))[:, :k] < a
    emitted = 1 + np.cumprod(hits, axis=1).sum(axis=1)
    # 4 standard errors, plus room for events too rare to show up in 40,000 draws (a ~ 1e-8 gives std 0)
    assert expected_tokens(a, k) == pytest.approx(emitted.mean(), abs=4 * emitted.std() / 200 + 3 * k / 40_000)


@pytest.mark.parametrize("a,k", [(1.2, 3), (-0.1, 1), (float("nan"), 2), (0.5, -1)])
def test_bad_inputs_are_errors(a, k):
    with pytest.raises(ValueError):
        expected_tokens(a, k)


def test_bad_cost_ratio_is_an_error():
    with pytest.raises(ValueError, match="cost ratio"):
        wall_time_gain(0.5, 3, -1.0)


@settings(max_examples=300, deadline=None)
@given(a=st.floats(0.0, 1.0), k=st.integers(0, 40))
def test_one_value_by_libm_is_the_series_and_the_array_form_applies_it(a, k):
    """leviathan_tokens (one (a, k), libm; policies' rules) is the series 1 + a + ... + a^k, summed exactly from a's
    binary value as a fraction, within 1e-13 relative; expected_tokens gives the same double, alone or in an array."""
    from fractions import Fraction

    exact = float(sum(Fraction(a) ** j for j in range(k + 1)))
    got = leviathan_tokens(a, k)
    assert got == pytest.approx(exact, rel=1e-13, abs=0.0)
    assert expected_tokens(a, k) == got
    assert expected_tokens(np.array([a, 0.5]), np.array([k, 1]))[0] == got


def test_one_value_edges():
    assert leviathan_tokens(0.0, 4) == 1.0 and leviathan_tokens(1e-300, 4) == 1.0  # log1p(-1) never taken
    assert leviathan_tokens(1.0, 4) == 5.0 and leviathan_tokens(0.3, 0) == 1.0
    assert leviathan_tokens(0.8, 5) == pytest.approx(3.689, abs=1e-3)
