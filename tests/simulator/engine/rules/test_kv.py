"""The KV rules (simulator/engine/rules/kv.py): the block ceil-division and a step's growth, on hand-worked cases
and hypothesis invariants, as plain Python and as compiled (the functions the kernels call)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import compiled_kernel
from simulator.engine.rules import kv

GROWTH = [pytest.param((kv.kv_growth, kv.add_blocks), id="plain"),
          pytest.param((compiled_kernel.kv_growth, compiled_kernel.add_blocks), id="compiled")]


def test_blocks_for_is_the_ceiling():
    assert [kv.blocks_for(t, 16) for t in (0, 1, 15, 16, 17, 32, 33)] == [0, 1, 1, 1, 2, 2, 3]
    assert list(kv.blocks_for(np.array([0, 16, 17]), 16)) == [0, 1, 2]


@pytest.mark.parametrize("rules", GROWTH)
def test_growth_to_what_the_tokens_need_never_shrinking(rules):
    growth, add = rules
    # block size 16. request 4: holds 1 block, 16 tokens (a whole block) -> 0 more; 17 tokens -> 1 more.
    # request 2: holds 1, 40 tokens -> 3 blocks -> 2 more. request 0: holds 5, 20 tokens -> none (never shrinks).
    # request 1: prefilling (0 tokens to hold this step) -> none
    blocks = np.array([5, 2, 1, 0, 1], dtype=np.int64)
    idx = np.array([4, 2, 0, 1], dtype=np.int64)
    extra = np.full(4, -1, dtype=np.int64)
    assert growth(idx, 4, np.array([16, 40, 20, 0], dtype=np.int64), blocks, 16, extra) == 2
    assert list(extra) == [0, 2, 0, 0]
    assert growth(idx, 1, np.array([17], dtype=np.int64), blocks, 16, extra) == 1 and extra[0] == 1
    add(idx, 1, extra, blocks)  # commits idx[:1] only
    assert list(blocks) == [5, 2, 1, 0, 2]


@settings(max_examples=80, deadline=None)
@given(data=st.data(), bs=st.integers(1, 32), compiled=st.booleans())
def test_invariant_growth_holds_the_tokens_in_the_fewest_blocks_and_never_negative(data, bs, compiled):
    growth, add = (compiled_kernel.kv_growth, compiled_kernel.add_blocks) if compiled else (kv.kv_growth,
                                                                                             kv.add_blocks)
    n = data.draw(st.integers(1, 8))
    held = np.array(data.draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)), dtype=np.int64)
    tokens = np.array(data.draw(st.lists(st.integers(0, 600), min_size=n, max_size=n)), dtype=np.int64)
    blocks = held.copy()
    idx = np.arange(n, dtype=np.int64)
    extra = np.empty(n, dtype=np.int64)
    total = growth(idx, n, tokens, blocks, bs, extra)
    assert (blocks == held).all()  # growth only plans; add_blocks commits
    assert (extra >= 0).all() and total == int(extra.sum())
    add(idx, n, extra, blocks)
    assert (blocks >= held).all() and (blocks >= 0).all()
    assert (blocks * bs >= tokens).all()  # every request holds its tokens
    grew = extra > 0
    assert ((blocks[grew] - 1) * bs < tokens[grew]).all()  # and a grown one no more blocks than it needs


PREEMPT = [pytest.param((kv.preempt_keep, kv.preempt_suffix), id="plain"),
           pytest.param((compiled_kernel.preempt_keep, compiled_kernel.preempt_suffix), id="compiled")]


@pytest.mark.parametrize("rules", PREEMPT)
def test_the_newest_requests_are_preempted_until_the_rest_grows(rules):
    """Hand-worked: running 3, 1, 0, 2 (admission order) hold 4, 2, 3, 5 blocks and must grow by 2, 1, 0, 3; 1 block
    is free. All four need 6 (no). Keeping three needs 3 against 1 + 5 freed (yes): request 2 alone is preempted."""
    keep_rule, suffix = rules
    run = np.array([3, 1, 0, 2], dtype=np.int64)
    blocks = np.array([3, 2, 5, 4], dtype=np.int64)
    extra = np.array([2, 1, 0, 3], dtype=np.int64)
    assert keep_rule(run, 4, extra, blocks, 1) == 3
    assert keep_rule(run, 4, extra, blocks, 6) == 4  # everything fits
    assert keep_rule(run, 4, np.array([16, 1, 0, 3], dtype=np.int64), blocks, 1) == 0  # not even the oldest (16 > 11)
    prefill_left, prefill_done = np.array([0, 0, 7, 0]), np.array([10, 10, 5, 10])
    preemptions = np.array([0, 0, 1, 0])
    assert suffix(run, 2, 4, blocks, prefill_left, prefill_done, preemptions) == 5 + 3  # requests 0 and 2
    assert blocks.tolist() == [0, 2, 0, 4] and prefill_left.tolist() == [0, 0, 0, 0]
    assert prefill_done.tolist() == [0, 10, 0, 10] and preemptions.tolist() == [1, 0, 2, 0]


@settings(max_examples=100, deadline=None)
@given(data=st.data(), compiled=st.booleans())
def test_invariant_preemption_keeps_the_longest_prefix_that_fits(data, compiled):
    """preempt_keep is the largest L whose growth fits in the free blocks plus those of run[L:] (checked against
    every L by brute force): what is kept fits, and keeping one more would not."""
    keep_rule = compiled_kernel.preempt_keep if compiled else kv.preempt_keep
    n = data.draw(st.integers(0, 8))
    blocks = np.array(data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), dtype=np.int64)
    extra = np.array(data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), dtype=np.int64)
    free = data.draw(st.integers(0, 10))
    run = np.arange(n, dtype=np.int64)
    keep = keep_rule(run, n, extra, blocks, free)
    fits = [int(extra[:L].sum()) <= free + int(blocks[L:].sum()) for L in range(n + 1)]
    assert keep == max(L for L in range(n + 1) if fits[L])
