"""Placement and memory: KV capacity arithmetic, fit / no-fit as results, bad configs as clear errors."""
from __future__ import annotations

import pytest

from simulator.costs.placement import Deployment, deployment_from_config, kv_capacity_tokens, plan
from traces.catalog import GIB, get_gpu, get_model


def test_kv_capacity_by_hand_single_gpu():
    p = plan(Deployment("llama3.1-8b", "h100-80gb", gpu_memory_utilization=0.9, reserve_gib=2.0))
    room = 80e9 * 0.9 - 8.03e9 * 2 - 2 * GIB
    assert p.fits
    assert p.kv_capacity_tokens == int(room // (2 * 32 * 8 * 128 * 2))
    assert p.total_gpus == 1


def test_tensor_parallel_splits_weights_and_kv():
    one = plan(Deployment("qwen3-14b", "h100-80gb"))
    two = plan(Deployment("qwen3-14b", "h100-80gb", num_gpus=2, tp=2))
    assert two.gpus[0].weights_gib == pytest.approx(one.gpus[0].weights_gib / 2)
    assert two.kv_capacity_tokens > 2 * one.kv_capacity_tokens  # less weight per GPU leaves more room


def test_kv_heads_are_replicated_when_fewer_than_gpus():
    # Qwen3-235B has 4 KV heads; at TP 8 each GPU still holds one head's KV.
    p = plan(Deployment("qwen3-235b-a22b", "h200-141gb", num_gpus=8, tp=8))
    m = get_model("qwen3-235b-a22b")
    assert p.gpus[0].kv_bytes_per_token == 2 * m.num_layers * 1 * m.head_dim * 2


def test_colocated_drafter_costs_target_memory():
    alone = plan(Deployment("qwen3-32b", "h100-80gb", num_gpus=4, tp=4))
    sd = plan(Deployment("qwen3-32b", "h100-80gb", num_gpus=4, tp=4, drafter="qwen3-4b"))
    assert sd.fits and sd.kv_capacity_tokens < alone.kv_capacity_tokens
    d = get_model("qwen3-4b")
    assert sd.gpus[0].weights_gib - alone.gpus[0].weights_gib == pytest.approx(d.weight_bytes / 4 / GIB)
    assert sd.total_gpus == 4


def test_dedicated_drafter_adds_a_gpu_and_can_bind_capacity():
    psd = plan(Deployment("qwen3-32b", "h100-80gb", num_gpus=4, tp=4, drafter="qwen3-14b",
                          drafter_placement="dedicated"))
    assert psd.total_gpus == 5
    roles = {g.role: g for g in psd.gpus}
    assert set(roles) == {"target", "drafter"}
    assert psd.kv_capacity_tokens == min(g.kv_tokens for g in psd.gpus)
    assert psd.binding == "drafter"  # a 14B drafter on one GPU holds fewer tokens than the TP-4 target
    assert psd.per_gpu(1000.0) == 200.0


def test_sd_with_large_drafter_does_not_fit_but_psd_does():
    """MineDraft's report (SD out of memory with a Qwen3-8B drafter, PSD runs), on a catalog case:
    Qwen3-32B TP4 on 4x L40S at their gpu_memory_utilization 0.65, drafter unsharded (draft TP 1)."""
    common = dict(target="qwen3-32b", gpu="l40s", num_gpus=4, tp=4, drafter="qwen3-8b", gpu_memory_utilization=0.65)
    sd = plan(Deployment(**common, drafter_placement="colocated", drafter_tp=1))
    psd = plan(Deployment(**common, drafter_placement="dedicated"))
    assert not sd.fits and sd.kv_capacity_tokens == 0
    assert sd.message.startswith("does not fit: needs ")
    assert "GiB, has " in sd.message
    usable = 48e9 * 0.65 / GIB
    assert sd.has_gib == pytest.approx(usable)
    need = (get_model("qwen3-32b").weight_bytes / 4 + get_model("qwen3-8b").weight_bytes) / GIB + 2.0
    assert sd.needs_gib > need > usable
    assert psd.fits and psd.kv_capacity_tokens > 0


def test_does_not_fit_is_a_result_even_for_the_target_alone():
    p = plan(Deployment("llama3.3-70b", "l40s"))  # 141 GB of weights on one 48 GB GPU
    assert not p.fits
    assert "does not fit: needs" in p.message and p.needs_gib > p.has_gib


def test_min_kv_tokens_decides_fit():
    tight = Deployment("qwen3-32b", "a100-80gb", num_gpus=2, tp=2, gpu_memory_utilization=0.5)
    free_tokens = plan(tight).kv_capacity_tokens
    assert plan(tight).fits
    from dataclasses import replace
    assert not plan(replace(tight, min_kv_tokens=free_tokens + 1)).fits
    assert plan(replace(tight, min_kv_tokens=free_tokens)).fits


@pytest.mark.parametrize("doc,match", [
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "gpus": 4}, r"deployment.gpus: unknown key"),
    ({"gpu": "h100-80gb"}, r"deployment.target: required"),
    ({"target": "qwen3-33b", "gpu": "h100-80gb"}, r"deployment.target: unknown model"),
    ({"target": "qwen3-32b", "gpu": "b300"}, r"deployment.gpu: unknown GPU"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "num_gpus": 4, "tp": 3}, r"deployment.tp: 3 does not divide"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "num_gpus": 4, "tp": 2}, r"deployment.num_gpus"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "tp": 0}, r"deployment.tp: expected an integer in \[1, 4096\]"),
    ({"target": "llama3.1-8b", "gpu": "h100-80gb", "num_gpus": 3, "tp": 3},
     r"deployment.tp: 3 does not divide the 32 attention heads"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "num_gpus": 2, "tp": 2, "drafter": "smollm2-135m"},
     r"deployment.drafter_tp: the drafter is sharded 2 ways: 2 does not divide the 9 attention heads"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "reserve_gib": float("nan")}, r"deployment.reserve_gib: expected a finite"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "gpu_memory_utilization": "0.9"}, r"gpu_memory_utilization: expected a finite"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "max_model_len": 2**40}, r"max_model_len: expected an integer in"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "drafter": "qwen3-4b", "drafter_placement": "remote"},
     r"deployment.drafter_placement"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "drafter": "qwen3-4b", "drafter_tp": 2}, r"deployment.drafter_tp"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "drafter": "qwen3-4b", "drafter_gpu": "l40s"},
     r"deployment.drafter_gpu: only a dedicated"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "gpu_memory_utilization": 1.2}, r"gpu_memory_utilization"),
    ({"target": "qwen3-32b", "gpu": "h100-80gb", "reserve_gib": -1}, r"reserve_gib"),
])
def test_bad_deployment_configs_name_the_key(doc, match):
    with pytest.raises(ValueError, match=match):
        deployment_from_config(doc)


