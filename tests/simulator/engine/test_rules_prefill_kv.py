"""Chunked prefill, KV reserve and growth, and preemption by recompute (rules/prefill_plan.py, rules/kv.py; the reserve
loops of compiled_kernel.run_steps and compiled_psd_kernel.run_psd_steps).
Hand-worked cases: every step costs 1.0 s, KV blocks hold 4 tokens."""
from __future__ import annotations

from simulator.server_config import PSDConfig
from tests.simulator.engine.rule_cases import Req, col, req, run


def test_rule_chunked_prefill_chunks_and_last_chunk_slot():
    # prompt 20, budget 8: chunks 8, 8, 4; blocks after each: ceil(8/4) = 2, ceil(16/4) = 4, and the last chunk
    # reserves the first output token's slot: ceil((20 + 1)/4) = 6; the first token comes with the last chunk
    res = run([Req(0.0, 20, 2)], chunked=True, budget=8)
    assert col(res, "prefill_tokens") == [8, 8, 4, 0]
    assert col(res, "kv_blocks_used") == [2, 4, 6, 6]
    assert req(res, "first_token_time") == [3.0]
    assert req(res, "finish_time") == [4.0]


def test_rule_chunked_prefill_takes_budget_left_after_verify_tokens():
    # SD k=2: r0 verifies 3 tokens per step, so r1's prompt of 20 goes in chunks of 8 - 3 = 5 (steps 1-4), its
    # first token at 5; step 5 verifies both (6 tokens) and both finish
    res = run([Req(0.0, 4, 6), Req(0.5, 20, 2)], mode="sd", k=2, chunked=True, budget=8)
    assert col(res, "prefill_tokens") == [4, 5, 5, 5, 5, 0]
    assert col(res, "batched_tokens") == [4, 8, 8, 8, 8, 6]
    assert col(res, "phase") == ["prefill", "mixed", "mixed", "mixed", "mixed", "verify"]
    assert req(res, "first_token_time") == [1.0, 5.0]
    assert req(res, "finish_time") == [6.0, 6.0]


def test_rule_kv_growth_decode():
    # AR, prompt 5: the prefill holds ceil((5 + 1)/4) = 2 blocks; a decode at context c holds ceil(c/4): contexts
    # 6, 7, 8, 9, 10 -> 2, 2, 2, 3, 3
    res = run([Req(0.0, 5, 6)])
    assert col(res, "kv_tokens") == [5, 6, 7, 8, 9, 10]
    assert col(res, "kv_blocks_used") == [2, 2, 2, 2, 3, 3]


def test_rule_kv_growth_reserves_draft_lookahead():
    # SD k=3 (nothing accepted): a verify step at context c reserves ceil((c + 3)/4): 9, 10, 11, 12, 13 -> 3, 3, 3,
    # 3, 4
    res = run([Req(0.0, 5, 6)], mode="sd", k=3)
    assert col(res, "kv_blocks_used") == [2, 3, 3, 3, 3, 4]
    assert col(res, "proposed_tokens") == [0, 3, 3, 3, 3, 3]


def test_rule_kv_growth_to_exact_block_boundary():
    # SD k=3, prompt 4: the prefill holds 2 blocks; step 1 reserves 5 + 3 = 8 tokens (still 2 blocks) and accepts 3
    # (acc_len 4); step 2 reserves 9 + 3 = 12 tokens: exactly 3 blocks; step 3: 10 + 3 = 13 -> 4
    res = run([Req(0.0, 4, 7, acc={"d": [1, 4, 1, 1, 1, 1, 1]})], mode="sd", k=3)
    assert col(res, "kv_blocks_used") == [2, 2, 3, 4]


def test_rule_kv_released_at_finish():
    # r0 (prompt 8, output 1) finishes with its prefill at 1 and frees its 3 blocks; r1 arrives at 1.5 into an
    # empty pool: step 1 holds only r1's 1 block
    res = run([Req(0.0, 8, 1), Req(1.5, 3, 2)])
    assert req(res, "finish_time") == [1.0, 3.5]
    assert col(res, "kv_blocks_used") == [3, 1, 1]
    assert res.extras["kv_peak_blocks"] == 3


