"""The finish rule (simulator/engine/rules/finish.py) on a hand-worked step and a hypothesis invariant, as plain
Python and as compiled (the function the kernels call)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import compiled_kernel
from simulator.engine.rules import finish

RULE = [pytest.param(finish.release_finished, id="plain"),
        pytest.param(compiled_kernel.release_finished, id="compiled")]


@pytest.mark.parametrize("rule", RULE)
def test_finished_requests_give_back_their_blocks_at_now(rule):
    blocks = np.array([3, 5, 2, 7], dtype=np.int64)
    finish_t = np.full(4, np.nan)
    freed = rule(np.array([3, 1, 0], dtype=np.int64), 2, 4.5, finish_t, blocks)  # done[:2]: requests 3 and 1
    assert freed == 12
    assert list(blocks) == [3, 0, 2, 0]
    assert finish_t[3] == 4.5 and finish_t[1] == 4.5 and np.isnan(finish_t[[0, 2]]).all()


@settings(max_examples=60, deadline=None)
@given(held=st.lists(st.integers(0, 50), min_size=1, max_size=8), data=st.data(), compiled=st.booleans())
def test_invariant_a_finished_request_holds_no_blocks_and_the_pool_never_goes_negative(held, data, compiled):
    rule = compiled_kernel.release_finished if compiled else finish.release_finished
    n = len(held)
    blocks = np.array(held, dtype=np.int64)
    used = int(blocks.sum())  # the pool's used blocks: what the requests hold
    done = np.array(data.draw(st.permutations(range(n)))[:data.draw(st.integers(0, n))], dtype=np.int64)
    finish_t = np.full(n, np.nan)
    used -= rule(done, len(done), 2.0, finish_t, blocks)
    assert (blocks >= 0).all() and used >= 0
    assert (blocks[done] == 0).all() and (finish_t[done] == 2.0).all()
    rest = np.setdiff1d(np.arange(n), done)
    assert list(blocks[rest]) == [held[i] for i in rest] and np.isnan(finish_t[rest]).all()
    assert used == int(blocks.sum())
