"""`draftsim compare`: a simulated run's own output fed back reproduces its numbers exactly; an imported vLLM
run is compared in validate's row format with intervals; the CLI writes its outputs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.cli.compare import compare, measured_from_results
from experiments.cli import main
from experiments.run import run_experiment
from traces.measured_run import save_measured

OVR = ["workload.num_requests=60", "workload.arrival.rate=20"]
FIX = Path(__file__).parents[1] / "traces" / "fixtures"


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    res = run_experiment("default", overrides=OVR)
    folders = {}
    for name in ("AR", "eagle3-k3", "ngram-k3"):
        folders[name] = save_measured(measured_from_results(res, name), tmp_path_factory.mktemp(name) / "m")
    return res, folders


@pytest.mark.parametrize("name", ["AR", "eagle3-k3", "ngram-k3"])
def test_compare_reproduces_a_simulated_run_exactly(own_run, name):
    res, folders = own_run
    report = compare(str(folders[name]), "default", OVR, repeats=2, names=[name])
    rows = [r for r in report.rows if r["mode"] == name]
    metrics = {r["metric"] for r in rows}
    assert {"ttft_p99_s", "tpot_mean_s", "itl_p90_s", "e2e_p50_s", "throughput_tok_s"} <= metrics
    for r in rows:
        assert r["error_pct"] == 0.0, r
        assert r["inside"] is True and r["interval"][0] == r["interval"][1] == r["measured"]  # fixed policy
    # independent check against the run's own summary percentiles
    s = res.summary[name]
    by = {r["metric"]: r["measured"] for r in rows}
    for m in ("ttft_mean_s", "ttft_p90_s", "tpot_p50_s", "e2e_mean_s", "itl_mean_s"):
        assert by[m] == pytest.approx(s[m], rel=1e-3), m


def test_compare_an_imported_vllm_run_has_intervals(tmp_path):
    from traces.importers.vllm_bench import import_vllm_bench

    (run,) = import_vllm_bench(FIX / "vllm_bench_detailed.json")
    save_measured(run, tmp_path / "m")
    report = compare(str(tmp_path / "m"), "default", [], repeats=3, names=["AR", "eagle3-k3"])
    rows = [r for r in report.rows if r["mode"] == "eagle3-k3"]
    assert all(r["repeats"] == 3 and r["interval"][0] <= r["predicted"] <= r["interval"][1] for r in rows
               if r["predicted"] is not None)
    ttft = next(r for r in rows if r["metric"] == "ttft_mean_s")
    assert ttft["measured"] == pytest.approx(np.mean([0.05, 0.061, 0.048]), rel=1e-3)
    assert ttft["error_pct"] == pytest.approx(100 * (ttft["predicted"] - ttft["measured"]) / ttft["measured"],
                                              abs=0.01)


def test_cli_writes_validate_format(tmp_path, capsys):
    assert main(["import", "vllm-bench", str(FIX / "vllm_bench_detailed.json"), str(tmp_path / "m")]) == 0
    assert main(["compare", str(tmp_path / "m"), "default", "--runs", "AR", "--repeats", "2",
                 "--out", str(tmp_path / "o")]) == 0
    rows = json.loads((tmp_path / "o" / "comparison.json").read_text())
    assert {"mode", "rate", "fraction", "metric", "measured", "predicted", "error_pct", "kind", "load_1min",
            "interval", "inside"} <= set(rows[0])
    assert (tmp_path / "o" / "cdf-AR.png").is_file() and "ttft_mean (ms)" in capsys.readouterr().out


def test_cli_bad_measured_folder(tmp_path, capsys):
    assert main(["compare", str(tmp_path), "default"]) != 0
    assert "run.json" in capsys.readouterr().err


def test_compare_states_the_measured_and_the_configs_acceptance(tmp_path):
    from traces.importers.vllm_bench import import_vllm_bench

    (run,) = import_vllm_bench(FIX / "vllm_bench_detailed.json")
    save_measured(run, tmp_path / "m")
    notes = compare(str(tmp_path / "m"), "default", [], repeats=1, names=["eagle3-k3"]).info["notes"]
    line = next(n for n in notes if n.startswith("eagle3-k3: the config's acceptance"))
    assert "2.600" in line  # 1 + 16 accepted / 10 drafts, as vLLM counted
    assert not any("warning" in n for n in notes)  # llama3.1-8b is meta-llama/Llama-3.1-8B-Instruct


@pytest.mark.parametrize("model_id, tokenizer_id, warned", [
    ("my-alias", "meta-llama/Llama-3.1-8B-Instruct", False),  # --served-model-name alias; the tokenizer names it
    ("meta-llama/Llama-3.1-8B-Instruct", None, False),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", True)])
def test_served_model_name_alias_is_not_warned_about(model_id, tokenizer_id, warned):
    from experiments.cli.compare import acceptance_notes
    from experiments.config import load_config
    from traces.importers.vllm_bench import import_vllm_bench

    (run,) = import_vllm_bench(FIX / "vllm_bench_detailed.json")
    run.info.update(model_id=model_id, tokenizer_id=tokenizer_id)
    notes = acceptance_notes(load_config("default", []), run, ["eagle3-k3"])
    assert any("is used for target" in n for n in notes) is warned, notes


def test_same_model_matches_a_local_path_to_its_folder_name():
    from traces.acceptance_levels import same_model

    assert same_model("/root/.cache/draftsim/models/smollm2-135m-instruct", "smollm2-135m-instruct")
    assert not same_model("org-a/smollm2", "org-b/smollm2")  # two hub ids: different models


def test_acceptance_note_gives_both_sides_proposal_rates(tmp_path):
    """Counters 4 drafts / 6 accepted over 19 output tokens of 3 requests: 10 decode steps, 40% proposed; the
    config's n-gram side states its own rate from a walk of its bundle."""
    from experiments.cli.compare import acceptance_notes
    from experiments.config import load_config
    from traces.importers.vllm_bench import import_vllm_bench

    doc = json.loads((FIX / "vllm_bench_detailed.json").read_text())
    doc.update(spec_decode_num_drafts=4, spec_decode_draft_tokens=12, spec_decode_accepted_tokens=6,
               spec_decode_acceptance_length=2.5, spec_decode_per_position_acceptance_rates=[0.75, 0.5, 0.25])
    (tmp_path / "b.json").write_text(json.dumps(doc))
    (run,) = import_vllm_bench(tmp_path / "b.json")
    (line,) = [n for n in acceptance_notes(load_config("default", []), run, ["ngram-k3"]) if "counters" in n]
    config_side, measured_side = line.split("; the measured run's vLLM counters: ")
    assert "% of decode steps" in config_side
    assert measured_side.startswith("mean acceptance length 2.500 per proposing step at k = 3; drafter proposed "
                                    "on 40.0% of decode steps; 1.600 tokens per decode step")


def test_same_model_matches_one_catalog_entry_under_its_name_and_hub_id():
    from traces.acceptance_levels import same_model

    assert same_model("llama3.1-8b", "meta-llama/Llama-3.1-8B-Instruct")
    assert same_model("META-LLAMA/Llama-3.1-8B-Instruct", "Llama3.1-8B")
    assert not same_model("llama3.1-8b", "qwen3-32b")
