"""`draftsim plan` end to end: a case with a known answer (one server and two replicas behind round robin),
identical plan.json on every backend, infeasible candidates listed with their reason, bad configs refused up front."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from experiments import cmd_plan
from experiments.config import ConfigError
from experiments.plan import run_plan
from experiments.plan_config import load_plan_config
from tests.experiments.cli_helpers import run_cli
from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, save_bundle

STEP_S, OUTPUT_LEN, N = 0.01, 10, 20  # every step 10 ms, 10 output tokens: a lone request takes S = 0.1 s
SERVICE_S = STEP_S * OUTPUT_LEN        # AR: the prefill step emits token 1, then one token per decode step


@pytest.fixture
def known_case(tmp_path):
    """One request at a time (max_num_seqs 1), constant step time, arrivals exactly 1/r apart (a replay file)."""
    meta = BundleMeta(target="t", drafters={"d": DrafterSpec("d", "ngram", "d")})
    reqs = [RequestTrace(id=f"r{i}", prompt_len=16, output_len=OUTPUT_LEN,
                         drafters={"d": DrafterTrace(acc_len=np.full(OUTPUT_LEN, 2, dtype=np.int32))})
            for i in range(4)]
    save_bundle(TraceBundle(meta, reqs), tmp_path / "bundle")
    (tmp_path / "const.yaml").write_text(yaml.safe_dump(
        {"kind": "linear", "name": "const", "coefficients": {"const": STEP_S}, "provenance": {"source": "test"}}))
    (tmp_path / "times.txt").write_text("".join(f"{i}\n" for i in range(N)))  # 1 req/s recorded
    base = {"name": "base", "traces": str(tmp_path / "bundle"),
            "workload": {"num_requests": N, "arrival": {"kind": "poisson", "rate": 1.0},
                         "sample": {"with_replacement": True}},
            "server": {"target_profile": str(tmp_path / "const.yaml"), "max_num_seqs": 1, "kv_capacity_tokens": 1000},
            "drafters": {"d": {"kind": "constant", "seconds": 0.0}},
            "runs": [{"name": "AR", "mode": "ar"}]}
    return {"name": "known", "base": base,
            "traffic": {"arrival": "replay", "file": str(tmp_path / "times.txt"), "target_rate": 5.0},
            "slo": {"e2e_s": 2 * SERVICE_S, "attainment": 1.0},
            "search": {"seeds": 2, "steps": 8, "rate_max": 20.0, "cap_at_capacity": False},
            "candidates": {"target": "llama3.1-8b", "gpus": ["h100-80gb"], "tp": [1],
                           "modes": [{"name": "AR", "mode": "ar"}],
                           "profiles": {"h100-80gb": {1: str(tmp_path / "const.yaml")}}}}


def _plan(doc, out, **kw):
    res = run_plan(load_plan_config(doc), out, progress=False, **kw)
    res.pop("_stats")
    return res


def test_bisection_lands_on_the_computable_max_rate(known_case, tmp_path):
    # Above 1/S request i (0-based) waits i (S - 1/r); the last of N has E2E S + (N-1)(S - 1/r) <= E
    # exactly when r <= 1 / (S - (E - S)/(N - 1)).
    e2e = known_case["slo"]["e2e_s"]
    expected = 1.0 / (SERVICE_S - (e2e - SERVICE_S) / (N - 1))
    doc = _plan(known_case, tmp_path / "a", backend="serial")
    (c,) = doc["candidates"]
    assert c["status"] == "ok" and c["tolerance_req_s"] == pytest.approx(20.0 / 2 ** 8)
    assert c["max_rate_req_s"] <= expected < c["max_rate_req_s"] + c["tolerance_req_s"]
    assert c["capacity_req_s"] is None  # a given ceiling and no capacity cap: no probe run
    # and the engine saw what the formula assumes: at the highest sustainable rate the last request is the slowest
    assert c["curve"][-1]["sustainable"] is False
    assert c["meets_target_rate"] and doc["cheapest"] == c["id"]
    assert c["target_costs"].startswith("measured: ")


def test_two_replicas_behind_round_robin_land_on_their_computable_max_rate(known_case, tmp_path):
    # Round robin over 2 replicas: each serves every other request, arrivals 2/r apart, N/2 requests each, so the
    # last one's E2E is S + (N/2 - 1)(S - 2/r) <= E exactly when r <= 2 / (S - (E - S)/(N/2 - 1)).
    e2e = known_case["slo"]["e2e_s"]
    expected = 2.0 / (SERVICE_S - (e2e - SERVICE_S) / (N // 2 - 1))
    # rate_max 35: the threshold (22.5) is not a bisection grid point, where E2E would equal E up to rounding
    known_case["search"] = {"seeds": 2, "steps": 8, "rate_max": 35.0, "cap_at_capacity": False}
    known_case["candidates"] = {**known_case["candidates"], "replicas": [1, 2], "router": {"name": "round_robin"}}
    doc = _plan(known_case, tmp_path / "r", backend="serial")
    one, two = sorted(doc["candidates"], key=lambda c: c["replicas"])
    assert (one["replicas"], two["replicas"]) == (1, 2) and two["status"] == "ok" and two["num_gpus"] == 2
    assert two["max_rate_req_s"] <= expected < two["max_rate_req_s"] + two["tolerance_req_s"]
    assert two["max_rate_req_s"] > 1.9 * one["max_rate_req_s"]
    known_case["search"] = {"seeds": 1, "steps": 1}  # the capacity probe: one offline batch
    one, two = sorted(_plan(known_case, tmp_path / "s", backend="serial")["candidates"], key=lambda c: c["replicas"])
    assert one["capacity_req_s"] == pytest.approx(1.0 / SERVICE_S)
    assert two["capacity_req_s"] == pytest.approx(2.0 / SERVICE_S)  # N/2 back-to-back services on each replica


def test_capacity_caps_the_sustainable_rate(known_case, tmp_path):
    known_case["search"] = {"seeds": 2, "steps": 4}  # ceiling = capacity = 1/S, where every E2E is S <= E
    (c,) = _plan(known_case, tmp_path / "b", backend="serial")["candidates"]
    assert c["capacity_req_s"] == pytest.approx(1.0 / SERVICE_S)  # N back-to-back services of S
    assert c["at_search_ceiling"] and c["max_rate_req_s"] == pytest.approx(1.0 / SERVICE_S)
    assert "throughput-bound" in c["reason"]
    known_case["slo"]["e2e_s"] = 0.5 * SERVICE_S  # no request can ever meet it
    (c,) = _plan(known_case, tmp_path / "c", backend="serial")["candidates"]
    assert c["max_rate_req_s"] == 0 and not c["meets_target_rate"] and "no tested rate met the SLO" in c["reason"]


SPACE = {
    "name": "space", "base": "default",
    "traffic": {"target_rate": 6.0, "num_requests": 24},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05, "attainment": 0.9},
    "search": {"seeds": 2, "steps": 2},
    "candidates": {"target": "llama3.1-8b", "gpus": ["h100-80gb", "l40s"], "tp": [1], "replicas": [1, 2],
                   "modes": [{"name": "AR", "mode": "ar"},
                             {"name": "psd", "mode": "psd", "policy": {"name": "fixed", "drafter": "ngram", "k": 3}},
                             {"name": "big-drafter", "mode": "sd", "drafter_model": "llama3.3-70b",
                              "policy": {"name": "fixed", "drafter": "eagle3", "k": 2}}]},
}


def test_serial_and_pool_give_identical_plan_json(tmp_path):
    _plan(SPACE, tmp_path / "serial", backend="serial")
    _plan(SPACE, tmp_path / "pool", backend="pool", workers=2)
    serial = (tmp_path / "serial" / "plan.json").read_bytes()
    assert serial == (tmp_path / "pool" / "plan.json").read_bytes()
    doc = json.loads(serial)
    by_status = {}
    for c in doc["candidates"]:
        by_status.setdefault(c["status"], []).append(c)
    # a 70B drafter colocated on one 48/80 GB GPU: listed with the reason, never simulated
    assert {c["mode"] for c in by_status["does_not_fit"]} == {"big-drafter"}
    assert all(c["reason"].startswith("does not fit: needs") and "curve" not in c for c in by_status["does_not_fit"])
    assert {c["replicas"] for c in by_status["does_not_fit"]} == {1, 2} and set(by_status) == {"ok", "does_not_fit"}
    ok = by_status["ok"]
    assert len(ok) == 8 and all(len(c["curve"]) >= 1 for c in ok)
    psd = next(c for c in ok if c["mode"] == "psd" and c["gpu"] == "h100-80gb" and c["replicas"] == 1)
    assert psd["num_gpus"] == 2 and psd["usd_per_hour"] == pytest.approx(2 * doc["prices"]["h100-80gb"]["usd_per_gpu_hour"])
    psd2 = next(c for c in ok if c["mode"] == "psd" and c["gpu"] == "h100-80gb" and c["replicas"] == 2)
    assert psd2["num_gpus"] == 4 and psd2["usd_per_hour"] == pytest.approx(2 * psd["usd_per_hour"])
    assert psd2["capacity_req_s"] > psd["capacity_req_s"]  # two replicas serve the offline batch faster
    assert any("replicas > 1: the whole cluster is simulated" in n for n in doc["notes"])
    assert any(c["target_costs"].startswith("roofline") for c in ok) and any("roofline" in n for n in doc["notes"])
    assert (tmp_path / "serial" / "curves.png").stat().st_size > 0 and (tmp_path / "serial" / "pareto.png").exists()
    ranks = [c["status"] for c in doc["candidates"]]
    assert ranks == sorted(ranks, key=["ok", "does_not_fit"].index)


@pytest.mark.slow  # a Ray start-up: about 20 s on 2 loaded cores
def test_ray_gives_the_same_plan_json_and_sweep_json(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'draftsim[ray]')")
    from experiments.config import load_config
    from experiments.sweep.experiment import run_sweep
    from tests.experiments.test_sweep_run import SWEEP

    small = {**SPACE, "candidates": {**SPACE["candidates"], "gpus": ["l40s"], "replicas": [1]}}
    _plan(small, tmp_path / "serial", backend="serial")
    run_sweep(load_config(SWEEP), tmp_path / "sweep-serial", backend="serial", progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:  # a running Ray is reused and left running: one start-up for both
        _plan(small, tmp_path / "ray", backend="ray")
        run_sweep(load_config(SWEEP), tmp_path / "sweep-ray", backend="ray", progress=False)
    finally:
        ray.shutdown()
    assert (tmp_path / "serial" / "plan.json").read_bytes() == (tmp_path / "ray" / "plan.json").read_bytes()
    assert (tmp_path / "sweep-serial" / "sweep.json").read_bytes() == \
        (tmp_path / "sweep-ray" / "sweep.json").read_bytes()


@pytest.mark.parametrize("change, message", [
    ({"slo": {"tpot_s": 0.05}}, "give ttft_s or e2e_s"),
    ({"traffic": {"arrival": "replay"}}, "traffic.file: replay needs a file"),
    ({"traffic": {"target_rate": 5, "arrival": "gamma"}}, "traffic.cv: required"),
    ({"search": {"seeds": 2, "min_passing": 3}}, "more than search.seeds"),
    ({"candidates": {**SPACE["candidates"], "modes": [{"name": "x", "mode": "psd", "placement": "colocated",
                                                       "policy": {"name": "fixed", "drafter": "ngram", "k": 1}}]}},
     "PSD drafts on a dedicated GPU"),
    ({"candidates": {**SPACE["candidates"], "scheduler": {"kv_capacity_tokens": [1]}}}, "set by the candidate"),
])
def test_bad_plan_configs_name_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        load_plan_config({**SPACE, **change})


def test_errors_found_before_any_simulation(tmp_path):
    bad_policy = {**SPACE, "candidates": {**SPACE["candidates"], "replicas": [1],
                                          "modes": [{"name": "x", "mode": "sd", "policy": {"name": "nope"}}]}}
    with pytest.raises(ValueError, match="candidate 'h100-80gb tp1 x1 x'"):
        _plan(bad_policy, tmp_path / "p", backend="serial")
    no_price = {**SPACE, "candidates": {**SPACE["candidates"], "gpus": ["h100-80gb"]},
                "prices": {"file": str(tmp_path / "prices.yaml")}}
    (tmp_path / "prices.yaml").write_text("a100-80gb: {usd_per_hour: 1.0, source: test}\n")
    with pytest.raises(ValueError, match=r"no price for GPU\(s\) \['h100-80gb'\]"):
        _plan(no_price, tmp_path / "q", backend="serial")
    assert not (tmp_path / "p" / "points").exists() and not (tmp_path / "q").exists()


def test_cli_prints_the_ranked_table_and_the_answer(known_case, tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(known_case))
    assert run_cli(cmd_plan, ["plan", str(path), "--out", str(tmp_path / "o"), "--backend", "serial",
                              "--no-progress", "--set", "prices.usd_per_gpu_hour.h100-80gb=2.5"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "cheapest for 5 req/s: h100-80gb tp1 x1 AR" in out
    assert "2.50" in out and "override in prices" in out and "sustainable when at least 2 of 2 seeds" in out