def test_engine_entry_point_uses_the_callers_key_path():
    p = kv_capacity_tokens({"target": "llama3.1-8b", "gpu": "h200-141gb"})
    assert p.fits and p.kv_capacity_tokens > plan(Deployment("llama3.1-8b", "h100-80gb")).kv_capacity_tokens
    with pytest.raises(ValueError, match=r"server.deployment.tp"):
        kv_capacity_tokens({"target": "llama3.1-8b", "gpu": "h200-141gb", "tp": "2"})
    assert get_gpu("h200-141gb").memory_gb == 141


def test_a_deployment_counts_the_gpus_of_per_gpu_figures():
    from simulator.server_config import ServerConfig

    dep = {"target": "llama3.1-70b", "gpu": "h100-80gb", "tp": 4, "num_gpus": 4}
    assert ServerConfig(target_profile="x", deployment=dep).num_target_gpus == 4
    psd = {**dep, "drafter": "llama3.2-1b", "drafter_placement": "dedicated", "drafter_gpus": 2}
    s = ServerConfig(target_profile="x", deployment=psd)
    assert (s.num_target_gpus, s.num_draft_gpus) == (4, 2)
    with pytest.raises(ValueError, match="num_target_gpus: 2 but the deployment has 4"):
        ServerConfig(target_profile="x", deployment=dep, num_target_gpus=2)


def test_run_reports_per_gpu_throughput_over_the_deployments_gpus():
    from experiments.run import run_experiment

    dep = {"target": "llama3.1-8b", "gpu": "h100-80gb", "tp": 4, "num_gpus": 4}
    doc = {"name": "tp4", "traces": "builtin:default",
           "workload": {"num_requests": 40, "arrival": {"kind": "poisson", "rate": 5.0},
                        "sample": {"with_replacement": True}},
           "server": {"target_profile": {"kind": "roofline", "model": "llama3.1-8b", "gpu": "h100-80gb", "tp": 4},
                      "deployment": dep},
           "runs": [{"name": "AR", "mode": "ar"}]}
    (s,) = run_experiment(doc).summary.values()
    assert s["num_gpus"] == 4
    assert s["throughput_tok_s_per_gpu"] == pytest.approx(s["throughput_tok_s"] / 4, rel=1e-6)
