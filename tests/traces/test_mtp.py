"""MTP: catalog heads against their config numbers by hand, vLLM's n_predict rule, the head's placement and cost."""
from __future__ import annotations

import pytest

from simulator.costs.draft_cost import draft_cost_from_config
from simulator.costs.placement import Deployment, plan
from simulator.costs.roofline import RooflineProfile
from traces.catalog import GIB, get_gpu, get_model
from traces.mtp import check_mtp_k, layer_schedule, mtp_draft_cost, reuses_head


def test_catalog_mtp_entries_carry_their_config_numbers():
    # config.json num_nextn_predict_layers = 1 for both (the sources are cited in models.yaml)
    mimo, glm = get_model("mimo-7b"), get_model("glm-4.5-air")
    assert (mimo.mtp_layers, glm.mtp_layers) == (1, 1)
    assert (mimo.num_layers, mimo.hidden_size, mimo.intermediate_size, mimo.vocab_size) == (36, 4096, 11008, 151680)
    assert (glm.num_layers, glm.num_heads, glm.num_kv_heads, glm.num_experts, glm.moe_intermediate_size) == (
        46, 96, 8, 128, 1408)
    assert glm.derived_params() == pytest.approx(glm.params, rel=0.01)  # the card's 106B
    attn = 4096 * 96 * 128 + 2 * 4096 * 8 * 128 + 96 * 128 * 4096  # q, k, v, o
    layer = attn + 3 * 4096 * 1408 + 128 * 3 * 4096 * 1408 + 4096 * 128  # shared expert, routed experts, router
    assert glm.derived_params() == pytest.approx(45 * layer + attn + 3 * 4096 * 10944
                                                 + 2 * 151552 * 4096)  # layer 0 dense (first_k_dense_replace 1)
    assert glm.expert_params == 45 * 128 * 3 * 4096 * 1408
    assert get_model("llama3.1-8b").mtp_layers == 0
    with pytest.raises(ValueError, match="no MTP head"):
        get_model("llama3.1-8b:mtp")


def test_mimo_head_by_hand():
    head = get_model("mimo-7b:mtp")
    h, v = 4096, 151680
    attn = h * 4096 + 2 * h * 1024 + 4096 * h  # q, k, v (8 KV heads x 128), o
    mlp = 3 * h * 11008
    layer = attn + mlp + 2 * h * h  # + the [embedding; hidden] -> hidden projection
    assert head.weight_bytes == pytest.approx(2 * layer)  # bf16; the LM head is the target's
    assert head.read_weight_bytes == pytest.approx(2 * (layer + v * h))  # a forward reads the LM head too
    assert head.matmul_params_per_token == pytest.approx(layer + v * h)
    assert head.kv_bytes_per_token() == 2 * 1 * 8 * 128 * 2  # one layer's K and V


def test_glm_head_counts_only_routed_experts_as_active():
    head = get_model("glm-4.5-air:mtp")
    h, e = 4096, 3 * 4096 * 1408
    assert head.weight_bytes - 2 * 2 * h * h == pytest.approx(2 * get_model("glm-4.5-air").layer_params())
    assert head.params - head.active == pytest.approx((128 - 8) * e)


def test_head_weights_and_kv_are_placed_beside_the_target():
    alone = plan(Deployment("mimo-7b", "h100-80gb"))
    with_head = plan(Deployment("mimo-7b", "h100-80gb", drafter="mimo-7b:mtp"))
    head = get_model("mimo-7b:mtp")
    assert with_head.gpus[0].weights_gib - alone.gpus[0].weights_gib == pytest.approx(head.weight_bytes / GIB)
    room = with_head.gpus[0].kv_room_gib * GIB
    assert with_head.kv_capacity_tokens == int(room // (get_model("mimo-7b").kv_bytes_per_token()
                                                        + head.kv_bytes_per_token()))
    assert with_head.kv_capacity_tokens < alone.kv_capacity_tokens
    with pytest.raises(ValueError, match="only for its own model"):
        plan(Deployment("glm-4.5-air", "h100-80gb", num_gpus=4, tp=4, drafter="mimo-7b:mtp"))
    with pytest.raises(ValueError, match="colocated"):
        plan(Deployment("mimo-7b", "h100-80gb", drafter="mimo-7b:mtp", drafter_placement="dedicated"))


