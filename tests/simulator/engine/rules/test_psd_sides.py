"""PSD's side rule (simulator/engine/rules/psd_sides.py), plain and compiled: a new request joins the side verified
now (drafted next step) unless it has more running members than the other; checked against the closed form "the
smaller side, the verified one on a tie" and the balance it keeps."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import compiled_kernel
from simulator.engine.rules.psd_sides import join_side

RULE = [pytest.param(join_side, id="plain"), pytest.param(compiled_kernel.join_side, id="compiled")]


@pytest.mark.parametrize("rule", RULE)
@pytest.mark.parametrize("sides, verify_side, expected", [
    ([-1], 0, 0),  # the first request: no one on either side, the verified side
    ([-1], 1, 1),
    ([0, -1], 0, 1),  # side 0 (verified now) has one more: the other
    ([0, 1, -1], 1, 1),  # a tie: the verified side
    ([1, 1, 0, -1], 1, 0),  # side 1 has two, side 0 one: side 0
    ([0, 0, 1, -1], 1, 1),  # side 1 has fewer and is verified now
])
def test_join_side_hand_worked(rule, sides, verify_side, expected):
    side = np.array(sides, np.int64)
    running = np.arange(len(sides), dtype=np.int64)
    assert rule(side, running, len(sides), verify_side) == expected


@settings(max_examples=80, deadline=None)
@given(start=st.lists(st.sampled_from([0, 1]), max_size=10), verify=st.lists(st.sampled_from([0, 1]), max_size=12),
       compiled=st.booleans())
def test_joining_the_smaller_side_keeps_a_balance(start, verify, compiled):
    """From any sides, each new request joins the smaller side (the verified one on a tie): the gap between the
    sides shrinks by one per request until it is at most one, and then stays there."""
    rule = compiled_kernel.join_side if compiled else join_side
    side = np.array(start + [-1] * len(verify), np.int64)
    running = np.arange(len(side), dtype=np.int64)
    for j, vs in enumerate(verify):
        n = len(start) + j + 1
        c = [int((side[:n] == 0).sum()), int((side[:n] == 1).sum())]
        gap = abs(c[0] - c[1])
        got = rule(side, running, n, vs)
        assert got == (vs if c[0] == c[1] else int(c[1] < c[0]))
        side[n - 1] = got
        c[got] += 1
        assert abs(c[0] - c[1]) == (gap - 1 if gap > 0 else 1)
