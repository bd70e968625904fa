"""Comparison table and results folder: contents, determinism, atomic replacement, refusal to clobber."""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pandas as pd
import pytest
import yaml
from rich.console import Console

from experiments.report import (
    comparison_table,
    print_comparison,
    summary_json,
    write_results_folder,
)
from simulator.measure.metrics import summarize
from simulator.engine.records import REQUEST_COLUMNS, STEP_COLUMNS, ColumnBuffer
from simulator.measure.timeline import validate_chrome_trace


def make_run(seed: int, k: int, psd: bool = False, n: int = 6):
    """Small schema-shaped run: requests decoded one after another, k draft tokens per verify step."""
    rng = np.random.default_rng(seed)
    reqs, steps = ColumnBuffer(REQUEST_COLUMNS), ColumnBuffer(STEP_COLUMNS)
    t, step, itl = 0.0, 0, []
    for i in range(n):
        arrival, out = 0.05 * i, int(rng.integers(2, 12))
        t = max(t, arrival)
        steps.append(step=step, device="target", phase="prefill", start=t, end=t + 0.01, num_seqs=1,
                     prefill_tokens=100, batched_tokens=100, kv_tokens=100, kv_blocks_used=7, emitted_tokens=1,
                     sub_batch=-1, drafters="")
        t += 0.01
        step += 1
        first, gen, nsteps, acc = t, 1, 0, 0
        while gen < out:
            a = int(rng.integers(0, k + 1))
            e = min(a + 1, out - gen)
            if psd:
                steps.append(step=step, device="drafter", phase="draft", start=t, end=t + 0.003, num_seqs=1,
                             proposed_tokens=k, sub_batch=step % 2, drafters="eagle3")
            elif k:
                steps.append(step=step, device="target", phase="draft", start=t, end=t + 0.002, num_seqs=1,
                             proposed_tokens=k, sub_batch=-1, drafters="eagle3")
                t += 0.002
            steps.append(step=step, device="target", phase="verify" if k else "decode", start=t, end=t + 0.008,
                         num_seqs=1, batched_tokens=k + 1, kv_tokens=100 + gen, kv_blocks_used=7 + gen // 16,
                         proposed_tokens=k, accepted_tokens=e - 1, emitted_tokens=e,
                         sub_batch=step % 2 if psd else -1, drafters="eagle3" if k else "")
            t += 0.008
            itl.append(0.008)
            step, gen, nsteps, acc = step + 1, gen + e, nsteps + 1, acc + e - 1
        reqs.append(request_id=f"r{i}", trace_id=f"r{i}", category="chat", arrival_time=arrival, prompt_len=100,
                    output_len=out, first_scheduled_time=arrival, first_token_time=first, finish_time=t,
                    ttft=first - arrival, tpot=(t - first) / (out - 1), e2e=t - arrival, queue_delay=0.0,
                    decode_steps=nsteps, proposed_tokens=k * nsteps, accepted_tokens=acc, preemptions=0,
                    sub_batch=-1)
    r, s = reqs.frame(), steps.frame()
    return r, s, summarize(r, s, np.array(itl), slo={"ttft_s": 0.2, "tpot_s": 0.01},
                           num_draft_gpus=1 if psd else 0)


@pytest.fixture(scope="module")
def runs():
    return {"AR": make_run(1, 0), "eagle3-k3": make_run(1, 3), "psd-eagle3-k3": make_run(1, 3, psd=True)}


CONFIG = {"name": "tiny", "seed": 0, "workload": {"num_requests": 6}, "runs": [{"name": "AR", "mode": "ar"}]}


def render(table, width=200) -> str:
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(table)
    return console.export_text()