def test_vllm_n_predict_rule():
    check_mtp_k(1, 1)
    check_mtp_k(5, 1)  # one layer reused five times
    check_mtp_k(2, 3)  # fewer drafts than layers
    check_mtp_k(6, 3)
    with pytest.raises(ValueError, match="must be divisible by n_predict=3"):
        check_mtp_k(5, 3)
    assert layer_schedule(6, 3) == [0, 1, 2, 0, 1, 2]
    assert layer_schedule(3, 1) == [0, 0, 0]
    assert reuses_head(3, 1) and not reuses_head(1, 1) and not reuses_head(2, 3)


def test_mtp_draft_cost_is_k_forwards_of_the_heads_roofline():
    cost = draft_cost_from_config(mtp_draft_cost("mimo-7b", "h100-80gb"))
    ref = RooflineProfile(get_model("mimo-7b:mtp"), get_gpu("h100-80gb"))
    # 8 sequences, k = 3: three forwards of one token per sequence, context growing by one token each
    expect = sum(ref.step_time(8, 8, 8000 + i * 8) for i in range(3))
    assert cost.draft_time(8, 24, 3, 8000, verify_time=0.02) == pytest.approx(expect)
    # the head is far cheaper than the target's forward (one layer of 36, plus the LM head)
    target = RooflineProfile(get_model("mimo-7b"), get_gpu("h100-80gb"))
    assert ref.step_time(8, 8, 8000) < 0.25 * target.step_time(8, 8, 8000)


def test_deepseek_v3_and_its_head_by_hand():
    # config.json (cited in models.yaml): MLA with q_lora 1536, kv_lora 512, nope/rope/v 128/64/128; 256 experts of
    # 2048 + one shared; 3 leading dense layers of 18432; fp8 weights, bf16 activations and KV
    m, head = get_model("deepseek-v3"), get_model("deepseek-v3:mtp")
    assert (m.mtp_layers, m.num_layers, m.hidden_size, m.vocab_size) == (1, 61, 7168, 129280)
    h, n = 7168, 128
    mla = h * 1536 + 1536 * n * (128 + 64) + h * (512 + 64) + 512 * n * (128 + 128) + n * 128 * h
    moe = 3 * h * 2048 + 256 * 3 * h * 2048 + h * 256  # shared expert, routed experts, router
    dense = 3 * h * 18432
    assert m.derived_params() == pytest.approx(3 * (mla + dense) + 58 * (mla + moe) + 2 * 129280 * h)
    assert m.derived_params() == pytest.approx(671e9, rel=0.001)  # the card's 671B
    unique = mla + moe + 2 * h * h  # the MTP layer and its [embedding; hidden] projection
    assert head.weight_bytes == pytest.approx(unique * 1)  # fp8: one byte a weight; embedding and head shared
    assert head.weight_bytes == pytest.approx(11.5e9, rel=0.02)  # DeepSeek's README_WEIGHTS: 11.5B unique
    assert head.read_weight_bytes == pytest.approx(unique + 129280 * h)
    # MLA caches one latent of kv_lora + rope values per token and layer, in bf16, replicated on every TP rank
    assert m.kv_bytes_per_token() == 61 * (512 + 64) * 2 == m.kv_bytes_per_token_gpu(8)
    assert head.kv_bytes_per_token() == (512 + 64) * 2
    assert m.attention_flops_per_pair() == 61 * n * (2 * (512 + 64) + 2 * 512)  # absorbed decode form