def test_rule_kv_released_at_finish_mid_batch():
    # r0 (output 3) and r1 (output 6) decode together; r0 finishes in step 2 and its 2 blocks are free from step 3:
    # r1 alone holds ceil(7/4) = 2, ceil(8/4) = 2, ceil(9/4) = 3
    res = run([Req(0.0, 4, 3), Req(0.0, 4, 6)])
    assert col(res, "kv_blocks_used") == [4, 4, 4, 2, 2, 3]
    assert req(res, "finish_time") == [3.0, 6.0]


def test_rule_preemption_newest_by_recompute():
    # 5 blocks; r0, r1 (prompt 4, output 6) take 2 blocks each at admission (free 1). At step 5 both need a third
    # block (context 9): 2 > 1 free, so the newest (r1) is preempted, its 2 blocks freed, r0 grows to 3 and
    # finishes at 6; step 6 recomputes r1's prompt + its 5 tokens (9 tokens, 3 blocks), whose prefill emits its
    # last token: it finishes at 7.
    res = run([Req(0.0, 4, 6), Req(0.0, 4, 6)], kv_tokens=20, max_num_seqs=2)
    assert req(res, "preemptions") == [0, 1]
    assert req(res, "finish_time") == [6.0, 7.0]
    assert req(res, "first_token_time") == [1.0, 1.0]  # a recompute does not move the first token
    assert col(res, "prefill_tokens") == [8, 0, 0, 0, 0, 0, 9]
    assert col(res, "kv_blocks_used") == [4, 4, 4, 4, 4, 3, 3]
    assert col(res, "emitted_tokens") == [2, 2, 2, 2, 2, 1, 1]


def test_rule_preemption_blocks_admission_in_that_step():
    # block 1 (a block per token), 17 blocks, SD k=3, nothing accepted: r0, r1 (prompt 4, output 6) hold 5 each
    # after admission and context + 3 after each verify: 8 + 8 after step 1. Step 2 needs 9 + 9 with 1 free:
    # r1 is preempted (8 freed), r0 grows to 9; r1's recompute (prompt 4 + 2 tokens: 7 blocks) would fit in the 8
    # free, but a step that preempted admits nobody: it comes back in step 3 (6 prompt tokens). Step 4 preempts it
    # again (r0 needs 11, r1 10, nothing free); step 5 has no room for its 8; r0 finishes at 6, r1 recomputes 7
    # tokens in step 6 and verifies in steps 7, 8.
    res = run([Req(0.0, 4, 6), Req(0.0, 4, 6)], mode="sd", k=3, block_size=1, kv_tokens=17,
              max_num_seqs=2)
    assert col(res, "prefill_tokens") == [8, 0, 0, 6, 0, 0, 7, 0, 0]
    assert col(res, "kv_blocks_used") == [10, 16, 9, 17, 11, 12, 8, 11, 12]
    assert req(res, "preemptions") == [0, 2]
    assert req(res, "finish_time") == [6.0, 9.0]


def test_rule_psd_preemption_blocks_admission_in_that_step():
    # test_rule_preemption_blocks_admission_in_that_step's two requests under PSD below split_min_batch (every step
    # plain SD for all, free drafts, no sync): the PSD rules' preemption gives the same hand-worked steps, r1's
    # recompute waiting out the step that preempted it
    res = run([Req(0.0, 4, 6), Req(0.0, 4, 6)], mode="psd", k=3, block_size=1, kv_tokens=17,
              max_num_seqs=2, psd=PSDConfig(split_min_batch=3))
    assert col(res, "prefill_tokens") == [8, 0, 0, 6, 0, 0, 7, 0, 0]
    assert col(res, "kv_blocks_used") == [10, 16, 9, 17, 11, 12, 8, 11, 12]
    assert req(res, "preemptions") == [0, 2]
    assert req(res, "finish_time") == [6.0, 9.0]
