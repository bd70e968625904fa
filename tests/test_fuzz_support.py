"""The fuzz tests' own machinery: a hang is caught by the time limit, and each outcome is counted right."""
from __future__ import annotations

import pytest

from tests.fuzz_support import FuzzTally


def _spin():
    import simpy

    env = simpy.Environment()

    def forever(env):
        while True:
            yield env.timeout(0.0)  # a zero (or NaN) step: simulated time never advances

    env.process(forever(env))
    env.run(until=1.0)


def test_outcomes_are_classified():
    t = FuzzTally("self-check")
    assert t.run("spin", _spin, clean=(ValueError,), must_reject=False, cpu_s=0.3) == "hang"
    assert t.run("clean", lambda: int("x"), clean=(ValueError,), must_reject=True) == "rejected"
    assert t.run("empty message", lambda: (_ for _ in ()).throw(ValueError("")), clean=(ValueError,),
                 must_reject=True) == "traceback"
    assert t.run("other type", lambda: {}["k"], clean=(ValueError,), must_reject=False) == "traceback"
    assert t.run("accepted bad", lambda: 1, clean=(ValueError,), must_reject=True) == "invalid-accepted"
    assert t.run("inconsistent", lambda: 1, clean=(ValueError,), must_reject=False,
                 check_accepted=lambda r: (_ for _ in ()).throw(AssertionError("no"))) == "invalid-accepted"
    assert t.run("fine", lambda: 1, clean=(ValueError,), must_reject=False) == "accepted"
    with pytest.raises(AssertionError, match="traceback 2, hang 1, invalid-accepted 2"):
        t.assert_clean(min_cases=1)