def test_qwen3_next_and_its_head_by_hand():
    # 48 layers, 36 of them Gated DeltaNet (16 key / 32 value heads of 128, conv 4); 12 gated full-attention layers
    # of 16 heads, 2 KV heads of 256; every layer MoE (512 experts of 512, 10 per token, a shared expert of 512)
    m, head = get_model("qwen3-next-80b-a3b"), get_model("qwen3-next-80b-a3b:mtp")
    h = 2048
    attn = h * 4096 * 2 + 2 * h * 512 + 4096 * h  # q with its gate, k, v, o
    linear = h * (2 * 2048 + 2 * 4096) + h * 2 * 32 + (2 * 2048 + 4096) * 4 + 4096 * h
    moe = 3 * h * 512 + 512 * 3 * h * 512 + h * 512
    assert m.derived_params() == pytest.approx(12 * attn + 36 * linear + 48 * moe + 2 * 151936 * h)
    assert m.derived_params() == pytest.approx(80e9, rel=0.01)  # the card's 80B
    assert m.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2  # only the full-attention layers hold KV
    assert m.linear_state_bytes_per_seq == 36 * (3 * (2 * 2048 + 4096) + 32 * 128 * 128) * 2
    assert head.weight_bytes == pytest.approx(2 * (attn + moe + 2 * h * h))  # one full-attention MoE layer + fc
    assert head.kv_bytes_per_token() == 2 * 2 * 256 * 2 and head.linear_state_bytes_per_seq == 0
    assert head.params - head.active == pytest.approx((512 - 10) * 3 * h * 512)


def test_heads_of_mla_and_linear_attention_targets_are_placed_beside_them():
    usable = 141e9 * 0.9
    alone = plan(Deployment("deepseek-v3", "h200-141gb", num_gpus=8, tp=8))
    with_head = plan(Deployment("deepseek-v3", "h200-141gb", num_gpus=8, tp=8, drafter="deepseek-v3:mtp"))
    head = get_model("deepseek-v3:mtp")
    assert with_head.fits
    assert with_head.gpus[0].weights_gib - alone.gpus[0].weights_gib == pytest.approx(head.weight_bytes / 8 / GIB)
    weights = (671e9 + head.weight_bytes) / 8
    assert with_head.kv_capacity_tokens == int((usable - weights - 2 * GIB) // ((61 + 1) * (512 + 64) * 2))
    # Qwen3-Next on 4 GPUs: each holds 1 of the 2 KV heads (replicated), a quarter of the recurrent state of the 64
    # sequences vLLM may run, and a quarter of the weights
    m, head = get_model("qwen3-next-80b-a3b"), get_model("qwen3-next-80b-a3b:mtp")
    p = plan(Deployment("qwen3-next-80b-a3b", "h100-80gb", num_gpus=4, tp=4, drafter="qwen3-next-80b-a3b:mtp",
                        max_num_seqs=64))
    state = 64 * m.linear_state_bytes_per_seq / 4
    assert p.gpus[0].state_gib == pytest.approx(state / GIB)
    room = 80e9 * 0.9 - (m.weight_bytes + head.weight_bytes) / 4 - 2 * GIB - state
    assert p.kv_capacity_tokens == int(room // (12 * 1 * 2 * 256 * 2 + 1 * 1 * 2 * 256 * 2))
    fewer = plan(Deployment("qwen3-next-80b-a3b", "h100-80gb", num_gpus=4, tp=4, max_num_seqs=8))
    more = plan(Deployment("qwen3-next-80b-a3b", "h100-80gb", num_gpus=4, tp=4, max_num_seqs=256))
    assert fewer.kv_capacity_tokens > more.kv_capacity_tokens  # every running sequence holds a state
    with pytest.raises(ValueError, match=r"deployment\.max_num_seqs: required for target 'qwen3-next-80b-a3b': its "
                                         r"36 linear-attention layers hold a recurrent state of 37\.7 MiB"):
        plan(Deployment("qwen3-next-80b-a3b", "h100-80gb", num_gpus=4, tp=4))
