"""`draftsim validate` outputs on recorded vLLM runs: tolerance check, files written, CLI exit status."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from calibration.vllm_steps.validate_compare import validate_all
from calibration.vllm_steps.validate_run import load_config
from experiments.validate_report import failures, format_table, markdown, write_outputs

FIX = Path(__file__).parents[1] / "calibration" / "vllm_steps" / "fixtures" / "vllm-validate"


@pytest.fixture(scope="module")
def report():
    return validate_all(load_config(FIX / "validate.yaml"), FIX, model_name="smollm2")


def test_failures_name_kind_mode_rate_metric_and_tolerance():
    rows = [{"mode": "ar", "rate": 1.0, "metric": "ttft_mean_s", "kind": "replay", "error_pct": -20.0},
            {"mode": "ar", "rate": 1.0, "metric": "e2e_mean_s", "kind": "replay", "error_pct": 4.0},
            {"mode": "ar", "rate": 1.0, "metric": "tpot_mean_s", "kind": "predictive", "error_pct": None},
            {"mode": "ar", "rate": 1.0, "metric": "ttft_p90_s", "kind": "replay", "error_pct": 99.0}]
    tol = {"replay": {"ttft_mean_s": 15, "e2e_mean_s": 5}, "predictive": {"tpot_mean_s": 10}}
    bad = failures(rows, tol)
    assert bad == ["replay ar @ 1 req/s ttft_mean_s: error -20.0% (tolerance 15%)",
                   "predictive ar @ 1 req/s tpot_mean_s: error n/a (tolerance 10%)"]


def test_outputs_are_written(report, tmp_path):
    cfg = load_config(FIX / "validate.yaml")
    write_outputs(report, tmp_path, str(FIX / "validate.yaml"), cfg.tolerances)
    rows = json.loads((tmp_path / "validation.json").read_text())
    assert {"mode", "rate", "metric", "measured", "predicted", "error_pct", "kind"} <= set(rows[0])
    md = (tmp_path / "validation.md").read_text()
    assert "| ngram-k3 |" in md and "## Over tolerance" in md
    assert (tmp_path / "cdf-ar.png").stat().st_size > 0 and (tmp_path / "cdf-ngram-k3.png").is_file()
    assert "ttft_mean (ms)" in format_table(report)  # the table convention: name and unit
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["modes"]["ar"]["block_size"] == 128


def test_cli_analyses_recorded_runs_and_exits_nonzero_over_tolerance(tmp_path):
    from experiments.cli import main

    out = tmp_path / "runs"
    shutil.copytree(FIX, out)
    strict = out / "strict.yaml"
    strict.write_text((FIX / "validate.yaml").read_text() + "tolerances: {replay: {e2e_mean_s: 0.0001}}\n")
    assert main(["validate", str(strict), "--out", str(out), "--analyse-only"]) == 1
    lax = out / "lax.yaml"
    lax.write_text((FIX / "validate.yaml").read_text() + "tolerances: {replay: {e2e_mean_s: 1000000}}\n")
    assert main(["validate", str(lax), "--out", str(out), "--analyse-only"]) == 0


def test_predictive_interval_over_seeds_keeps_the_point_prediction(report):
    rep3 = validate_all(load_config(FIX / "validate.yaml"), FIX, model_name="smollm2", repeats=3)
    pred = [r for r in rep3.rows if r["kind"] == "predictive"]
    assert pred and all(r["repeats"] == 3 for r in pred if r["predicted"] is not None)
    for r in pred:
        if r["predicted"] is not None:
            lo, hi = r["interval"]
            assert lo <= r["predicted"] <= hi
            assert r["inside"] == (lo <= r["measured"] <= hi)
    base = {(r["mode"], r["fraction"], r["metric"], r["kind"]): r["predicted"] for r in report.rows}
    assert all(base[(r["mode"], r["fraction"], r["metric"], r["kind"])] == r["predicted"] for r in rep3.rows)
    assert all("interval" not in r for r in rep3.rows if r["kind"] == "replay")
    assert "in" in format_table(rep3) or "OUT" in format_table(rep3)


def test_small_throughput_keeps_three_significant_digits():
    """A CPU run's 6.43 tok/s is printed as 6.43, not 6; large values keep the table convention (no decimals)."""
    from experiments.validate_report import _value

    assert _value("throughput_tok_s", 6.4321) == "6.43"
    assert _value("throughput_tok_s", 17.46) == "17.5"
    assert _value("throughput_tok_s", 30512.4) == "30,512"
    assert _value("tpot_mean_s", 0.18004) == "180.04" and _value("e2e_mean_s", 21.64) == "21.64"
    assert _value("ttft_mean_s", 0.0004567) == "0.457"


def test_the_interval_column_names_what_the_interval_spans():
    from calibration.vllm_steps.validate_compare import ValidationReport, interval_source

    row = {"mode": "ar", "rate": 1.0, "fraction": 0.3, "metric": "ttft_mean_s", "measured": 0.1, "load_1min": None}
    rows = [{**row, "kind": "replay", "predicted": 0.1, "error_pct": 0.0},
            {**row, "kind": "predictive", "predicted": 0.11, "error_pct": 10.0, "interval": [0.09, 0.12],
             "inside": True, "repeats": 5}]
    assert [interval_source(b, d) for b in (False, True) for d in (False, True)] == [
        "seeds", "seeds + drift", "seeds + refit", "seeds + refit + drift"]
    rep = ValidationReport(rows, [], {"interval_source": "seeds + refit + drift"})
    head = format_table(rep).splitlines()[0].split()
    # replay (never repeated) keeps a plain title; predictive's names its source
    assert head[head.index("replay") + 3] == "interval" and head[head.index("replay") + 4] == "predictive"
    assert "interval (seeds + refit + drift)" in format_table(rep).splitlines()[0]
    assert "| predictive | err % | interval (seeds + refit + drift) |" in markdown(rep, "cmd", {})
