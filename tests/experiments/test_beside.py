"""A function run beside this process (experiments/beside.py): its value or its error comes back, a child that
dies without answering is an error, a stopped child is gone; the results folder's plots drawn so are the bytes
drawn in this process, and a plot error leaves no results folder."""
from __future__ import annotations

import os
import signal
import time

import pytest

from experiments import beside, report
from experiments.beside import Beside
from experiments.plots import write_plots
from experiments.report import write_results_folder
from tests.experiments.test_report import CONFIG, make_run

needs_fork = pytest.mark.skipif(not beside.can_fork(), reason="no fork here: the function runs in this process")


class Odd(Exception):
    """An exception that cannot be rebuilt from its args (pickling it back fails)."""

    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def _raise_odd():
    raise Odd(1, 2)


def _fail(msg):
    raise ValueError(msg)


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def _sleep_then_write(path):
    time.sleep(30)
    path.write_text("late")


@needs_fork
def test_the_value_comes_back_from_another_process():
    parent = os.getpid()
    got = Beside("a sum", lambda a, b=0: (os.getpid(), a + b), 2, b=3).result()
    assert got[0] != parent and got[1] == 5


@needs_fork
def test_the_child_sees_this_process_as_it_was_at_start():
    data = {"x": 1}
    job = Beside("a read", lambda: dict(data))
    data["x"] = 2  # after the fork: the child's copy keeps x = 1
    assert job.result() == {"x": 1}


@needs_fork
def test_its_error_is_raised_here_with_the_child_traceback():
    job = Beside("a failing step", _fail, "bad value in row 3")
    with pytest.raises(ValueError, match="bad value in row 3") as info:
        job.result()
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "child process doing a failing step" in notes and "_fail" in notes


@needs_fork
def test_an_error_that_does_not_pickle_back_comes_as_its_text():
    with pytest.raises(RuntimeError, match=r"Odd: 1/2"):
        Beside("odd", _raise_odd).result()


@needs_fork
def test_a_child_that_dies_without_an_answer_is_an_error():
    with pytest.raises(RuntimeError, match=r"a doomed job: the child process doing it ended with exit code -9"):
        Beside("a doomed job", _die).result()


@needs_fork
def test_stop_kills_the_child_before_it_writes(tmp_path):
    job = Beside("a slow write", _sleep_then_write, tmp_path / "late.txt")
    proc = job._proc
    job.stop()
    assert not proc.is_alive() and proc.exitcode == -signal.SIGKILL
    assert not (tmp_path / "late.txt").exists()
    with pytest.raises(RuntimeError, match="stopped"):
        job.result()


def test_without_fork_it_runs_here(monkeypatch):
    monkeypatch.setattr(beside, "can_fork", lambda: False)
    parent = os.getpid()
    assert Beside("here", os.getpid).result() == parent
    job = Beside("here", _fail, "inline error")  # raised by result(), as the forked one's is
    with pytest.raises(ValueError, match="inline error"):
        job.result()


@pytest.fixture(scope="module")
def runs():
    return {"AR": make_run(5, 0), "eagle3-k3": make_run(5, 3)}


def test_results_folder_plots_are_the_bytes_drawn_in_this_process(tmp_path, runs):
    out = write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=runs)
    here = write_plots(tmp_path / "here", {n: r for n, (r, _, _) in runs.items()},
                       {n: s for n, (_, s, _) in runs.items()}, {n: m for n, (_, _, m) in runs.items()})
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(p.name for p in here)
    for p in here:
        assert (out / "plots" / p.name).read_bytes() == p.read_bytes()


def _broken_plots(*args, **kwargs):
    raise ValueError("plot failed on purpose")


def test_a_plot_error_leaves_no_results_folder_and_the_previous_one_whole(tmp_path, runs, monkeypatch):
    out = write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=runs)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    monkeypatch.setattr(report, "write_plots", _broken_plots)
    with pytest.raises(ValueError, match="plot failed on purpose"):
        write_results_folder(out, config_dict=CONFIG, runs=runs)
    with pytest.raises(ValueError, match="plot failed on purpose"):
        write_results_folder(tmp_path / "new", config_dict=CONFIG, runs=runs)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert os.listdir(tmp_path) == ["res"]


