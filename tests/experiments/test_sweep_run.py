"""Sweeps give the same bytes on every backend, and an interrupted sweep resumes without recomputing."""
from __future__ import annotations

import json

import pytest

import experiments.sweep.experiment as sweep_mod
from experiments.cli.sweep import register as _register  # noqa: F401  (the command module imports cleanly)
from experiments.config import load_config
from experiments.sweep.backends import execute
from experiments.sweep.cache import PointCache
from experiments.sweep.experiment import run_sweep
from tests.experiments.cli_helpers import run_cli
from tests.experiments.test_sweep_spec import BASE

SWEEP = {**BASE, "sweep": {"grid": {"workload.arrival.rate": [6, 24], "runs.1.policy.k": [1, 4]}}}


def _sweep(tmp_path, name, backend, **kw):
    out = tmp_path / name
    doc = run_sweep(load_config(SWEEP), out, backend=backend, progress=False, **kw)
    return (out / "sweep.json").read_bytes(), doc


def test_serial_and_pool_give_identical_sweep_json(tmp_path):
    serial, doc = _sweep(tmp_path, "serial", "serial")
    pool, _ = _sweep(tmp_path, "pool", "pool", workers=2)
    assert serial == pool
    assert doc["computed"] == 4 and doc["cached"] == 0
    points = json.loads(serial)["points"]
    assert [p["keys"] for p in points] == [{"workload.arrival.rate": r, "runs.1.policy.k": k}
                                           for r in (6, 24) for k in (1, 4)]
    # each point really ran its keys: k = 1 emits at most 2 tokens per step, k = 4 more than 2 on average
    for p in points:
        accept = p["summary"]["sd"]["mean_acceptance_length"]
        assert (accept <= 2.0) if p["keys"]["runs.1.policy.k"] == 1 else (accept > 2.0)
    assert (tmp_path / "serial" / "table.csv").read_text().count("\n") == 1 + 4 * 2


def test_interrupted_sweep_resumes_without_recomputing(tmp_path, monkeypatch):
    reference, _ = _sweep(tmp_path, "ref", "serial")
    real, calls = sweep_mod.evaluate_experiment, []

    def dies_after_two(payload):
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated interrupt")
        calls.append(1)
        return real(payload)

    monkeypatch.setattr(sweep_mod, "evaluate_experiment", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        _sweep(tmp_path, "resumed", "serial")
    assert len(list((tmp_path / "resumed" / "points").rglob("*.json"))) == 2
    assert not (tmp_path / "resumed" / "sweep.json").exists()

    counted = []
    monkeypatch.setattr(sweep_mod, "evaluate_experiment", lambda p: counted.append(1) or real(p))
    resumed, doc = _sweep(tmp_path, "resumed", "serial")
    assert (doc["computed"], doc["cached"], len(counted)) == (2, 2, 2)
    assert resumed == reference
    again, doc = _sweep(tmp_path, "resumed", "serial")
    assert (doc["computed"], doc["cached"], len(counted)) == (0, 4, 2) and again == reference


def test_a_foreign_cache_file_is_an_error_naming_it(tmp_path):
    cache = PointCache(tmp_path)
    cache.put("ab" * 32, {"x": 1})
    assert cache.get("ab" * 32) == {"x": 1}
    cache.path("cd" * 32).parent.mkdir(parents=True, exist_ok=True)
    cache.path("cd" * 32).write_text("{half")
    with pytest.raises(ValueError, match=r"(cd){10}.*unreadable cached sweep point"):
        cache.get("cd" * 32)


def test_backend_arguments_are_checked():
    with pytest.raises(ValueError, match="--backend"):
        list(execute(abs, [{}], backend="gpu"))
    with pytest.raises(ValueError, match="--address"):
        list(execute(abs, [{}], backend="pool", address="auto"))


def test_cli_sweep_and_run_refusal(tmp_path, capsys):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(json.dumps(SWEEP))
    assert run_cli(__import__("experiments.cli.sweep", fromlist=["x"]),
                   ["sweep", str(cfg), "--out", str(tmp_path / "o"), "--backend", "serial", "--no-progress"]) == 0
    assert "4 points simulated, 0 from the cache" in " ".join(capsys.readouterr().out.split())
    from experiments.cli import run as cmd_run
    with pytest.raises(ValueError, match="has a sweep: block; run it with `draftsim sweep"):
        run_cli(cmd_run, ["run", str(cfg), "--no-out"])