def test_comparison_table_rows_and_speedup(runs):
    summaries = {n: s for n, (_, _, s) in runs.items()}
    table = comparison_table(summaries, "AR")
    assert [c.header.split("\n")[0] for c in table.columns][:5] == ["run", "throughput", "throughput", "thrpt",
                                                                       "tpot"]
    assert table.row_count == 3
    text = render(table)
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip() and ln.split()[0] in summaries}
    assert set(lines) == set(summaries)
    ratio = summaries["eagle3-k3"]["throughput_tok_s"] / summaries["AR"]["throughput_tok_s"]
    assert f"{ratio:.2f}x" in lines["eagle3-k3"] and "1.00x" in lines["AR"]
    tpot_gain = summaries["AR"]["tpot_mean_s"] / summaries["eagle3-k3"]["tpot_mean_s"]
    assert f"{tpot_gain:.2f}x" in lines["eagle3-k3"]
    assert f"{summaries['eagle3-k3']['mean_acceptance_length']:.2f}" in lines["eagle3-k3"]
    assert f"{summaries['AR']['e2e_p99_s']:.2f}" in lines["AR"]


def test_per_gpu_column_only_when_gpu_counts_differ(runs):
    summaries = {n: s for n, (_, _, s) in runs.items()}
    headers = [c.header for c in comparison_table(summaries, "AR").columns]
    assert "throughput\nper_gpu\ntok/s" in headers  # the PSD run has a draft GPU
    psd = summaries["psd-eagle3-k3"]
    line = next(ln for ln in render(comparison_table(summaries, "AR")).splitlines() if "psd-eagle3-k3" in ln)
    assert f"{psd['throughput_tok_s_per_gpu']:,.0f}" in line.split()
    same = {n: s for n, s in summaries.items() if n != "psd-eagle3-k3"}
    assert "throughput\nper_gpu\ntok/s" not in [c.header for c in comparison_table(same, "AR").columns]


def test_comparison_table_unknown_baseline(runs):
    with pytest.raises(ValueError, match="baseline run 'SD'"):
        comparison_table({n: s for n, (_, _, s) in runs.items()}, "SD")


def test_missing_metrics_show_as_dash():
    text = render(comparison_table({"AR": {"throughput_tok_s": 10.0}, "x": {"throughput_tok_s": None}}, "AR"))
    assert "–" in text and "1.00x" in text


def test_print_comparison_is_not_truncated_in_a_log(runs):
    buf = io.StringIO()
    print_comparison({n: s for n, (_, _, s) in runs.items()}, "AR", Console(file=buf, width=60))
    out = buf.getvalue()
    assert "psd-eagle3-k3" in out and "…" not in out


