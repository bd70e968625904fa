"""The KV rules (simulator/engine/rules/kv.py): the block ceil-division and a step's growth, on hand-worked cases
and hypothesis invariants, as plain Python and as compiled (the functions both engine paths call)."""
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
