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
    assert glm.derived_params() == pytest.approx(glm.params, rel=0.03)  # the card's 106B
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
