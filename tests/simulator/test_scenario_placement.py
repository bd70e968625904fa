"""simulator/scenario.py kv_capacity: a deployment's placement holds the linear-attention state of the server's own
max_num_seqs unless the deployment names another."""
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
