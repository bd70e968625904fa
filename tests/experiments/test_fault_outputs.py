"""Fault tests of every command that writes (issue 17, class 4 and 5): no user file is lost, no worker outlives
its parent after SIGTERM or kill -9, and SIGTERM ends with one line.

Each writing command is pointed at a user's folder holding files of the names it writes itself (a requests
file of the other format, table.csv, plan.json, a config) and must refuse it, leaving every byte in place.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from experiments import cli
from tests.experiments.cli_helpers import run_main_quietly as _main
from tests.experiments.test_fuzz_config import BASE

REPO = Path(__file__).resolve().parents[2]
USER_FILES = {"table.csv": "mine,1\n", "plan.json": '{"mine": 1}\n', "sweep.json": "{}\n",
              "requests.jsonl.gz": "not really gzip: the user's only copy\n", "config.yaml": "name: mine\n",
              "notes.txt": "user notes\n"}


@pytest.fixture()
def user_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "mine"
    folder.mkdir()
    for name, text in USER_FILES.items():
        (folder / name).write_text(text)
    sweep = {**BASE, "name": "small-sweep", "sweep": {"grid": {"runs.1.policy.k": [1, 2]}}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False))
    (tmp_path / "spec.jsonl").write_text(json.dumps(
        {"id": "a", "prompt_token_ids": [1, 2], "generated_token_ids": [5, 6], "acc_eagle": {"acc_len": [2, 1]},
         "acc_ngram": {"acc_len": [1, 1]}}) + "\n")
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


WRITING_COMMANDS = [
    ["run", "exp.yaml", "--out", "mine", "--no-progress"],
    ["sweep", "sweep.yaml", "--out", "mine", "--backend", "serial", "--no-progress"],
    ["plan", "plan_llama8b", "--out", "mine", "--backend", "serial", "--no-progress"],
    ["traces", "synth", "--spec", str(REPO / "traces/data/default/synth-spec.yaml"), "--out", "mine",
     "--num-requests", "3"],
    ["import", "specbench", "spec.jsonl", "mine"],
    ["policies", "make-pool", "mine", "--requests", "3"],
    ["policies", "bandit-report", "mine", "--quick"],
    ["policies", "combine-report", "mine", "--quick"],
]


@pytest.mark.parametrize("argv", WRITING_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_writing_commands_never_touch_a_users_folder(user_folder, argv):
    before = _snapshot(user_folder)
    rc, err = _main(argv)
    assert rc != 0 and "Traceback" not in err, err[-500:]
    assert err.strip().count("\n") == 0 and "error" in err, err  # one line
    assert "mine" in err, f"refused for another reason than the folder: {err}"
    assert _snapshot(user_folder) == before


def test_bundle_writers_keep_the_other_format_file(user_folder, tmp_path):
    """make-pool into a bundle folder holding the other format's requests file: refused, nothing deleted."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "requests.jsonl.gz").write_bytes(b"user's only copy")
    rc, err = _main(["policies", "make-pool", str(bundle), "--requests", "3"])
    assert rc == 2 and "never deletes" in err
    assert sorted(os.listdir(bundle)) == ["requests.jsonl.gz"]
    assert (bundle / "requests.jsonl.gz").read_bytes() == b"user's only copy"
    rc, err = _main(["policies", "make-pool", "/", "--requests", "3"])
    assert rc == 2 and "root folder" in err


def test_sweep_writes_a_marked_folder_and_resumes_it(user_folder, tmp_path):
    rc, err = _main(["sweep", "sweep.yaml", "--out", "new", "--backend", "serial", "--no-progress"])
    assert rc == 0, err
    assert sorted(os.listdir(tmp_path / "new")) == [".draftsim-results", "points", "sweep.json", "table.csv"]
    first = (tmp_path / "new" / "sweep.json").read_bytes()
    rc, err = _main(["sweep", "sweep.yaml", "--out", "new", "--backend", "serial", "--no-progress"])
    assert rc == 0 and (tmp_path / "new" / "sweep.json").read_bytes() == first


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            kids += [int(x) for x in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return kids


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "kill -9"])
def test_pool_workers_die_with_the_parent(tmp_path, sig):
    """A sweep on the process pool, killed while its workers simulate: no worker survives, the output pipes
    close (communicate returns), and SIGTERM ends with one line and exit 143."""
    sweep = {**BASE, "name": "long-sweep", "workload": {**BASE["workload"], "num_requests": 20000},
             "sweep": {"grid": {"runs.1.policy.k": [1, 2, 3, 4]}}}
    cfg = tmp_path / "long.yaml"
    cfg.write_text(yaml.safe_dump(sweep, sort_keys=False))
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(cfg), "--workers", "2",
                             "--no-progress", "--out", str(tmp_path / "out")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    workers: list[int] = []
    for _ in range(600):  # until both workers exist (a guard against a broken start, not a speed check)
        workers = _children(proc.pid) if proc.poll() is None else []
        if len(workers) >= 2 or proc.poll() is not None:
            break
        time.sleep(0.2)
    assert len(workers) >= 2, (workers, proc.poll())
    time.sleep(1.0)  # let them pick up points
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)  # returns only once no worker holds the pipes
    for _ in range(100):
        if not any(_running(w) for w in workers):
            break
        time.sleep(0.1)
    alive = [w for w in workers if _running(w)]
    for w in alive:
        os.kill(w, signal.SIGKILL)
    assert alive == [], f"workers {alive} outlived their parent"
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, (proc.returncode, err)
        assert err.decode().strip().count("\n") == 0 and "terminated" in err.decode(), err
