"""Sweeps give the same bytes on every backend, and an interrupted sweep resumes without recomputing."""
from __future__ import annotations

import json

import pytest

import experiments.sweep.experiment as sweep_mod
from experiments.cli.sweep import register as _register  # noqa: F401  (the command module imports cleanly)
from experiments.config import load_config
import experiments.sweep.backends as backends_mod
from experiments.sweep.backends import Executor, execute
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


def _square(payload):
    return payload["x"] ** 2


def _fails_at_three(payload):
    if payload["x"] == 3:
        raise RuntimeError("point 3 failed")
    return payload["x"]


class _CountingPool(backends_mod.ProcessPoolExecutor):
    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _CountingPool.made.append(self)


@pytest.fixture
def counting_pool(monkeypatch):
    _CountingPool.made = []
    monkeypatch.setattr(backends_mod, "ProcessPoolExecutor", _CountingPool)
    return _CountingPool.made


def _workers(pool):
    return list((pool._processes or {}).values())


def _all_ended(procs) -> bool:
    """Every worker process gone or a zombie (killed, not yet reaped), read from /proc: Process.is_alive() can
    stay True when the pool's own thread reaped the child first. Polled a while: a kill is not instantaneous."""
    import time
    from tests.experiments.test_fault_outputs import _running

    for _ in range(100):
        if not any(_running(p.pid) for p in procs):
            return True
        time.sleep(0.1)
    return False


def test_one_executor_runs_every_batch_on_one_pool(counting_pool):
    with Executor("pool", workers=2) as ex:
        assert counting_pool == []  # started by the first batch, not before
        first = dict(ex.run(_square, [{"x": i} for i in range(5)]))
        pids = {p.pid for p in _workers(counting_pool[0])}
        second = dict(ex.run(_square, [{"x": i} for i in range(5, 9)]))
        procs = _workers(counting_pool[0])
        assert {p.pid for p in procs} == pids  # the same workers served both batches
    assert first == {i: i * i for i in range(5)} and second == {i: (i + 5) ** 2 for i in range(4)}
    assert len(counting_pool) == 1 and procs and _all_ended(procs)  # ended by the block


def test_a_failing_point_kills_the_pool_and_the_next_batch_starts_another(counting_pool):
    ex = Executor("pool", workers=2)
    list(ex.run(_square, [{"x": 1}]))
    procs = list(_workers(counting_pool[0]))
    with pytest.raises(RuntimeError, match="point 3 failed"):
        list(ex.run(_fails_at_three, [{"x": i} for i in range(6)]))
    assert procs and _all_ended(procs)
    assert dict(ex.run(_square, [{"x": 2}])) == {0: 4} and len(counting_pool) == 2
    ex.close()


def test_an_interrupt_between_batches_kills_the_idle_workers(counting_pool):
    with pytest.raises(KeyboardInterrupt):
        with Executor("pool", workers=2) as ex:
            list(ex.run(_square, [{"x": 1}, {"x": 2}]))
            procs = list(_workers(counting_pool[0]))
            raise KeyboardInterrupt
    assert procs and _all_ended(procs)


def test_a_sweep_runner_keeps_one_pool_over_its_batches(tmp_path, counting_pool):
    from experiments.sweep.runner import Point, SweepRunner

    with SweepRunner(_square, tmp_path / "points", "pool", workers=2) as runner:
        assert runner.run([Point({"x": 2}), Point({"x": 3})]) == [4, 9]
        assert runner.run([Point({"x": 3}), Point({"x": 4})]) == [9, 16]  # 3 from the cache
    assert (runner.stats.computed, runner.stats.cached, len(counting_pool)) == (3, 1, 1)


class _FakeRay:
    """The few Ray calls the executor makes, in this process; counts starts and shutdowns."""

    def __init__(self):
        self.inits = self.shutdowns = 0
        self._up = False

    def is_initialized(self):
        return self._up

    def init(self, **kwargs):
        self.inits += 1
        self._up = True

    def shutdown(self):
        self.shutdowns += 1
        self._up = False

    def remote(self, **kwargs):
        return lambda fn: type("Task", (), {"remote": staticmethod(lambda payload: _FakeRef(fn, payload))})

    def wait(self, refs, num_returns):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return ref.fn(ref.payload)


class _FakeRef:
    def __init__(self, fn, payload):
        self.fn, self.payload = fn, payload


def test_a_local_ray_starts_once_per_executor(monkeypatch):
    import sys

    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    with Executor("ray") as ex:
        assert dict(ex.run(_square, [{"x": 2}])) == {0: 4}
        assert dict(ex.run(_square, [{"x": 3}, {"x": 4}])) == {0: 9, 1: 16}
    assert (fake.inits, fake.shutdowns) == (1, 1)
    fake.init()  # a Ray already running is used and left running
    with Executor("ray") as ex:
        assert dict(ex.run(_square, [{"x": 5}])) == {0: 25}
    assert (fake.inits, fake.shutdowns, fake.is_initialized()) == (2, 1, True)
