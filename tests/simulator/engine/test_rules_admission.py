"""Admission rules (rules/prefill_plan.plan_prefills, which the kernels run): FIFO admission of waiting
requests within max_num_seqs, the token budget left after the step's decode and draft tokens, and free KV blocks.
Hand-worked cases: every step costs 1.0 s (a constant target profile), so step n runs over [n, n + 1]."""
from __future__ import annotations

from tests.simulator.engine.engine_fixtures import linear
from tests.simulator.engine.rule_cases import Req, col, req, run


def test_rule_admission_max_num_seqs():
    # 3 requests at t=0 (prompt 4, output 3), max_num_seqs 2: r0, r1 prefill in step 0 (first token at 1), decode
    # in steps 1-2 (finish at 3); r2 waits for a free sequence slot: prefill step 3, decodes 4-5, finish at 6
    res = run([Req(0.0, 4, 3)] * 3, max_num_seqs=2)
    assert req(res, "first_scheduled_time") == [0.0, 0.0, 3.0]
    assert req(res, "first_token_time") == [1.0, 1.0, 4.0]
    assert req(res, "finish_time") == [3.0, 3.0, 6.0]
    assert col(res, "num_seqs") == [2, 2, 2, 1, 1, 1]


def test_rule_admission_token_budget_exact_fit_admitted():
    # budget 8: prompts 4 + 4 fill it exactly in step 0; r2 (prompt 7) is refused in step 1, where the two decode
    # tokens leave 6, and admitted in step 2 once r0, r1 finished (at 2)
    res = run([Req(0.0, 4, 2), Req(0.0, 4, 2), Req(0.0, 7, 2)], budget=8)
    assert req(res, "first_scheduled_time") == [0.0, 0.0, 2.0]
    assert req(res, "finish_time") == [2.0, 2.0, 4.0]
    assert col(res, "prefill_tokens") == [8, 0, 7, 0]
    assert col(res, "batched_tokens") == [8, 2, 7, 1]


def test_rule_admission_token_budget_counts_decode_and_draft_tokens():
    # SD k=2: r0 verifies 1 + 2 tokens per step; budget 8 leaves 5: r1 (prompt 5, arrives at 0.5) fits in step 1
    # exactly, r2 (prompt 6) does not; in step 2 r0 and r1 verify 6 tokens, 2 left: r2 waits until they finish
    reqs = [Req(0.0, 4, 3), Req(0.5, 5, 2), Req(0.5, 6, 2)]
    res = run(reqs, mode="sd", k=2, budget=8)
    # step 0 [0,1]: r0 prefill; step 1 [1,2]: r0 verify (3 tokens) + r1 prefill 5; step 2 [2,3]: r0, r1 verify
    # (6 tokens; r0 finishes: gen 3, r1 finishes: gen 2); step 3 [3,4]: r2 prefill; step 4: r2 verify
    assert req(res, "first_scheduled_time") == [0.0, 1.0, 3.0]
    assert req(res, "finish_time") == [3.0, 3.0, 5.0]
    assert col(res, "batched_tokens") == [4, 8, 6, 6, 3]


def test_rule_admission_fifo_head_blocks_queue():
    # budget 10, r0 decoding (1 token) leaves 9: the head r1 (prompt 10) does not fit, so r2 (prompt 2) behind it
    # waits too (FIFO, no skipping); r1 goes alone when r0 finished
    reqs = [Req(0.0, 3, 2), Req(0.5, 10, 2), Req(0.5, 2, 2)]
    res = run(reqs, budget=10)
    # step 0 [0,1] r0 prefill; step 1 [1,2]: r0 decodes and finishes (r1 refused: 10 > 9, so r2 waits);
    # step 2 [2,3]: r1 prefill 10 (budget full); step 3 [3,4]: r1 decodes (finishes) + r2 prefill 2; step 4 r2
    assert req(res, "first_scheduled_time") == [0.0, 2.0, 3.0]
    assert req(res, "finish_time") == [2.0, 4.0, 5.0]


def test_rule_admission_free_kv():
    # block 4, 4 blocks: r0, r1 (prompt 7: blocks_for(7 + 1) = 2 each) fill the pool exactly in step 0; r2
    # (1 block) waits for their KV, freed when they finish at 2.
    res = run([Req(0.0, 7, 2), Req(0.0, 7, 2), Req(0.0, 3, 2)], kv_tokens=16, max_num_seqs=4)
    assert req(res, "first_scheduled_time") == [0.0, 0.0, 2.0]
    assert req(res, "finish_time") == [2.0, 2.0, 4.0]
    assert col(res, "kv_blocks_used") == [4, 4, 1, 1]  # r2 decodes at context 4: still its one block


def test_rule_admission_reserves_first_token_slot():
    # a whole prompt of 8 (block 4) is admitted with ceil((8 + 1)/4) = 3 blocks: the prefill samples the first
    # output token, whose KV slot it holds; the decode at context 9 needs no more
    res = run([Req(0.0, 8, 2)])
    assert col(res, "kv_blocks_used") == [3, 3]


def test_rule_an_idle_server_starts_at_the_next_arrival_exactly():
    """Every step 0.3 s: r0 (one token out) is done at 0.3 and the server idles until r1 arrives at 0.898. Its step
    starts at 0.898 itself, not at 0.3 + (0.898 - 0.3), which rounds to the float above it; a cluster replica, woken
    by the routing at 0.898, starts there too (test_compiled_replica.py compares the two)."""
    assert 0.3 + (0.898 - 0.3) > 0.898
    res = run([Req(0.0, 4, 1), Req(0.898, 4, 1)], target=linear(0.0, 0.0, 0.3))
    assert req(res, "first_scheduled_time") == [0.0, 0.898]
    assert req(res, "finish_time") == [0.3, 0.898 + 0.3]
