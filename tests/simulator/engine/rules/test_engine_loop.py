"""vLLM V1's engine-loop gap rule (simulator/engine/rules/engine_loop.py), plain and compiled: the gap follows a busy
step only while requests are running or waiting."""
from __future__ import annotations

import pytest

from simulator.engine.rules.engine_loop import engine_loop_gap


@pytest.fixture(params=["plain", "compiled"])
def rule(request):
    if request.param == "plain":
        return engine_loop_gap
    from simulator.engine import compiled_kernel
    return compiled_kernel._engine_loop_gap


@pytest.mark.parametrize("busy, gap, running, waiting, expected", [
    (True, 0.5, 2, 0, 0.5),  # after a step, requests still running: the gap
    (True, 0.5, 0, 3, 0.5),  # only waiting ones: the gap too
    (True, 0.5, 0, 0, 0.0),  # nothing left: idle at once, no gap
    (False, 0.5, 2, 1, 0.0),  # no step just ran (start, or after idling): inputs at once
    (True, 0.0, 2, 1, 0.0),  # no overhead configured
])
def test_gap_hand_worked(rule, busy, gap, running, waiting, expected):
    assert rule(busy, gap, running, waiting) == expected
