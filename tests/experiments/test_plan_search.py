"""The bisection rule on its own: where it lands against a known threshold, and the stated confidence."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.plan_search import Bisection, false_accept_probability, sustainable


@given(ceiling=st.floats(0.1, 1e4), frac=st.floats(0.0, 1.5), steps=st.integers(1, 20))
@settings(max_examples=200, deadline=None)
def test_bisection_brackets_a_monotone_threshold(ceiling, frac, steps):
    threshold = frac * ceiling
    b = Bisection(ceiling, steps)
    tested = []
    while not b.done:
        rate = b.next_rate()
        tested.append(rate)
        b.record(rate, rate <= threshold)
    if threshold >= ceiling:
        assert b.at_ceiling and b.lo == ceiling and tested == [ceiling]
        return
    assert len(tested) == 1 + steps
    assert b.lo <= threshold < b.hi
    assert b.tolerance == pytest.approx(ceiling / 2 ** steps)


def test_record_must_answer_the_asked_rate():
    b = Bisection(8.0, 2)
    with pytest.raises(ValueError, match="expected the outcome at 8.0"):
        b.record(4.0, True)
    with pytest.raises(ValueError, match="positive finite"):
        Bisection(0.0, 3)


def test_rule_and_its_confidence():
    assert sustainable([True, True, False], 2) and not sustainable([True, False, False], 2)
    assert false_accept_probability(3, 3) == pytest.approx(0.125)
    assert false_accept_probability(3, 2) == pytest.approx(0.5)
    assert false_accept_probability(5, 4, 0.9) == pytest.approx(0.9 ** 5 + 5 * 0.9 ** 4 * 0.1)
