"""Replay walks, checked against walks worked out by hand (the prefill made token 0; steps start at 1)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.bundle import DrafterTrace
from traces.walk import UNCAPPED, walk, walk_many, walk_positions, walk_trace

ACC = np.array([1, 3, 1, 1, 2, 1])  # acc_len[0] is never read: the prefill emitted token 0


def test_walk_at_k1_by_hand():
    # p1: one draft accepted + bonus = 2; p3: 1; p4: 2 (the last two tokens) -> 5 tokens in 3 steps
    assert walk_positions(ACC, 1).tolist() == [1, 3, 4]
    w = walk_trace(DrafterTrace(ACC), 1)
    assert (w.tokens, w.steps) == (5, 3)


def test_walk_at_k2_and_uncapped_by_hand():
    assert walk_positions(ACC, 2).tolist() == [1, 4]
    assert walk_positions(ACC, UNCAPPED).tolist() == [1, 4]
    assert walk_trace(DrafterTrace(ACC), UNCAPPED).steps == 2


def test_position_zero_is_never_read():
    a = ACC.copy()
    a[0] = 6
    assert walk_positions(a, 3).tolist() == walk_positions(ACC, 3).tolist()


def test_last_step_is_cut_by_output_but_acceptance_counts_the_verify_outcome():
    w = walk_trace(DrafterTrace(np.array([1, 4, 1])), 5, positions=4)
    assert (w.tokens, w.steps) == (2, 1)
    assert w.accepted_at.tolist() == [1, 1, 1, 0]
    assert w.verified_tokens == 4  # 1 + 3 accepted drafts, before the cut to 2 remaining tokens
    steps = walk(DrafterTrace(np.array([1, 4, 1])), 5)
    assert (steps.proposed.tolist(), steps.accepted.tolist(), steps.emitted.tolist()) == ([5], [3], [2])


def test_proposal_len_caps_and_zero_means_no_draft():
    t = DrafterTrace(ACC, proposal_len=np.array([5, 0, 5, 5, 5, 5]))
    assert walk_positions(ACC, 2, t.proposal_len).tolist() == [1, 2, 3, 4]
    w = walk_trace(t, 2)
    assert (w.tokens, w.steps, w.steps_with_draft) == (5, 4, 3)


def test_walk_many_pools_tokens_and_steps():
    w = walk_many([DrafterTrace(ACC), DrafterTrace(np.array([1, 1, 1]))], 1)
    assert (w.tokens, w.steps) == (7, 5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=60), st.integers(0, 10))
def test_walk_emits_exactly_the_decoded_output(acc, k):
    a = np.array(acc)
    w = walk_trace(DrafterTrace(a), k)
    assert w.tokens == len(acc) - 1
    assert w.steps >= -(-(len(acc) - 1) // (k + 1))
    if k == 0:
        assert w.steps == len(acc) - 1
