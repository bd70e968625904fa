"""PSD's side rules (simulator/engine/rules/psd_sides.py), plain and compiled: a new request joins the side verified
now (drafted next step) unless it has more running members than the other; checked against the closed form "the
smaller side, the verified one on a tie" and the balance it keeps. A step splits its decodes into the verified and
drafted sides, or verifies all (plain SD) when a side is empty or the batch is under split_min_batch; after it the
verified side's proposals are used up and the drafted side's kept."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import compiled_kernel
from simulator.engine.rules.psd_sides import carry_proposals, join_side, next_verify_side, split_sides

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


SPLIT = [pytest.param(split_sides, id="plain"), pytest.param(compiled_kernel.split_sides, id="compiled")]


def _split(rule, dec, sides, verify_side, split_min):
    dec = np.array(dec, np.int64)
    V, D = np.full(len(dec), -7, np.int64), np.full(len(dec), -7, np.int64)
    nv, nd, fallback = rule(dec, len(dec), np.array(sides, np.int64), verify_side, split_min, V, D)
    return V[:nv].tolist(), D[:nd].tolist(), bool(fallback)


@pytest.mark.parametrize("rule", SPLIT)
@pytest.mark.parametrize("dec, sides, verify_side, split_min, expected", [
    # requests 0..4 on sides [0, 1, 0, 1, 1]; decoding 4, 0, 3, 2 in admission order
    ([4, 0, 3, 2], [0, 1, 0, 1, 1], 0, 0, ([0, 2], [4, 3], False)),
    ([4, 0, 3, 2], [0, 1, 0, 1, 1], 1, 0, ([4, 3], [0, 2], False)),
    ([4, 0, 3, 2], [0, 1, 0, 1, 1], 1, 4, ([4, 3], [0, 2], False)),  # 4 decoding: not under split_min 4
    ([4, 0, 3, 2], [0, 1, 0, 1, 1], 1, 5, ([4, 0, 3, 2], [], True)),  # under split_min: plain SD for all
    ([1, 3, 4], [0, 1, 0, 1, 1], 0, 0, ([1, 3, 4], [], True)),  # nobody on the verified side: plain SD
    ([0, 2], [0, 1, 0, 1, 1], 0, 0, ([0, 2], [], True)),  # nobody drafted: plain SD
    ([], [0, 1], 0, 0, ([], [], True)),
])
def test_split_sides_hand_worked(rule, dec, sides, verify_side, split_min, expected):
    assert _split(rule, dec, sides, verify_side, split_min) == expected


@settings(max_examples=80, deadline=None)
@given(sides=st.lists(st.sampled_from([0, 1]), max_size=12), data=st.data(), verify_side=st.sampled_from([0, 1]),
       split_min=st.integers(0, 8), compiled=st.booleans())
def test_split_sides_partitions_the_decodes_in_order(sides, data, verify_side, split_min, compiled):
    """The verified and drafted sides are the decodes on the verified side and the others, each in admission order;
    unless a side is empty or fewer than split_min decode, then all are verified and none drafted."""
    dec = data.draw(st.permutations(range(len(sides))))
    dec = dec[:data.draw(st.integers(0, len(dec)))]
    V, D, fallback = _split(compiled_kernel.split_sides if compiled else split_sides, dec, sides, verify_side,
                            split_min)
    on_v = [i for i in dec if sides[i] == verify_side]
    off_v = [i for i in dec if sides[i] != verify_side]
    assert fallback == (not on_v or not off_v or len(dec) < split_min)
    assert (V, D) == ((list(dec), []) if fallback else (on_v, off_v))


@pytest.mark.parametrize("rule", [pytest.param(next_verify_side, id="plain"),
                                  pytest.param(compiled_kernel.next_verify_side, id="compiled")])
@pytest.mark.parametrize("verify_side, n_verified, n_drafted, expected", [
    (0, 3, 2, 1), (1, 3, 2, 0),  # both sides ran: the roles flip
    (0, 4, 0, 0), (1, 4, 0, 1),  # plain SD for all (nothing drafted): the same side is verified again
    (0, 0, 2, 0), (1, 0, 0, 1),  # nothing verified
])
def test_next_verify_side_flips_only_when_both_sides_ran(rule, verify_side, n_verified, n_drafted, expected):
    assert rule(verify_side, n_verified, n_drafted) == expected


@pytest.mark.parametrize("rule", [pytest.param(carry_proposals, id="plain"),
                                  pytest.param(compiled_kernel.carry_proposals, id="compiled")])
def test_carry_proposals_hand_worked(rule):
    """Requests 1 and 3 were verified (their proposals used up), 0 and 4 drafted (each keeps its drafter, k and
    proposed tokens; the drafted array's third entry is past n_drafted), 2 took no part."""
    none = -1
    pending_d = np.array([none, 5, 6, none, none], np.int64)
    pending_k = np.array([0, 3, 2, 0, 0], np.int64)
    pending_prop = np.array([0, 3, 1, 0, 0], np.int64)
    rule(np.array([1, 3], np.int64), 2, np.array([4, 0, 2], np.int64), 2, np.array([7, 8, 9], np.int64),
         np.array([2, 3, 9], np.int64), np.array([1, 3, 9], np.int64), pending_d, pending_k, pending_prop, none)
    assert pending_d.tolist() == [8, none, 6, none, 7]
    assert pending_k.tolist() == [3, 3, 2, 0, 2]  # a used-up proposal's k and tokens are not read again
    assert pending_prop.tolist() == [3, 3, 1, 0, 1]
