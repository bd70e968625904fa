"""Draft costs per GPU (experiments/plan/draft_gpu.py): a drafter profile measured on one GPU and priced on another
is scaled by the two datasheets' roofline ratio (memory terms by bandwidth, per-token compute by FLOPs) or refused;
a host-side profile stays as it is; a profile that names no device is refused."""
from __future__ import annotations

import json

import pytest

from experiments.plan.config import load_plan_config
from experiments.plan.draft_gpu import drafter_on_gpu, gpu_of_device
from experiments.plan.candidates import base_experiment, build_candidates
from experiments.plan.prices import price_table
from simulator.costs.latency import profile_from_dict

# datasheet numbers, typed here from NVIDIA's datasheets (not read from the catalog): GB/s and bf16 dense TFLOPS
H100 = (3350.0, 989.0)
L40S = (864.0, 362.05)


def _inline(device: str, kind: str = "linear") -> dict:
    return {"kind": "whole_proposal", "profile": {
        "kind": kind, "name": "p", "coefficients": {"const": 1e-3, "kv_tokens": 2e-9, "batched_tokens": 1e-6},
        "provenance": {"source": "test", "device": device}}}


def test_devices_name_catalog_gpus_or_the_host():
    assert gpu_of_device("NVIDIA H100 80GB") == "h100-80gb" and gpu_of_device("L40S") == "l40s"
    assert gpu_of_device("host CPU") == "host" and gpu_of_device("2x NVIDIA Z9") is None and gpu_of_device("") is None


def test_a_profile_from_another_gpu_is_scaled_by_the_roofline_ratio():
    spec, note = drafter_on_gpu("d", _inline("NVIDIA H100 80GB"), "l40s", "roofline", "w")
    prof = profile_from_dict(spec["profile"], "scaled")
    memory, compute = H100[0] / L40S[0], H100[1] / L40S[1]
    # one step of 4 sequences, 12 tokens proposed, 2,000 KV tokens: memory terms x3.88, the token term x2.73
    want = 1e-3 * memory + 2e-9 * 2000 * memory + 1e-6 * 12 * compute
    assert prof.step_time(4, 12, 2000) == pytest.approx(want, rel=1e-3)
    assert "l40s" in prof.provenance.device and "roofline-scaled to l40s" in note
    assert drafter_on_gpu("d", _inline("NVIDIA H100 80GB"), "h100-80gb", "roofline", "w") == \
        (_inline("NVIDIA H100 80GB"), None)  # on its own GPU: unchanged
    assert drafter_on_gpu("d", _inline("host CPU"), "l40s", "roofline", "w")[1] is None


@pytest.mark.parametrize("device, transfer, message", [
    ("NVIDIA H100 80GB", "refuse", r"w\.profile: 'p' was measured on h100-80gb, not l40s; candidates.draft_transfer"),
    ("", "roofline", r"does not say which GPU it was measured on"),
])
def test_a_profile_that_cannot_follow_the_gpu_is_refused(device, transfer, message):
    with pytest.raises(ValueError, match=message):
        drafter_on_gpu("d", _inline(device), "l40s", transfer, "w")


def test_the_shipped_plan_prices_eagle3_drafting_on_each_candidates_gpu():
    plan = load_plan_config("plan_llama8b", ["candidates.tp=[1]", "candidates.gpus=[h100-80gb,l40s]"])
    base = base_experiment(plan)
    cands = [c for c in build_candidates(plan, base, price_table(None, {})) if c.mode.name == "sd-eagle3-k3"]
    by_gpu = {c.gpu: c for c in cands}
    assert by_gpu["h100-80gb"].config["drafters"]["eagle3"]["profile"] == "eagle3-llama3.1-8b-h100-specbench"
    l40s = by_gpu["l40s"].config["drafters"]["eagle3"]["profile"]
    assert l40s["coefficients"]["const"] == pytest.approx(0.00213526175 * H100[0] / L40S[0], rel=1e-3)
    assert by_gpu["l40s"].config["drafters"]["ngram"] == base["drafters"]["ngram"]  # host-side: the same
    eagle_k3 = json.dumps([plan.candidates.modes[1].model_dump()])
    refuse = load_plan_config("plan_llama8b", ["candidates.tp=[1]", "candidates.gpus=[l40s]", "candidates.profiles={}",
                                               "candidates.draft_transfer=refuse", f"candidates.modes={eagle_k3}"])
    with pytest.raises(ValueError, match=r"candidate 'l40s tp1 x1 sd-eagle3-k3': drafters.eagle3.profile: "
                                         r"'eagle3-llama3.1-8b-h100-specbench' was measured on h100-80gb"):
        build_candidates(refuse, base_experiment(refuse), price_table(None, {}))