@needs_fork
def test_an_error_here_stops_the_plots_child(tmp_path, runs, monkeypatch):
    """The tables fail while the plots are being drawn: the child is stopped, nothing is left behind."""
    started = []
    real = beside.Beside

    class Recorded(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            started.append(self)

    monkeypatch.setattr(report, "Beside", Recorded)
    monkeypatch.setattr(report, "write_plots", lambda *a, **k: time.sleep(30))
    monkeypatch.setattr(report, "_write_table", _broken_plots)
    with pytest.raises(ValueError, match="on purpose"):
        write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=runs)
    assert len(started) == 1
    proc = started[0]._proc
    assert proc is None or not proc.is_alive()
    assert os.listdir(tmp_path) == []


def _record_prepared(path):
    path.write_text("prepared")


def _join(*parts, sep="-"):
    return sep.join(parts)


@needs_fork
def test_a_late_job_prepares_at_once_and_runs_with_the_arguments_sent(tmp_path):
    flag = tmp_path / "prepared"
    job = Beside("a late join", _join, "a", prepare=lambda: _record_prepared(flag), late=True, sep="+")
    for _ in range(200):  # prepare runs before any argument is sent
        if flag.exists():
            break
        time.sleep(0.05)
    assert flag.read_text() == "prepared"
    with pytest.raises(RuntimeError, match="waits for its late arguments"):
        job.result()
    job.send("b", "c")
    assert job.result() == "a+b+c"
    with pytest.raises(RuntimeError, match="given them already"):
        job.send("d")


def test_a_late_job_without_fork_runs_when_sent(monkeypatch):
    monkeypatch.setattr(beside, "can_fork", lambda: False)
    job = Beside("here", _join, "a", late=True)
    job.send("b", sep="/")
    assert job.result() == "a/b"


@needs_fork
def test_a_late_job_stopped_before_its_arguments_leaves_nothing(tmp_path):
    job = Beside("a slow write", _sleep_then_write, late=True)
    proc = job._proc
    job.stop()
    assert not proc.is_alive()
    with pytest.raises(RuntimeError, match="stopped"):
        job.result()


def test_run_experiment_plots_from_the_early_child_are_the_bytes_drawn_here(tmp_path):
    """run_experiment starts the plots' child before it summarizes: same PNGs as write_plots in this process."""
    from experiments.run import run_experiment

    res = run_experiment("default", overrides=["workload.num_requests=30"], out=tmp_path / "res")
    fitted = [n for n, s in res.summary.items() if s.get("fits", True)]
    by_run = {n: res.requests[res.requests["run"] == n].drop(columns="run").reset_index(drop=True) for n in fitted}
    steps = {n: res.steps[res.steps["run"] == n].drop(columns="run").reset_index(drop=True) for n in fitted}
    here = write_plots(tmp_path / "here", by_run, steps, {n: res.summary[n] for n in fitted})
    assert sorted(p.name for p in (res.out_dir / "plots").iterdir()) == sorted(p.name for p in here)
    for p in here:
        assert (res.out_dir / "plots" / p.name).read_bytes() == p.read_bytes()


@needs_fork
def test_a_plots_child_for_other_runs_is_refused_and_stopped(tmp_path, runs):
    child = report.plots_beside({"AR": runs["AR"][0]}, {"AR": runs["AR"][1]})
    with pytest.raises(ValueError, match=r"started for runs \['AR'\]"):
        write_results_folder(tmp_path / "res", config_dict=CONFIG, runs=runs, plotting=child)
    assert not child.job._proc.is_alive()
    assert os.listdir(tmp_path) == []


def _in_a_daemon(conn):
    conn.send(Beside("inside a daemon", os.getpid).result() == os.getpid())


def test_a_daemonic_worker_runs_it_itself():
    """multiprocessing forbids a daemonic process children: there the function runs in that process."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork" if beside.can_fork() else "spawn")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_in_a_daemon, args=(there,), daemon=True)
    proc.start()
    assert here.recv() is True
    proc.join()