def test_results_folder_contents(tmp_path, runs):
    out = write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=runs)
    assert sorted(os.listdir(out)) == [".draftsim-results", "config.yaml", "plots", "requests.parquet", "steps.parquet",
                                       "summary.json", "timeline.json"]
    assert yaml.safe_load((out / "config.yaml").read_text()) == CONFIG
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == list(runs) and summary["eagle3-k3"] == runs["eagle3-k3"][2]
    req = pd.read_parquet(out / "requests.parquet")
    assert req.columns[0] == "run" and list(req.columns[1:]) == list(REQUEST_COLUMNS)
    assert req.groupby("run", sort=False).size().to_dict() == {n: len(r) for n, (r, _, _) in runs.items()}
    pd.testing.assert_frame_equal(req[req["run"] == "AR"].drop(columns="run").reset_index(drop=True),
                                  runs["AR"][0], check_dtype=False)
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps.columns[0] == "run" and len(steps) == sum(len(s) for _, s, _ in runs.values())
    trace = json.loads((out / "timeline.json").read_text())
    validate_chrome_trace(trace)
    assert [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"] == list(runs)
    pngs = sorted(os.listdir(out / "plots"))
    assert pngs == ["acceptance_length.png", "batch_kv_over_time.png", "latency_cdf.png", "throughput_latency.png"]
    for p in pngs:
        assert (out / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["res"]  # no temp sibling left


def test_same_run_gives_byte_identical_summary(tmp_path):
    a = {"AR": make_run(7, 0), "sd": make_run(7, 2)}
    b = {"AR": make_run(7, 0), "sd": make_run(7, 2)}
    write_results_folder(tmp_path / "a", config_dict=CONFIG, runs=a, plots=False, timeline=False)
    write_results_folder(tmp_path / "b", config_dict=CONFIG, runs=b, plots=False, timeline=False)
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()
    assert summary_json({n: s for n, (_, _, s) in a.items()}) == (tmp_path / "a" / "summary.json").read_text()


def test_rerun_replaces_previous_results_folder(tmp_path, runs):
    out = tmp_path / "res"
    write_results_folder(out, config_dict=CONFIG, runs=runs, plots=False)
    write_results_folder(out, config_dict={"name": "second"}, runs={"AR": runs["AR"]}, plots=False,
                         timeline=False, table_format="csv")
    assert sorted(os.listdir(out)) == [".draftsim-results", "config.yaml", "requests.csv", "steps.csv", "summary.json"]
    assert yaml.safe_load((out / "config.yaml").read_text()) == {"name": "second"}
    assert list(pd.read_csv(out / "requests.csv")["run"].unique()) == ["AR"]
    assert os.listdir(tmp_path) == ["res"]


def test_failure_leaves_previous_folder_untouched_and_no_partial(tmp_path, runs):
    out = tmp_path / "res"
    write_results_folder(out, config_dict=CONFIG, runs={"AR": runs["AR"]}, plots=False)
    before = {p: (out / p).read_bytes() for p in os.listdir(out)}
    r, s, summ = runs["eagle3-k3"]
    broken = s.copy()
    broken.loc[len(broken) - 1, "end"] = -1.0  # the timeline refuses it, after tables and summary are written
    bad = {"AR": runs["AR"], "sd": (r, broken, summ)}
    with pytest.raises(ValueError, match="expected 0 <= start <= end"):
        write_results_folder(out, config_dict=CONFIG, runs=bad, plots=False)
    assert {p: (out / p).read_bytes() for p in os.listdir(out)} == before
    assert os.listdir(tmp_path) == ["res"]
    with pytest.raises(ValueError):
        write_results_folder(tmp_path / "new", config_dict=CONFIG, runs=bad, plots=False)
    assert os.listdir(tmp_path) == ["res"]
    with pytest.raises(TypeError, match=r"summary sd.note: object"):
        write_results_folder(tmp_path / "new", config_dict=CONFIG, runs={"sd": (r, s, {**summ, "note": object()})})
    assert os.listdir(tmp_path) == ["res"]


def test_never_replaces_a_folder_holding_only_the_users_config(tmp_path, runs):
    # `draftsim run myexp/config.yaml --out myexp`: config.yaml is a results entry name, but no marker
    (tmp_path / "myexp").mkdir()
    (tmp_path / "myexp" / "config.yaml").write_text("name: mine\n")
    with pytest.raises(ValueError, match="not written by draftsim"):
        write_results_folder(tmp_path / "myexp", config_dict=CONFIG, runs=runs, plots=False)
    assert (tmp_path / "myexp" / "config.yaml").read_text() == "name: mine\n"
    assert os.listdir(tmp_path) == ["myexp"]


def test_stale_staging_folders_of_dead_runs_are_cleaned(tmp_path, runs):
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stale = tmp_path / f".res.abc123.{dead}.partial"
    stale.mkdir()
    (stale / ".draftsim-results").write_text(socket.gethostname() + "\n")
    (stale / "summary.json").write_text("{")
    alive = tmp_path / f".res.def456.{os.getpid()}.partial"  # a run still in progress: left alone
    alive.mkdir()
    (alive / ".draftsim-results").write_text(socket.gethostname() + "\n")
    foreign = tmp_path / f".res.ghi789.{dead}.partial"  # no marker: not ours, left alone
    foreign.mkdir()
    write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=runs, plots=False)
    assert sorted(os.listdir(tmp_path)) == sorted([alive.name, foreign.name, "res"])


def test_refuses_to_replace_a_folder_with_other_files(tmp_path, runs):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"not written by draftsim.*refusing"):
        write_results_folder(tmp_path, config_dict=CONFIG, runs=runs, plots=False)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    out = write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=runs, plots=False)
    (out / "notes.txt").write_text("mine too")  # a user's file inside a results folder is kept as well
    with pytest.raises(ValueError, match=r"notes.txt.*refusing"):
        write_results_folder(out, config_dict=CONFIG, runs=runs, plots=False)
    assert (out / "notes.txt").read_text() == "mine too"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        write_results_folder(tmp_path / "file", config_dict=CONFIG, runs=runs, plots=False)


