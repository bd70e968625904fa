"""The prefill plan rule (simulator/engine/rules/prefill_plan.py) on hand-worked states and as invariants, plain and
compiled as the kernel runs it: partial prefills first (chunk = min(left, budget left), skipped when their KV does not
fit), then the waiting queue FIFO within max_num_seqs, the token budget and free KV; an oversized unchunked prefill
runs alone; nothing committed until the plan is taken."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.rules.prefill_plan import (PlanSums, PrefillLimits, plan_buffers, plan_prefills,
                                                 take_prefill_plan)


def _compiled():
    from simulator.engine import compiled_kernel
    return compiled_kernel._plan_prefills, compiled_kernel.take_prefill_plan


@pytest.fixture(params=["plain", "compiled"])
def rules(request):
    return (plan_prefills, take_prefill_plan) if request.param == "plain" else _compiled()


class State:
    """Per-request arrays of a small server: prompt, output so far, prompt left, prompt cached, KV blocks held."""

    def __init__(self, prompt, gen=None, left=None, done=None, blocks=None):
        n = len(prompt)
        z = [0] * n
        self.prompt = np.array(prompt, np.int64)
        self.gen = np.array(gen or z, np.int64)
        self.left = np.array(left or z, np.int64)
        self.done = np.array(done or z, np.int64)
        self.blocks = np.array(blocks or z, np.int64)

    def plan(self, rule, limits, partial=(), queue=(), n_running=None, tokens_used=0, free=100):
        partial = np.array(partial, np.int64)
        queue = np.array(queue, np.int64)
        n_running = len(partial) if n_running is None else n_running
        out = plan_buffers(8)
        sums = rule(limits, partial, len(partial), queue, len(queue), n_running, tokens_used, free, self.prompt,
                    self.gen, self.left, self.done, self.blocks, out)
        n = int(sums[0])
        chunks = [(int(out.request[j]), int(out.tokens[j]), int(out.blocks[j]), bool(out.new[j]), bool(out.last[j]))
                  for j in range(n)]
        return PlanSums(*map(int, sums)), chunks


def lim(max_num_seqs=8, budget=16, chunked=True, block_size=4):
    return PrefillLimits(max_num_seqs, budget, chunked, block_size)


def test_partial_prefill_takes_the_budget_left_and_its_last_chunk_reserves_the_first_token(rules):
    # r0: prompt 12, 4 cached in 1 block, 8 left; budget 10 - 2 decode tokens = 8: the last chunk is all 8, its KV
    # 4 + 8 + 1 (the first output token's slot) = 13 tokens -> 4 blocks, 3 new; r1 waits (no budget left)
    s = State([12, 5], left=[8, 0], done=[4, 0], blocks=[1, 0])
    sums, chunks = s.plan(rules[0], lim(budget=10), partial=[0], queue=[1], tokens_used=2)
    assert chunks == [(0, 8, 3, False, True)]
    assert sums == (1, 8, 12, 96)  # attention pairs: 8 x (4 + 8)


def test_partial_prefill_chunk_not_last_reserves_no_extra_slot(rules):
    # budget 6: r0 (8 left) takes 6, not its last: 4 + 6 = 10 tokens -> 3 blocks, 2 new
    s = State([12], left=[8], done=[4], blocks=[1])
    sums, chunks = s.plan(rules[0], lim(budget=6), partial=[0])
    assert chunks == [(0, 6, 2, False, False)]
    assert sums == (1, 6, 10, 60)  # 6 x (4 + 6)


def test_partial_prefill_whose_kv_does_not_fit_is_skipped_not_blocking(rules):
    # free 1 block: r0 (needs 3 more) is skipped, r1 (prompt 6, 2 cached in 1 block, 4 left: 2 + 4 + 1 = 7 -> 2
    # blocks, 1 new) continues after it; r2 (running, decoding: nothing left) is passed over
    s = State([12, 6, 3], left=[8, 4, 0], done=[4, 2, 3], blocks=[1, 1, 1])
    sums, chunks = s.plan(rules[0], lim(budget=16), partial=[0, 1, 2], free=1)
    assert chunks == [(1, 4, 1, False, True)]
    assert sums == (1, 4, 6, 24)  # 4 x (2 + 4)


def test_waiting_requests_admitted_fifo_until_the_budget_is_spent(rules):
    # budget 8: r0 (prompt 4) and r1 (prompt 4) fill it exactly; r2 waits
    s = State([4, 4, 1])
    sums, chunks = s.plan(rules[0], lim(budget=8), queue=[0, 1, 2])
    assert chunks == [(0, 4, 2, True, True), (1, 4, 2, True, True)]  # 4 + 1 slot -> 2 blocks each
    assert sums == (2, 8, 8, 32)  # 4 x 4 + 4 x 4: nothing cached


def test_chunked_admission_gives_the_head_what_budget_is_left(rules):
    # budget 8: r0 (prompt 3) whole, then r1 (prompt 9) its first 5 tokens (not its last chunk: 5 -> 2 blocks)
    s = State([3, 9])
    sums, chunks = s.plan(rules[0], lim(budget=8), queue=[0, 1])
    assert chunks == [(0, 3, 1, True, True), (1, 5, 2, True, False)]
    assert sums == (2, 8, 8, 34)  # 3 x 3 + 5 x 5


def test_admission_stops_at_max_num_seqs(rules):
    s = State([1, 1, 1, 1, 1])
    _, chunks = s.plan(rules[0], lim(max_num_seqs=4), queue=[2, 3, 4], n_running=3)
    assert [c[0] for c in chunks] == [2]


def test_the_queue_head_that_does_not_fit_blocks_those_behind_it(rules):
    # free 2 blocks: the head r0 (prompt 9: 3 blocks) does not fit, so r1 (prompt 2: 1 block) waits too (FIFO)
    s = State([9, 2])
    assert s.plan(rules[0], lim(), queue=[0, 1], free=2)[1] == []
    # unchunked, budget 8 after 1 decode token: r0 (prompt 8) does not fit in 7, r1 behind it waits
    s = State([8, 2])
    assert s.plan(rules[0], lim(budget=8, chunked=False), queue=[0, 1], tokens_used=1)[1] == []


def test_a_request_whose_kv_fills_the_free_blocks_exactly_is_admitted(rules):
    # free 3 blocks: r0 (prompt 7: 7 + 1 slot -> 2 blocks) and r1 (prompt 3: 1 block) fill them; r2 has none left
    s = State([7, 3, 1])
    _, chunks = s.plan(rules[0], lim(), queue=[0, 1, 2], free=3)
    assert [(c[0], c[2]) for c in chunks] == [(0, 2), (1, 1)]


def test_an_oversized_unchunked_prefill_runs_alone(rules):
    # budget 8, prompt 10, nothing else in the step: it runs (alone) rather than never; behind it nobody joins
    s = State([10, 1])
    sums, chunks = s.plan(rules[0], lim(budget=8, chunked=False, block_size=16), queue=[0, 1])
    assert chunks == [(0, 10, 1, True, True)]
    assert sums == (1, 10, 10, 100)


def test_a_recompute_prefills_prompt_and_output_so_far(rules):
    # r0 preempted after 5 output tokens: its prefill is 6 + 5 = 11 tokens (+1 slot: 3 blocks of 4)
    s = State([6], gen=[5])
    sums, chunks = s.plan(rules[0], lim(), queue=[0])
    assert chunks == [(0, 11, 3, True, True)]
    assert sums == (1, 11, 11, 121)


def test_no_budget_left_plans_nothing(rules):
    s = State([12, 3], left=[8, 0], done=[4, 0], blocks=[1, 0])
    assert s.plan(rules[0], lim(budget=10), partial=[0], queue=[1], tokens_used=10)[1] == []
    assert s.plan(rules[0], lim(budget=10), partial=[0], queue=[1], tokens_used=12)[1] == []  # decodes over budget


def test_taking_a_plan_allocates_and_starts_new_prompts(rules):
    plan_rule, take = rules
    s = State([12, 3, 6], gen=[0, 0, 2], left=[8, 0, 0], done=[4, 0, 0], blocks=[1, 0, 0])
    out = plan_buffers(4)
    n = int(plan_rule(lim(budget=16), np.array([0]), 1, np.array([1, 2]), 2, 1, 0, 100, s.prompt, s.gen, s.left,
                      s.done, s.blocks, out)[0])
    assert n == 3  # budget 16: r0's last 8 (3 new blocks), r1's 3 (1 block), r2 the 5 left of its 6 + 2 (2 blocks)
    first_sched = np.array([np.nan, np.nan, 0.5])
    allocated = take(out, n, s.prompt, s.gen, s.blocks, s.left, s.done, first_sched, 2.0)
    assert int(allocated) == 3 + 1 + 2
    assert s.blocks.tolist() == [4, 1, 2]
    assert s.left.tolist() == [8, 3, 8]  # a partial's progress is the step outcome's; new ones start whole
    assert s.done.tolist() == [4, 0, 0]
    assert first_sched[0] != first_sched[0] and first_sched[1:].tolist() == [2.0, 0.5]  # r2 keeps its first


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_plan_invariants(data):
    """Random chunked states: the budget, max_num_seqs and free KV are kept; the new requests are the queue's head
    in order; each chunk is >= 1 token, ends its prompt exactly when it takes all that is left; the sums are those of
    the chunks; nothing is written but the plan."""
    n = data.draw(st.integers(1, 10))
    prompt = np.array(data.draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)), np.int64)
    gen = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), np.int64)
    ids = data.draw(st.permutations(range(n)))
    n_run = data.draw(st.integers(0, n))
    running, queue = np.array(ids[:n_run], np.int64), np.array(ids[n_run:], np.int64)
    done = np.zeros(n, np.int64)
    left = np.zeros(n, np.int64)
    blocks = np.zeros(n, np.int64)
    bs = data.draw(st.sampled_from([1, 4, 16]))
    for i in running:  # some running requests are part way through their prompt, the rest decode
        done[i] = data.draw(st.integers(0, prompt[i] + gen[i]))
        left[i] = prompt[i] + gen[i] - done[i]
        blocks[i] = -(-done[i] // bs) + data.draw(st.integers(0, 1))
    limits = lim(max_num_seqs=data.draw(st.integers(max(1, n_run), n + 1)), budget=data.draw(st.integers(1, 64)),
                 block_size=bs)
    tokens_used = data.draw(st.integers(0, 20))
    free = data.draw(st.integers(0, 30))
    n_queue = max(0, min(len(queue), limits.max_num_seqs - n_run))
    before = [a.copy() for a in (prompt, gen, left, done, blocks)]
    out = plan_buffers(n)
    count, tokens, kv, attn = plan_prefills(limits, running, n_run, queue, n_queue, n_run, tokens_used, free, prompt,
                                            gen, left, done, blocks, out)
    for a, b in zip(before, (prompt, gen, left, done, blocks)):
        assert (a == b).all()
    req, tok, blk, new, last = (np.asarray(x[:count]) for x in out)
    assert (tok >= 1).all() and (blk >= 0).all()
    assert int(tok.sum()) <= max(0, limits.max_num_batched_tokens - tokens_used)
    assert int(blk.sum()) <= free
    assert n_run + int(new.sum()) <= limits.max_num_seqs
    assert req[new].tolist() == queue[:int(new.sum())].tolist()  # the queue's head, in FIFO order
    assert not new[:int((~new).sum())].any()  # partial prefills come first
    assert set(req[~new].tolist()) <= set(running[left[running] > 0].tolist())
    whole = np.where(new, prompt[req] + gen[req], left[req])
    assert (tok <= whole).all() and (last == (tok == whole)).all()
    cached = np.where(new, 0, done[req])
    assert tokens == int(tok.sum()) and kv == int((cached + tok).sum()) and attn == int((tok * (cached + tok)).sum())
    # KV held after the chunk (+1 slot for the first output token on the last chunk) in whole blocks
    held = np.where(new, 0, blocks[req]) + blk
    assert (held * bs >= np.where(new, 0, done[req]) + tok + last).all()
