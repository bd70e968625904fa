"""vLLM V1's token budget (server `scheduler: vllm-v1`; rules/decode_budget.fit_decodes): running requests take
1 + drafts tokens each, in admission order, from one step budget; one cut to 1 token verifies no drafts, one cut to
0 waits. Step path only (the compiled path does not take vllm-v1). Every step costs 1.0 s, k = 2, nothing accepted."""
from __future__ import annotations

from tests.simulator.engine.rule_cases import Req, col, req, run


def test_rule_vllm_v1_decode_cut_to_one_token(step_path):
    # budget 7: r0, r1 take 3 tokens each, r2 the 1 left: a plain decode (no drafts)
    res = run(step_path, [Req(0.0, 2, 4)] * 3, mode="sd", k=2, budget=7, scheduler="vllm-v1")
    assert col(res, "batched_tokens") == [6, 7, 7, 7]
    assert req(res, "proposed_tokens") == [6, 6, 0]
    assert req(res, "finish_time") == [4.0, 4.0, 4.0]


def test_rule_vllm_v1_decode_cut_to_zero_waits(step_path):
    # budget 6: r0, r1 take it all; r2 waits until they finish at 4, then verifies alone: finish at 7
    res = run(step_path, [Req(0.0, 2, 4)] * 3, mode="sd", k=2, budget=6, scheduler="vllm-v1")
    assert col(res, "batched_tokens") == [6, 6, 6, 6, 3, 3, 3]
    assert req(res, "finish_time") == [4.0, 4.0, 7.0]
    assert req(res, "decode_steps") == [3, 3, 3]
