"""The measured bundles and CPU profiles shipped in traces/data meet the issue's bar."""
from pathlib import Path

import numpy as np
import pytest

from calibration.checks import check_trace_consistency
from calibration.prompts import WORKLOADS
from simulator.costs.latency import load_profile
from traces.bundle import load_bundle

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"
POOL = {"int8": "int8", "layers24": "truncated", "layers20": "truncated", "ngram": "ngram"}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_shipped_bundle(workload):
    folder = DATA / "bundles" / f"smollm2-135m-instruct-{workload}"
    if not folder.is_dir():
        pytest.fail(f"missing shipped bundle {folder}")
    b = load_bundle(folder)
    assert b.meta.target == "smollm2-135m-instruct" and b.meta.dataset == workload
    assert {n: s.kind for n, s in b.meta.drafters.items()} == POOL
    assert len(b.requests) >= 80
    assert min(r.output_len for r in b.requests) >= 128
    assert b.meta.source["kind"] == "measured" and b.meta.source["versions"]["torch"]
    assert b.meta.extra["target_argmax_mismatches"] == 0
    check_trace_consistency(b)
    for r in b.requests:
        assert r.category == workload and r.output_token_ids is not None
        assert r.drafters["int8"].tv is not None and r.drafters["ngram"].proposal_len is not None
        assert np.all((r.drafters["int8"].tv >= 0) & (r.drafters["int8"].tv <= 1))


@pytest.mark.parametrize("name", ["smollm2-135m-instruct-cpu", "smollm2-135m-instruct-cpu-int8",
                                  "smollm2-135m-instruct-cpu-layers24", "smollm2-135m-instruct-cpu-layers20",
                                  "smollm2-135m-instruct-cpu-ngram"])
def test_shipped_cpu_profiles(name):
    path = DATA / "profiles" / f"{name}.yaml"
    if not path.is_file():
        pytest.fail(f"missing shipped profile {path}")
    prof = load_profile(path)
    assert prof.kind == "linear" and prof.provenance.source == "measured"
    assert prof.provenance.versions and prof.provenance.date
    assert len(prof.measurements) >= 12 and all(m.load is not None and m.repeats >= 5 for m in prof.measurements)
    assert "mape_percent" in prof.fit and "mape_percent_without_term" in prof.fit
    if not name.endswith("ngram"):
        assert load_profile(DATA / "profiles" / f"{name}-table.yaml").kind == "table"


def test_bundles_name_the_shipped_profiles():
    for workload in WORKLOADS:
        b = load_bundle(DATA / "bundles" / f"smollm2-135m-instruct-{workload}")
        for spec in b.meta.drafters.values():
            assert (DATA / "profiles" / f"{spec.cost_model}.yaml").is_file(), spec.cost_model


def test_shipped_bundle_and_profiles_drive_the_simulator():
    """The measured data plugs into draftsim run: same tokens everywhere, SD shortens steps as the traces say."""
    from experiments.run import run_experiment

    bundle_dir = DATA / "bundles" / "smollm2-135m-instruct-code-edit"
    cfg = {
        "name": "smollm2-cpu", "seed": 0, "traces": str(bundle_dir),
        "workload": {"num_requests": 12, "arrival": {"kind": "poisson", "rate": 0.5}, "lengths": {"source": "bundle"},
                     "sample": {"with_replacement": False}},
        "server": {"target_profile": "smollm2-135m-instruct-cpu", "step_overhead_s": 0.0, "max_num_seqs": 8,
                   "max_num_batched_tokens": 4096, "kv_capacity_tokens": 100000},
        "drafters": {"int8": {"kind": "autoregressive", "profile": "smollm2-135m-instruct-cpu-int8"},
                     "ngram": {"kind": "whole_proposal", "profile": "smollm2-135m-instruct-cpu-ngram"}},
        "runs": [{"name": "AR", "mode": "ar"},
                 {"name": "int8", "mode": "sd", "policy": {"name": "fixed", "drafter": "int8", "k": 4}}],
        "baseline": "AR",
    }
    res = run_experiment(cfg)
    ar, sd = res.summary["AR"], res.summary["int8"]
    assert ar["output_tokens"] == sd["output_tokens"]
    assert ar["mean_acceptance_length"] == 1.0
    assert sd["mean_acceptance_length"] > 3.0  # int8 accepts ~95% per position on these traces (k=4: ~4.5)
    assert sd["throughput_tok_s"] > ar["throughput_tok_s"]
