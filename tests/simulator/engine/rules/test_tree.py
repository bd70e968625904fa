"""The tree rules (simulator/engine/rules/tree.py) against hand-worked steps: a batch's accepted drafts from its rank
rows (plain and as compiled_kernel compiles it for the kernels) and a tree's drafting priced one pass per depth."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.costs.roofline import RooflineTerms
from simulator.engine.rules import tree as tree_rules
from simulator.engine.rules.pricing import (DRAFT_AUTOREGRESSIVE, DRAFT_CONSTANT, DRAFT_FRACTION, DRAFT_WHOLE,
                                            PROFILE_LINEAR, DraftTerms, ProfileTerms, draft_time)
from traces.tree import chain_tree, tree_from_paths, tree_from_widths

FIVE = tree_from_paths([(0,), (1,), (0, 0), (0, 1), (1, 0)])  # nodes: (0,) (1,) (0,0) (0,1) (1,0)
# 1e-3 x kv + 1e-2 x batched tokens + 0.1 x seqs + 1.0
LINEAR = ProfileTerms(PROFILE_LINEAR, (1e-3, 1e-2, 0.1, 1.0), RooflineTerms(*(0.0,) * 13, False, 0.0))


def _accept(which: str):
    if which == "plain":
        return tree_rules.accept_tree
    import simulator.engine.compiled_kernel as ker

    return ker.accept_tree


@pytest.mark.parametrize("which", ["plain", "compiled"])
def test_accept_tree_hand_worked_rows_and_cuts(which):
    accept_tree = _accept(which)
    ranks = np.array([[[1, 0, 0], [0, 2, 0], [2, 0, 0], [0, 1, 4]]], dtype=np.int8)  # one drafter, K = 4
    out = np.empty(4, dtype=np.int64)
    zero = np.zeros(4, dtype=np.int64)  # every sequence drafts with slot 0
    # whole tree: (1,)->(1,0) = 2; (0,) then no (0,2) = 1; rank 2 at depth 1 = 0; (0,)->(0,1) = 2
    assert accept_tree(FIVE.parent, FIVE.rank, ranks, zero, np.arange(4), np.full(4, 5), 4, out) == 5
    assert out.tolist() == [2, 1, 0, 2]
    # the decode budget cut the tree to its first m nodes (depth order): row 0 [1, 0, 0] accepts 0 with m = 1
    # (only (0,)), 1 with m = 2..4 ((1,) but not yet (1, 0)), 2 with m = 5
    for m, want in ((0, 0), (1, 0), (2, 1), (4, 1), (5, 2)):
        assert accept_tree(FIVE.parent, FIVE.rank, ranks, zero, np.zeros(1, dtype=np.int64), np.array([m]), 1,
                           out) == want
        assert out[0] == want
    # flat picks the row: sequence 0 reads row 3, sequence 1 row 1
    accept_tree(FIVE.parent, FIVE.rank, ranks, zero, np.array([3, 1]), np.array([4, 5]), 2, out)
    assert out[:2].tolist() == [2, 1]  # m = 4 holds (0, 1)


@pytest.mark.parametrize("which", ["plain", "compiled"])
def test_accept_tree_reads_each_sequences_own_drafters_rows(which):
    """Two drafters' rank rows at the same flat positions: each sequence reads its slot's; a sequence that does not
    draft (slot -1, no nodes) accepts nothing and reads no row."""
    accept_tree = _accept(which)
    ranks = np.array([[[1, 0], [0, 0]],     # slot 0: (1,)->(1,0) = 2 at position 0; (0,)->(0,0) = 2 at 1
                      [[3, 0], [0, 3]]],    # slot 1: rank 3 is no node = 0 at position 0; (0,) only = 1 at 1
                     dtype=np.int16)
    out = np.full(4, -1, dtype=np.int64)
    got = accept_tree(FIVE.parent, FIVE.rank, ranks, np.array([1, 0, 1, -1]), np.array([0, 0, 1, 1]),
                      np.array([5, 5, 5, 0]), 4, out)
    assert out.tolist() == [0, 2, 1, 0] and got == 3


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=8))
def test_accept_tree_of_a_chain_is_the_chain_replay(k, rows):
    """A chain of k as a tree accepts min(leading zeros, k) per row: the chain's replay rule under chain
    consistency (acc_len - 1 = leading zeros of the rank row)."""
    t = chain_tree(k)
    ranks = np.array([rows], dtype=np.int8)
    out = np.empty(len(rows), dtype=np.int64)
    tree_rules.accept_tree(t.parent, t.rank, ranks, np.zeros(len(rows), dtype=np.int64), np.arange(len(rows)),
                           np.full(len(rows), k), len(rows), out)
    zeros = [next((i for i, r in enumerate(row) if r != 0), len(row)) for row in rows]
    assert out.tolist() == [min(z, k) for z in zeros]


def test_tree_draft_time_one_pass_per_depth_by_hand():
    ar = DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True)
    passes = tuple(int(c) for c in FIVE.draft_pass_tokens())  # (1, 2): the root, then (0,) and (1,)
    # 3 sequences over 50 KV tokens: pass 1 reads 3 tokens over 50 KV = 0.05 + 0.03 + 0.3 + 1 = 1.38;
    # pass 2 reads 6 tokens over 50 + 1 x 3 KV = 0.053 + 0.06 + 0.3 + 1 = 1.413
    t = tree_rules.tree_draft_time(ar, LINEAR, 3, 15, passes, 50, 2.0)
    assert t == pytest.approx(1.38 + 1.413, rel=1e-12)
    # whole proposal: one pass over the 15 nodes = 0.05 + 0.15 + 0.3 + 1; constant and fraction as for chains
    assert tree_rules.tree_draft_time(DraftTerms(DRAFT_WHOLE, 0.0, 0.0, True), LINEAR, 3, 15, passes, 50,
                                      2.0) == pytest.approx(1.5, rel=1e-12)
    assert tree_rules.tree_draft_time(DraftTerms(DRAFT_CONSTANT, 0.7, 0.0, False), None, 3, 15, passes, 50,
                                      2.0) == 0.7
    assert tree_rules.tree_draft_time(DraftTerms(DRAFT_FRACTION, 0.0, 0.25, False), None, 3, 15, passes, 50,
                                      2.0) == 0.5
    assert tree_rules.tree_draft_time(ar, LINEAR, 3, 0, passes, 50, 2.0) == 0.0  # nothing proposed
    # widths [2, 1, 1]: passes read 1, 2, 2 tokens; one sequence over 10 KV: 1.12, then 2 tokens over 11 KV =
    # 0.011 + 0.02 + 0.1 + 1 = 1.131, then 2 tokens over 13 KV = 1.133
    wide = tuple(int(c) for c in tree_from_widths([2, 1, 1]).draft_pass_tokens())
    assert wide == (1, 2, 2)
    assert tree_rules.tree_draft_time(ar, LINEAR, 1, 6, wide, 10, 0.0) == pytest.approx(1.12 + 1.131 + 1.133,
                                                                                         rel=1e-12)


def test_tree_draft_time_adds_the_host_term_once_per_phase():
    passes = tuple(int(c) for c in FIVE.draft_pass_tokens())
    ar = DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True, 0.5)
    assert tree_rules.tree_draft_time(ar, LINEAR, 3, 15, passes, 50, 2.0) == pytest.approx(1.38 + 1.413 + 0.5,
                                                                                          rel=1e-12)
    assert tree_rules.tree_draft_time(ar, LINEAR, 3, 0, passes, 50, 2.0) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 5), st.integers(0, 500))
def test_tree_draft_time_of_a_chain_equals_the_chain_price(k, seqs, kv):
    """A chain as a tree (one token per pass) is priced exactly as the chain's k one-token passes."""
    ar = DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True, 0.004)
    passes = tuple(int(c) for c in chain_tree(k).draft_pass_tokens())
    assert tree_rules.tree_draft_time(ar, LINEAR, seqs, seqs * k, passes, kv, 1.0) == \
        draft_time(ar, LINEAR, seqs, seqs * k, k, kv, 1.0)
