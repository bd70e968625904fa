"""The PSD studies as ordinary experiments: the shipped configs' derived numbers, a tiny PSD-vs-SD sweep and a
tiny bounds sweep run by `draftsim sweep` and reported by `draftsim psd-report`, checked against sweep.json."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.cli import main
from experiments.config import load_config
from experiments.sweep.experiment import sweep_points
from traces.acceptance import emitted_tokens

TINY_VS_SD = ["traces.synthetic.num_requests=24", "workload.arrival.clients=24",
              "traces.synthetic.categories.chat.output={dist: constant, value: 32}",
              "traces.synthetic.categories.chat.prompt={dist: lognormal, median: 64, sigma: 0.8, min: 8, max: 256}",
              "runs=[{name: ar, mode: ar},"
              " {name: sd-a, mode: sd, policy: {name: fixed, drafter: qwen3-0.6b, k: 1}, server: {deployment: "
              "{target: qwen3-32b, gpu: h100-80gb, num_gpus: 4, tp: 4, drafter: qwen3-0.6b, drafter_tp: 1}}},"
              " {name: psd-a, mode: psd, policy: {name: fixed, drafter: qwen3-0.6b, k: 1}, server: {num_draft_gpus: 1,"
              " deployment: {target: qwen3-32b, gpu: h100-80gb, num_gpus: 4, tp: 4, drafter: qwen3-0.6b,"
              " drafter_placement: dedicated}}},"
              " {name: sd-b, mode: sd, policy: {name: fixed, drafter: qwen3-8b, k: 3}, server: {deployment: "
              "{target: qwen3-32b, gpu: h100-80gb, num_gpus: 4, tp: 4, drafter: qwen3-8b, drafter_tp: 1}}},"
              " {name: psd-b, mode: psd, policy: {name: fixed, drafter: qwen3-8b, k: 3}, server: {num_draft_gpus: 1,"
              " deployment: {target: qwen3-32b, gpu: h100-80gb, num_gpus: 4, tp: 4, drafter: qwen3-8b,"
              " drafter_placement: dedicated}}}]",
              "sweep.grid={server.max_num_seqs: [4]}"]
TINY_BOUNDS = ["traces.synthetic.num_requests=120", "server.max_num_seqs=4",
               "traces.synthetic.categories.bounds.output={dist: uniform, low: 64, high: 128}",
               "sweep.grid={workload.arrival: [{kind: closed_loop, clients: 8}, {kind: poisson, rate: 5.0}]}",
               "sweep.zip={drafters.const.fraction: [0.5, 1.0], server.target_profile.coefficients.const: [0.02, 0.02]}"]


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def _sweep_and_report(tmp_path, name: str, overrides: list[str]) -> tuple[dict, pd.DataFrame, str]:
    out = tmp_path / name
    assert main(["sweep", name, "--backend", "serial", "--no-progress", "--out", str(out), *_sets(overrides)]) == 0
    assert main(["psd-report", name, "--results", str(out), "--json", *_sets(overrides)]) == 0
    doc = json.loads((out / "sweep.json").read_text())
    return doc, pd.read_csv(out / "psd_table.csv"), (out / "report.md").read_text()


def test_psd_bounds_points_keep_the_cycle_and_the_stated_loads():
    """Every point has t + V = 40 ms, and the Poisson rates are 50/80/95% of SD's capacity computed here from the
    output-length distribution: m / (steps per request x (t + V))."""
    cfg = load_config("psd_bounds")
    points = sweep_points(cfg)
    assert len(points) == 4 * 13
    for p in points:
        v = p.keys["server.target_profile.coefficients.const"]
        assert v * (1 + p.keys["drafters.const.fraction"]) == pytest.approx(0.04, rel=5e-6)  # V given to 6 digits
    lengths = np.arange(128, 513)
    steps = 1 + np.mean(np.ceil((lengths - 1) / emitted_tokens(3, 3)))
    capacity = 16 / (steps * 0.04)
    rates = sorted(a["rate"] for a in cfg.sweep.grid["workload.arrival"] if a["kind"] == "poisson")
    assert [r / capacity for r in rates] == pytest.approx([0.5, 0.8, 0.95], abs=1e-5)


def test_psd_vs_sd_config_pairs_every_psd_run_with_an_sd_run():
    cfg = load_config("psd_vs_sd")
    pol = {r.mode: set() for r in cfg.runs}
    for r in cfg.runs:
        pol[r.mode].add(json.dumps(r.policy and r.policy.model_dump(mode="json"), sort_keys=True))
    assert pol["psd"] == pol["sd"] and len(pol["psd"]) == 4 * 5
    assert {r.server["deployment"]["drafter_placement"] for r in cfg.runs if r.mode == "psd"} == {"dedicated"}


def test_tiny_psd_vs_sd_report_matches_the_sweep(tmp_path):
    doc, df, report = _sweep_and_report(tmp_path, "psd_vs_sd", TINY_VS_SD)
    (point,) = doc["points"]
    s = point["summary"]
    psd = df[df["mode"] == "psd"].set_index("run")
    # the report's ratios are the ratios of the two summaries of the same point
    for p, q in (("psd-a", "sd-a"), ("psd-b", "sd-b")):
        assert psd.loc[p, "psd_over_sd_throughput"] == pytest.approx(s[p]["throughput_tok_s"] / s[q]["throughput_tok_s"])
        assert psd.loc[p, "psd_e2e_saving"] == pytest.approx(1 - s[p]["e2e_mean_s"] / s[q]["e2e_mean_s"])
        assert psd.loc[p, "speedup_vs_ar"] == pytest.approx(s[p]["throughput_tok_s"] / s["ar"]["throughput_tok_s"])
    assert (psd["gpus"] == 5).all() and (df[df["mode"] == "sd"]["gpus"] == 4).all()
    assert (psd["concurrency"] == 8).all()
    assert (df["throughput_tok_s_per_gpu"] * df["gpus"]).to_numpy() == pytest.approx(df["throughput_tok_s"].to_numpy(),
                                                                                     rel=1e-5)
    # a bigger drafter takes longer to draft relative to the same verify
    assert psd.loc["psd-b", "t_over_v"] > psd.loc["psd-a", "t_over_v"]
    assert "own best k" in report
    for png in ("throughput.png", "throughput_per_gpu.png", "e2e.png", "drafter_tradeoff.png"):
        assert (tmp_path / "psd_vs_sd" / png).read_bytes()[:4] == b"\x89PNG"


def test_tiny_bounds_report_measures_the_pipeline_gain(tmp_path):
    doc, df, report = _sweep_and_report(tmp_path, "psd_bounds", TINY_BOUNDS)
    assert len(doc["points"]) == 4
    psd = df[df["mode"] == "psd"]
    sat = psd[psd["series"].str.startswith("saturated")].set_index("t_over_v")
    # measured t/V is the configured fraction; the engine reaches the analytic gain at t = V within a few percent
    assert sorted(sat.index) == pytest.approx([0.5, 1.0])
    assert sat.loc[1.0, "analytic_gain"] == pytest.approx(2.0)
    assert sat.loc[1.0, "simulated_gain"] == pytest.approx(2.0, rel=0.06)
    # open load: the share of saturated SD's measured request rate is reported for Poisson rows only
    assert psd[psd["series"].str.startswith("Poisson")]["load_vs_saturated_sd"].notna().all()
    assert sat["load_vs_saturated_sd"].isna().all()
    assert (tmp_path / "psd_bounds" / "saving_vs_t_over_v.png").stat().st_size > 1000
    assert "steady window" in report


def test_report_refuses_a_sweep_of_another_config(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["sweep", "psd_bounds", "--backend", "serial", "--no-progress", "--out", str(out),
                 *_sets(TINY_BOUNDS)]) == 0
    assert main(["psd-report", "psd_bounds", "--results", str(out), *_sets(TINY_BOUNDS[1:])]) == 2
    assert "another config" in capsys.readouterr().err
    assert main(["psd-report", "psd_bounds", "--results", str(tmp_path / "none")]) == 2
    assert "run `draftsim sweep psd_bounds" in capsys.readouterr().err


def test_run_points_a_swept_config_to_sweep(capsys):
    assert main(["run", "psd_vs_sd", "--no-out"]) == 2
    assert "draftsim sweep" in capsys.readouterr().err


def test_psd_and_sd_on_different_gpu_counts_are_compared_per_gpu():
    from experiments.studies.psd_plots import comparison_column

    best = pd.DataFrame({"mode": ["sd", "psd", "ar"], "gpus": [4, 5, 4]})
    assert comparison_column(best) == "throughput_tok_s_per_gpu"
    assert comparison_column(best.assign(gpus=[4, 4, 4])) == "throughput_tok_s"
