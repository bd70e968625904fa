"""vLLM V1's token budget (server `scheduler: vllm-v1`; rules/decode_budget.fit_decodes): running requests take
1 + drafts tokens each, in admission order, from one step budget; one cut to 1 token verifies no drafts, one cut to
0 waits; the engine loop's gap (the step overhead) falls between busy steps, and arrivals during it join the next step.
Every step costs 1.0 s; in the budget cases k = 2 and nothing is accepted."""
from __future__ import annotations

from tests.simulator.engine.rule_cases import Req, col, req, run


def test_rule_vllm_v1_decode_cut_to_one_token():
    # budget 7: r0, r1 take 3 tokens each, r2 the 1 left: a plain decode (no drafts)
    res = run([Req(0.0, 2, 4)] * 3, mode="sd", k=2, budget=7, scheduler="vllm-v1")
    assert col(res, "batched_tokens") == [6, 7, 7, 7]
    assert req(res, "proposed_tokens") == [6, 6, 0]
    assert req(res, "finish_time") == [4.0, 4.0, 4.0]


def test_rule_vllm_v1_decode_cut_to_zero_waits():
    # budget 6: r0, r1 take it all; r2 waits until they finish at 4, then verifies alone: finish at 7
    res = run([Req(0.0, 2, 4)] * 3, mode="sd", k=2, budget=6, scheduler="vllm-v1")
    assert col(res, "batched_tokens") == [6, 6, 6, 6, 3, 3, 3]
    assert req(res, "finish_time") == [4.0, 4.0, 7.0]
    assert req(res, "decode_steps") == [3, 3, 3]


def test_rule_vllm_v1_engine_loop_gap_between_busy_steps():
    # overhead 0.5 is the gap after each busy step, not part of it: r0 prefills over [0, 1], the gap to 1.5, where
    # r1 (arrived at 1.2, inside the gap) joins r0's decode: [1.5, 2.5], r0 finishes; gap; r1 decodes [3, 4] and
    # finishes. Nothing is left, so no gap: idle until r2 arrives at 10: prefill [10, 11], gap, decode [11.5, 12.5]
    res = run([Req(0.0, 2, 2), Req(1.2, 2, 2), Req(10.0, 2, 2)], overhead=0.5,
              scheduler="vllm-v1")
    assert col(res, "start") == [0.0, 1.5, 3.0, 10.0, 11.5]
    assert col(res, "end") == [1.0, 2.5, 4.0, 11.0, 12.5]
    assert req(res, "first_scheduled_time") == [0.0, 1.5, 10.0]
    assert req(res, "finish_time") == [2.5, 4.0, 12.5]


def test_rule_vllm_v1_engine_loop_gap_while_requests_only_wait():
    # max_num_seqs 1, one-token outputs (the prefill samples it and finishes): r0 prefills over [0, 1] and finishes;
    # r1, waiting with nothing running, still waits out the gap: prefill [1.5, 2.5]
    res = run([Req(0.0, 2, 1), Req(0.0, 2, 1)], overhead=0.5, max_num_seqs=1, scheduler="vllm-v1")
    assert col(res, "start") == [0.0, 1.5]
    assert req(res, "finish_time") == [1.0, 2.5]


def _psd_v1(reqs, **server):
    """PSD under vLLM V1's scheduler: k = 2, the drafter 0.5 s per side, sync 0.25 s (target steps 1.0 s)."""
    from simulator.costs.draft_cost import DraftCost
    from simulator.server_config import PSDConfig

    return run(reqs, mode="psd", k=2, costs={"d": DraftCost("constant", seconds=0.5)},
               psd=PSDConfig(sync_s=0.25), scheduler="vllm-v1", **server)


