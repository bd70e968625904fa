"""vLLM V1's token budget (server `scheduler: vllm-v1`; rules/decode_budget.fit_decodes): running requests take
1 + drafts tokens each, in admission order, from one step budget; one cut to 1 token verifies no drafts, one cut to
0 waits; the engine loop's gap (the step overhead) falls between busy steps, and arrivals during it join the next step.
Every step costs 1.0 s; in the budget cases k = 2 and nothing is accepted."""
from __future__ import annotations

from tests.simulator.engine.rule_cases import Req, col, req, run


def test_rule_vllm_v1_decode_cut_to_one_token(engine_path):
    # budget 7: r0, r1 take 3 tokens each, r2 the 1 left: a plain decode (no drafts)
    res = run(engine_path, [Req(0.0, 2, 4)] * 3, mode="sd", k=2, budget=7, scheduler="vllm-v1")
    assert col(res, "batched_tokens") == [6, 7, 7, 7]
    assert req(res, "proposed_tokens") == [6, 6, 0]
    assert req(res, "finish_time") == [4.0, 4.0, 4.0]


def test_rule_vllm_v1_decode_cut_to_zero_waits(engine_path):
    # budget 6: r0, r1 take it all; r2 waits until they finish at 4, then verifies alone: finish at 7
    res = run(engine_path, [Req(0.0, 2, 4)] * 3, mode="sd", k=2, budget=6, scheduler="vllm-v1")
    assert col(res, "batched_tokens") == [6, 6, 6, 6, 3, 3, 3]
    assert req(res, "finish_time") == [4.0, 4.0, 7.0]
    assert req(res, "decode_steps") == [3, 3, 3]


def test_rule_vllm_v1_engine_loop_gap_between_busy_steps(engine_path):
    # overhead 0.5 is the gap after each busy step, not part of it: r0 prefills over [0, 1], the gap to 1.5, where
    # r1 (arrived at 1.2, inside the gap) joins r0's decode: [1.5, 2.5], r0 finishes; gap; r1 decodes [3, 4] and
    # finishes. Nothing is left, so no gap: idle until r2 arrives at 10: prefill [10, 11], gap, decode [11.5, 12.5]
    res = run(engine_path, [Req(0.0, 2, 2), Req(1.2, 2, 2), Req(10.0, 2, 2)], overhead=0.5,
              scheduler="vllm-v1")
    assert col(res, "start") == [0.0, 1.5, 3.0, 10.0, 11.5]
    assert col(res, "end") == [1.0, 2.5, 4.0, 11.0, 12.5]
    assert req(res, "first_scheduled_time") == [0.0, 1.5, 10.0]
    assert req(res, "finish_time") == [2.5, 4.0, 12.5]


def test_rule_vllm_v1_engine_loop_gap_while_requests_only_wait(engine_path):
    # max_num_seqs 1, one-token outputs (the prefill samples it and finishes): r0 prefills over [0, 1] and finishes;
    # r1, waiting with nothing running, still waits out the gap: prefill [1.5, 2.5]
    res = run(engine_path, [Req(0.0, 2, 1), Req(0.0, 2, 1)], overhead=0.5, max_num_seqs=1, scheduler="vllm-v1")
    assert col(res, "start") == [0.0, 1.5]
    assert req(res, "finish_time") == [1.0, 2.5]
