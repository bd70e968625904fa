"""Plans simulate vLLM V1's scheduler by default (the engine the deploy line runs) and say which scheduler each
candidate was simulated under; draftsim's rules, asked for by name, are flagged as not the deployed engine."""
from __future__ import annotations

from experiments.config import load_config
from experiments.plan.config import load_plan_config


def _plan(scheduler: dict) -> dict:
    return {"kind": "plan", "name": "sched-small", "seed": 0, "base": "default",
            "traffic": {"target_rate": 4, "num_requests": 40},
            "slo": {"ttft_s": 2.0, "tpot_s": 0.1, "attainment": 0.9},
            "search": {"seeds": 1, "max_tests": 2, "tail_requests": 1, "requests_per_replica": 40,
                       "curve_fractions": [0.5], "service_probe": False},
            "candidates": {"target": "llama3.1-8b", "gpus": ["h100-80gb"], "tp": [1],
                           "modes": [{"name": "AR", "mode": "ar"}], "scheduler": scheduler,
                           "profiles": {"h100-80gb": {1: "llama3.1-8b-h100-specbench"}},
                           "deployment": {"max_model_len": 4096, "gpu_memory_utilization": 0.9}}}


def _candidates(scheduler: dict):
    from experiments.plan.candidates import base_experiment, build_candidates
    from experiments.plan.prices import price_table

    plan = load_plan_config(_plan(scheduler))
    return build_candidates(plan, base_experiment(plan), price_table())


def _server(c):
    doc = {**c.config, "workload": {"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0}}}
    return load_config(doc, label=c.id).server


def test_a_plan_simulates_vllm_v1_by_default_and_says_so():
    from experiments.plan.assumptions import _scheduling

    (c,) = _candidates({"max_num_seqs": [16]})
    s = _server(c)
    assert (s.scheduler, s.chunked_prefill, s.prefill) == ("vllm-v1", True, "mixed")
    (line,) = _scheduling([c])
    assert line.startswith("scheduling simulated: server.scheduler vllm-v1, chunked prefill on: vLLM V1's")
    assert "not vLLM V1's" not in line


def test_draftsim_rules_asked_for_by_name_are_simulated_and_flagged():
    from experiments.plan.assumptions import _scheduling

    cands = _candidates({"scheduler": ["vllm-v1", "draftsim"]})
    assert [(s.scheduler, s.chunked_prefill) for s in map(_server, cands)] == [("vllm-v1", True), ("draftsim", True)]
    v1, old = _scheduling(cands)[::-1]  # sorted by name: draftsim first
    assert v1.startswith("scheduling simulated: server.scheduler vllm-v1 (1 of 2 candidates), chunked prefill on")
    assert old.startswith("scheduling simulated: server.scheduler draftsim (1 of 2 candidates), chunked prefill on")
    assert old.endswith("not vLLM V1's rules, which the deploy line runs") and "not vLLM" not in v1

    cands = _candidates({"scheduler": ["draftsim"], "chunked_prefill": [False, True]})
    assert sorted(s.chunked_prefill for s in map(_server, cands)) == [False, True]
    (line,) = _scheduling(cands)
    assert line.startswith("scheduling simulated: server.scheduler draftsim, chunked prefill off/on: draftsim's")


def test_a_plan_asking_vllm_v1_without_chunked_prefill_is_refused_naming_the_field():
    import pytest

    with pytest.raises(ValueError, match=r"chunked_prefill: false needs scheduler: draftsim"):
        _candidates({"chunked_prefill": [False]})
