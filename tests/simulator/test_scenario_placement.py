"""simulator/scenario.py kv_capacity: a deployment's placement holds the linear-attention state of every sequence the
run holds at once (the server's max_num_seqs; PSD: both sub-batches) unless the deployment names another count."""
from __future__ import annotations

from simulator.costs.placement import Deployment, plan
from simulator.scenario import kv_capacity
from simulator.server_config import RunSpec, ServerConfig


def _server(seqs: int, **deployment) -> ServerConfig:
    dep = {"target": "qwen3-next-80b-a3b", "gpu": "h100-80gb", "num_gpus": 4, "tp": 4, **deployment}
    return ServerConfig.model_validate({"max_num_seqs": seqs, "deployment": dep,
                                        "target_profile": {"kind": "roofline", "model": "qwen3-next-80b-a3b",
                                                           "gpu": "h100-80gb", "tp": 4}})


def test_the_servers_max_num_seqs_sizes_the_linear_attention_state():
    run = RunSpec(name="r", mode="ar")
    for seqs in (8, 128):
        tokens, _ = kv_capacity(_server(seqs), run)
        assert tokens == plan(Deployment("qwen3-next-80b-a3b", "h100-80gb", num_gpus=4, tp=4,
                                         max_num_seqs=seqs)).kv_capacity_tokens
    assert kv_capacity(_server(8), run)[0] > kv_capacity(_server(128), run)[0]
    # a deployment that names its own count keeps it
    assert kv_capacity(_server(8, max_num_seqs=128), run)[0] == kv_capacity(_server(128), run)[0]


# Qwen3-Next on 4 x H100 (TP 4), worked by hand from its catalog entry: one running sequence's Gated DeltaNet state is
# 36 layers x (conv window 3 x (2 x 16 x 128 + 32 x 128) + delta rule 32 x 128 x 128) x 2 bytes = 39,518,208 bytes,
# 9,879,552 on each of the 4 GPUs; a token's KV on one GPU is 12 attention layers x 2 (K and V) x 1 KV head (its 2
# heads over 4 GPUs: one each) x 256 x 2 bytes = 12,288 bytes. So each further state held costs exactly 804 KV tokens.
TOKENS_PER_STATE = 804
PSD_POLICY = {"name": "fixed", "drafter": "d", "k": 2}


def test_a_psd_run_holds_the_state_of_both_sub_batches():
    ar_tokens, _ = kv_capacity(_server(8), RunSpec(name="ar", mode="ar"))
    # PSD at max_num_seqs 8 runs two sub-batches of 8 (PSDConfig default): 16 states, 8 more than AR's
    psd_tokens, info = kv_capacity(_server(8), RunSpec(name="psd", mode="psd", policy=PSD_POLICY))
    assert ar_tokens - psd_tokens == 8 * TOKENS_PER_STATE == 6432
    assert "linear-attention state of 16 sequences" in info["placement"]["message"]
    # sub-batches of 3: 6 states, 2 fewer than AR's 8
    small = RunSpec(name="psd", mode="psd", policy=PSD_POLICY, psd={"sub_batch_max_num_seqs": 3})
    assert kv_capacity(_server(8), small)[0] - ar_tokens == 2 * TOKENS_PER_STATE
    # a deployment that names its own count keeps it, PSD or not
    assert kv_capacity(_server(8, max_num_seqs=8), RunSpec(name="psd", mode="psd", policy=PSD_POLICY))[0] == ar_tokens
