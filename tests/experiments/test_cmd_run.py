"""`draftsim run` end to end on a tiny config: table, results folder, determinism, bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from experiments.cli import main
from experiments.config import builtin_configs
from experiments.run import run_experiment


def _tiny(tmp_path, **changes):
    doc = yaml.safe_load(builtin_configs()["default"].read_text())
    doc["workload"]["num_requests"] = 60
    doc["workload"]["arrival"]["rate"] = 20.0
    doc["runs"] = [doc["runs"][0], doc["runs"][2], doc["runs"][5]]  # AR, eagle3-k3, ngram-k3
    doc.update(changes)
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_run_writes_results_folder_and_prints_table(tmp_path, capsys):
    cfg = _tiny(tmp_path)
    out = tmp_path / "res"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    for name in ("AR", "eagle3-k3", "ngram-k3"):
        assert name in printed
    assert {"config.yaml", "summary.json", "requests.parquet", "steps.parquet", "timeline.json", "plots"} <= \
        {p.name for p in out.iterdir()}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["AR"]["num_finished"] == 60 and summary["eagle3-k3"]["mean_acceptance_length"] > 1.5
    timeline = json.loads((out / "timeline.json").read_text())
    assert {e.get("ph") for e in timeline["traceEvents"]} >= {"X"}


def test_same_seed_gives_byte_identical_summary_and_other_seed_differs(tmp_path):
    cfg = _tiny(tmp_path)
    texts = []
    for i, seed in enumerate((3, 3, 4)):
        out = tmp_path / f"r{i}"
        assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--seed", str(seed)]) == 0
        texts.append((out / "summary.json").read_bytes())
    assert texts[0] == texts[1]
    assert texts[0] != texts[2]


def test_python_api_returns_frames_and_sd_beats_ar_on_tpot(tmp_path):
    res = run_experiment(_tiny(tmp_path))
    assert set(res.requests.run.unique()) == {"AR", "eagle3-k3", "ngram-k3"}
    assert len(res.requests) == 180 and len(res.steps) > 0
    assert res.summary["eagle3-k3"]["tpot_mean_s"] < res.summary["AR"]["tpot_mean_s"]


def test_bad_config_key_exits_2_with_file_and_key(tmp_path, capsys):
    cfg = _tiny(tmp_path, wrkload={})
    assert main(["run", str(cfg), "--no-out", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "wrkload: unknown key" in err


def test_bad_set_value_is_reported(tmp_path, capsys):
    assert main(["run", str(_tiny(tmp_path)), "--no-out", "--set", "server.max_num_seqs=-3"]) == 2
    assert "server.max_num_seqs" in capsys.readouterr().err


class _Bar:
    """A stand-in for rich's progress bar: records each redraw's count."""

    def __init__(self):
        self.drawn = []

    def update(self, task, completed):
        self.drawn.append(completed)


def test_the_progress_hook_names_its_next_redraw_so_a_cluster_keeps_the_compiled_loop():
    """`draftsim run`'s progress bar is a step hook; it names the finish count of its next redraw (`next_check`) and
    never stops a run, so a cluster under it runs in the compiled cluster loop (a hook without next_check sends it to
    the per-replica path), returns at those counts only, and gives the tables it gives without the bar."""
    from experiments.run import _Progress
    from tests.simulator.engine.test_compiled_replica import assert_same_cluster, cluster_sim, iid_traces, server, \
        workload

    traces = iid_traces(10, seed=5, out=(1, 60))
    wl = workload(traces, 300, rate=150.0, seed=5)
    kw = dict(mode="psd", policy="fixed", replicas=2, router={"name": "least_outstanding"}, srv=server(), seed=5)
    bar = _Bar()
    with_bar = cluster_sim(traces, wl, on_step=_Progress(bar, 0, len(wl)), **kw)
    assert with_bar.cluster_path_reason is None and with_bar.compiled is not None
    a = with_bar.simulate()
    gaps = np.diff([0] + bar.drawn)  # a redraw once 1% more (3 of 300) finished since the last: a step may finish more
    assert len(bar.drawn) >= 50 and gaps.min() >= 3 and bar.drawn[-1] > 290
    assert with_bar.compiled.calls < 2 * len(bar.drawn)  # the loop returns to Python at the redraws, not per step
    assert_same_cluster(a, cluster_sim(traces, wl, **kw).simulate())