def test_bad_arguments(tmp_path, runs):
    with pytest.raises(ValueError, match="table_format"):
        write_results_folder(tmp_path / "x", config_dict=CONFIG, runs=runs, table_format="xlsx")
    with pytest.raises(ValueError, match="no runs"):
        write_results_folder(tmp_path / "x", config_dict=CONFIG, runs={})
    r, s, summ = runs["AR"]
    with pytest.raises(ValueError, match="other run"):
        write_results_folder(tmp_path / "x", config_dict=CONFIG, runs={"AR": (r.assign(run="SD"), s, summ)})
    assert not (tmp_path / "x").exists()


def test_summary_json_plain_values():
    text = summary_json({"a": {"x": np.float64(1.5), "n": np.int64(3), "bad": float("nan"), "ok": np.bool_(True),
                               "nested": {"usage": {"d": np.int32(2)}}, "list": [1, float("inf")]}})
    assert json.loads(text) == {"a": {"x": 1.5, "n": 3, "bad": None, "ok": True, "nested": {"usage": {"d": 2}},
                                      "list": [1, None]}}


def test_run_that_does_not_fit_is_in_summary_and_table_only(tmp_path, runs):
    """A configuration that does not fit has a summary but no tables: it is reported, never dropped."""
    summary_misfit = {"fits": False, "does_not_fit": "needs 90.0 GiB, has 80.0 GiB"}
    folder_runs = {"AR": runs["AR"], "eagle3-k3": runs["eagle3-k3"], "psd-big-drafter": (None, None, summary_misfit)}
    out = write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=folder_runs, timeline_max_steps=5)
    loaded = json.loads((out / "summary.json").read_text())
    assert list(loaded) == ["AR", "eagle3-k3", "psd-big-drafter"]
    assert loaded["psd-big-drafter"] == summary_misfit
    assert list(pd.read_parquet(out / "requests.parquet")["run"].unique()) == ["AR", "eagle3-k3"]
    trace = json.loads((out / "timeline.json").read_text())
    assert "first 5 of" in trace["otherData"]["truncated"]
    assert len(os.listdir(out / "plots")) == 4
    summaries = {n: m for n, (_, _, m) in folder_runs.items()}
    line = next(ln for ln in render(comparison_table(summaries, "AR")).splitlines() if "psd-big-drafter" in ln)
    assert set(line.split()[1:]) <= {"–"}
    assert "per_gpu" not in render(comparison_table(summaries, "AR"))  # a misfit has no GPU count to compare


def test_only_misfit_runs_still_give_a_complete_folder(tmp_path):
    out = write_results_folder(tmp_path / "res", config_dict=CONFIG,
                        runs={"psd": (None, None, {"fits": False, "does_not_fit": "too big"})})
    assert sorted(os.listdir(out)) == [".draftsim-results", "config.yaml", "requests.parquet", "steps.parquet",
                                       "summary.json"]
    req = pd.read_parquet(out / "requests.parquet")
    assert len(req) == 0 and list(req.columns) == ["run", *REQUEST_COLUMNS]


def test_writing_leaves_the_runs_tables_as_they_were(tmp_path, runs):
    # the tables written gain a run column and a fresh index; the engine's frames (Results.requests/steps) do not
    before = {n: (r.copy(deep=True), s.copy(deep=True)) for n, (r, s, _) in runs.items()}
    write_results_folder(tmp_path / "out", config_dict=CONFIG, runs=runs, plots=False)
    for n, (r, s, _) in runs.items():
        pd.testing.assert_frame_equal(r, before[n][0])
        pd.testing.assert_frame_equal(s, before[n][1])
    steps = pd.read_parquet(tmp_path / "out" / "steps.parquet")
    assert list(steps.columns)[0] == "run" and list(steps["run"].unique()) == list(runs)
