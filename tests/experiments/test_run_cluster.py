"""`draftsim run` with a cluster block: replica columns, per-replica summaries, timeline tracks per replica,
run-level overrides, one replica equal to no cluster, determinism, and errors before any simulation."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from experiments.cli import main
from experiments.config import builtin_configs
import experiments.run
from experiments.run import run_experiment


def _tiny(**changes) -> dict:
    doc = yaml.safe_load(builtin_configs()["default"].read_text())
    doc["workload"]["num_requests"] = 60
    doc["workload"]["arrival"]["rate"] = 30.0
    doc["runs"] = [doc["runs"][0], doc["runs"][2]]  # AR, eagle3-k3
    doc.update(changes)
    return doc


def test_cluster_run_writes_replica_columns_per_replica_summaries_and_tracks(tmp_path):
    doc = _tiny(cluster={"replicas": 3, "router": {"name": "round_robin"}})
    doc["runs"][0]["cluster"] = {"replicas": 2, "router": {"name": "least_kv"}}  # AR overrides the block
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    out = tmp_path / "res"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    sd, ar = summary["eagle3-k3"], summary["AR"]
    assert [r["replica"] for r in sd["replicas"]] == [0, 1, 2] and len(ar["replicas"]) == 2
    assert sd["num_gpus"] == 3 and ar["num_gpus"] == 2
    assert [r["num_requests"] for r in sd["replicas"]] == [20, 20, 20]  # round robin
    assert sd["extras"]["router"] == {"name": "round_robin"} and ar["extras"]["router"] == {"name": "least_kv"}
    assert sum(r["output_tokens"] for r in sd["replicas"]) == sd["output_tokens"]
    req = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    assert req.groupby("run")["replica"].nunique().to_dict() == {"AR": 2, "eagle3-k3": 3}
    assert steps.groupby("run")["replica"].nunique().to_dict() == {"AR": 2, "eagle3-k3": 3}
    assert str(req["replica"].dtype) == "int64"
    trace = json.loads((out / "timeline.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {f"replica {j} \u00b7 target GPU(s)" for j in range(3)} <= tracks
    counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert {f"replica {j} \u00b7 KV blocks used (target)" for j in range(3)} <= counters


def test_one_replica_cluster_matches_the_plain_run_and_runs_are_deterministic():
    plain = run_experiment(_tiny())
    one = run_experiment(_tiny(cluster={"replicas": 1, "router": {"name": "affinity", "key": "category"}}))
    for name, s in plain.summary.items():
        c = dict(one.summary[name])
        assert len(c.pop("replicas")) == 1
        assert {k: v for k, v in c.items() if k != "extras"} == {k: v for k, v in s.items() if k != "extras"}
    assert one.requests.drop(columns="replica").equals(plain.requests)
    again = run_experiment(_tiny(cluster={"replicas": 1, "router": {"name": "affinity", "key": "category"}}))
    assert json.dumps(again.summary, sort_keys=True) == json.dumps(one.summary, sort_keys=True)


def test_set_overrides_reach_the_cluster_block():
    res = run_experiment(_tiny(), overrides=["cluster.replicas=2", "cluster.router.name=least_outstanding"])
    assert res.summary["AR"]["extras"]["replicas"] == 2
    assert set(res.requests["replica"]) == {0, 1}


def test_client_affinity_in_an_open_loop_fails_before_any_run_simulates(monkeypatch):
    calls = []
    real = experiments.run.simulate
    monkeypatch.setattr(experiments.run, "simulate", lambda sc, *a, **k: calls.append(sc.name) or real(sc, *a, **k))
    doc = _tiny()
    doc["runs"][1]["cluster"] = {"replicas": 2, "router": {"name": "affinity", "key": "client"}}
    doc["cluster"] = {"replicas": 2}
    with pytest.raises(ValueError, match=r"cluster.router.key: 'client' needs a closed-loop workload"):
        run_experiment(doc)
    assert calls == []