def test_rule_vllm_v1_psd_budget_cuts_the_verify_side():
    # budget 4, four 1-token prompts at t=0 (sides 0, 1, 0, 1), output 6, every draft accepted (acc_len 3).
    # Step 0 [0, 1]: the four prompts (4 tokens) give each its first token. Each later step takes
    # max(1.0 verify, 0.5 draft) + 0.25 = 1.25 s. Step 1 [1, 2.25]: side 0 (r0, r2) has no proposal yet: a plain
    # token each (2 tokens), while side 1 (r1, r3) is drafted. Step 2: r1 verifies its 2 drafts (3 tokens), r3 gets
    # the 1 token left (cut to 0 drafts): r1 gen 1 -> 4, r3 1 -> 2. Step 3 likewise r0 2 -> 5, r2 2 -> 3. Step 4 [4.75,
    # 6]: r1 emits its last 2 (finish 6.0), r3 1 -> 3. Step 5 [6, 7.25]: r0 its last 1 (finish 7.25), r2 3 -> 4.
    # Step 6 [7.25, 8.5]: r3 alone on its side, all 3 tokens: 3 -> 6 (finish 8.5), r2 drafted. Step 7 [8.5, 9.75]:
    # r2 alone (a fallback step verifying its proposal): 4 -> 6 (finish 9.75). Without the budget r2, r3 would
    # finish with r0, r1 at 7.25 and 6.0.
    acc = {"d": [3] * 6}
    res = _psd_v1([Req(0.0, 1, 6, acc)] * 4, budget=4)
    assert req(res, "sub_batch") == [0, 1, 0, 1]
    assert col(res, "batched_tokens", device="target", phase="verify") == [2, 4, 4, 4, 4, 3, 3]
    assert col(res, "proposed_tokens", device="target", phase="verify") == [0, 2, 2, 2, 2, 2, 2]
    assert req(res, "finish_time") == [7.25, 6.0, 9.75, 8.5]
    assert req(res, "decode_steps") == [3, 2, 4, 3]
    assert req(res, "proposed_tokens") == [4, 4, 2, 2]
    assert res.extras["psd_fallback_steps"] == 1


def test_rule_vllm_v1_psd_engine_loop_gap():
    # overhead 0.5 is the gap after each busy step (not inside the PSD step): two 1-token prompts (sides 0, 1),
    # output 3, nothing accepted. Step 0 [0, 1] prefills both; each later step is max(1.0, 0.5) + 0.25 = 1.25,
    # 0.5 after the last: [1.5, 2.75] r0 plain token, [3.25, 4.5] r1 its proposal, [5, 6.25] r0 (finishes),
    # [6.75, 8] r1 alone (fallback, finishes); nothing left, no gap
    res = _psd_v1([Req(0.0, 1, 3)] * 2, overhead=0.5)
    starts = res.steps.groupby("step").start.min().tolist()
    assert starts == [0.0, 1.5, 3.25, 5.0, 6.75]
    assert req(res, "finish_time") == [6.25, 8.0]


def test_rule_vllm_v1_psd_verify_cut_to_zero_waits():
    # budget 3, three 1-token prompts at t=0 (sides 0, 1, 0), output 6, every draft accepted. Step 0 [0, 1]: the
    # prompts. Step 1 [1, 2.25]: r0, r2 a plain token each (2 -> gen 2), r1 drafted. Step 2: r1 verifies 2 drafts
    # (3 tokens, gen 4). Step 3 [3.5, 4.75]: r0 takes all 3 tokens (gen 5); r2 gets none and waits, keeping its
    # proposal. Step 4 [4.75, 6]: r1 its last 2 (finish 6.0) while r0 and r2 are drafted again. Step 5 [6, 7.25]:
    # side 0 alone (a fallback step): r0 its last token (finish 7.25), r2 waits again. Step 6 [7.25, 8.5]: r2 alone
    # verifies its proposal: gen 2 -> 5. Step 7 [8.5, 10.25]: r2 has no proposal: a fallback step drafts it first
    # (0.5), verifies (1.0), syncs (0.25): its last token, finish 10.25
    acc = {"d": [3] * 6}
    res = _psd_v1([Req(0.0, 1, 6, acc)] * 3, budget=3)
    assert col(res, "batched_tokens", device="target", phase="verify") == [2, 3, 3, 3, 3, 3, 3]
    assert req(res, "finish_time") == [7.25, 6.0, 10.25]
    assert req(res, "decode_steps") == [3, 2, 3]
    assert req(res, "proposed_tokens") == [4, 4, 4]
    assert res.extras["psd_fallback_steps"] == 3


def test_rule_vllm_v1_psd_engine_loop_gap_while_requests_only_wait():
    # PSD with max_num_seqs 1 runs 2 at once; one-token outputs (the prefill samples it and finishes): r0, r1
    # prefill over [0, 1] and finish; r2, waiting with nothing running, still waits out the gap: prefill [1.5, 2.5]
    res = _psd_v1([Req(0.0, 2, 1)] * 3, overhead=0.5, max_num_seqs=1)
    assert col(res, "start") == [0.0, 1.5]
    assert req(res, "finish_time") == [1.0, 1.0, 2.5]
