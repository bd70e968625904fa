"""Seeded fuzzing of `draftsim` command lines, and Ctrl-C: every command ends with an exit code and at most a
one-line error (never a traceback), bad flags are refused, and no user file is ever replaced or deleted."""
from __future__ import annotations

import contextlib
import io
import os
import random
from pathlib import Path

import pytest
import yaml

from experiments import cli
from tests.experiments.test_fuzz_config import BASE
from tests.fuzz_support import FuzzTally

SEED = 20261203
GOOD_SETS = ["workload.arrival.rate=30", "runs.1.policy.k=2", "seed=5", "server.max_num_seqs=8"]
BAD_SETS = ["workload.arrival.rate=[1", "runs.1.policy.k=1.5", "name=../x", "seed=-1", "nokey", "a..b=1",
            "workload.num_requests=1000000000000", "server.step_overhead_s=.nan", "runs.1.policy.k=1e20"]


def _main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(argv)
        except SystemExit as e:  # argparse: --help (0) or a usage error (2)
            rc = e.code if isinstance(e.code, int) else 2
    return rc, err.getvalue()


@pytest.fixture()
def workspace(tmp_path, monkeypatch):
    """A folder with a user's experiment (myexp/config.yaml), a plain file and a previous results folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myexp").mkdir()
    (tmp_path / "myexp" / "config.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False))
    (tmp_path / "notes.txt").write_text("user notes\n")
    return tmp_path


def _user_files(root: Path) -> dict[str, bytes]:
    return {"myexp/config.yaml": (root / "myexp" / "config.yaml").read_bytes(),
            "notes.txt": (root / "notes.txt").read_bytes()}


def test_fuzz_command_lines(workspace):
    rng = random.Random(SEED)
    tally = FuzzTally("command lines")
    before = _user_files(workspace)
    # --out choices -> must the command be refused? (most are bad: a good one writes plots, which is slow)
    outs = {"results/new": False, "myexp": True, "notes.txt": True, "notes.txt/sub": True, "": True,
            "myexp/config.yaml": True, "/proc/draftsim-test": True, "results/a/b/c": False, ".": True}
    for case in range(44):
        argv, bad = ["run", "myexp/config.yaml"], False
        if rng.random() < 0.15:
            argv[1] = rng.choice(["missing.yaml", "myexp", "notes.txt", "default-nope"])
            bad = True
        for _ in range(rng.randint(0, 2)):
            if rng.random() < 0.5:
                argv += ["--set", rng.choice(GOOD_SETS)]
            else:
                argv += ["--set", rng.choice(BAD_SETS)]
                bad = True
        if rng.random() < 0.3:
            seed = rng.choice(["0", "7", "-1", "x", "1.5", str(2**70)])
            argv += ["--seed", seed]
            bad |= seed in ("-1", "x", "1.5", str(2**70))
        if rng.random() < 0.4:
            out = rng.choice(list(outs))
            argv += ["--out", out]
            bad |= outs[out]
        else:
            argv += ["--no-out"]
        if rng.random() < 0.3:
            argv += [rng.choice(["--json", "--no-progress", "--bogus"])]
            bad |= argv[-1] == "--bogus"
        argv += ["--no-progress"]

        def case_fn(argv=argv):
            rc, err = _main(argv)
            if "Traceback" in err:
                raise RuntimeError(f"traceback printed:\n{err[-800:]}")
            if rc != 0:
                lines = [x for x in err.splitlines() if x.startswith("draftsim: error:") or x.startswith("usage:")
                         or x.startswith("draftsim run: error:")]
                if not lines:
                    raise RuntimeError(f"exit {rc} without a 'draftsim: error:' line: {err[-400:]!r}")
                raise ValueError(lines[-1])
            return rc

        tally.run(" ".join(argv), case_fn, clean=(ValueError,), must_reject=bad, cpu_s=30)
        assert _user_files(workspace) == before, f"user file changed by {argv}"
    for sub in ("run", "import", "traces", "bounds", "specbench", "policies", "placement", "calibrate"):
        tally.run(f"{sub} --help", lambda sub=sub: _main([sub, "--help"]), clean=(ValueError,), must_reject=False)
    tally.run("no-such-command", lambda: _raise_on_error(_main(["no-such-command"])), clean=(ValueError,),
              must_reject=True)
    assert _user_files(workspace) == before
    leftovers = [p for p in workspace.rglob(".*") if p.name.endswith((".partial", ".old"))]
    assert not leftovers, leftovers
    tally.assert_clean(min_cases=50)


def _raise_on_error(result: tuple[int, str]) -> int:
    rc, err = result
    if rc != 0:
        raise ValueError(err.strip().splitlines()[-1])
    return rc


def test_run_into_the_config_folder_is_refused_and_keeps_the_config(workspace):
    rc, err = _main(["run", "myexp/config.yaml", "--out", "myexp", "--no-progress"])
    assert rc == 2 and "not written by draftsim" in err and "Traceback" not in err
    assert yaml.safe_load((workspace / "myexp" / "config.yaml").read_text()) == BASE
    assert sorted(os.listdir(workspace / "myexp")) == ["config.yaml"]


def test_config_name_that_is_a_path_is_refused(workspace):
    for name in ("../../escape", "/tmp/abs", "a/b", ".."):
        rc, err = _main(["run", "myexp/config.yaml", "--set", f"name={name}", "--no-progress"])
        assert rc == 2 and "name" in err and "plain name" in err, err
    assert not (workspace.parent / "escape").exists()
    assert not (workspace / "results").exists()


def test_out_under_a_file_is_one_line(workspace):
    rc, err = _main(["run", "myexp/config.yaml", "--out", "notes.txt/sub", "--no-progress"])
    assert rc == 2 and err.count("\n") == 1 and "notes.txt" in err and "is a file" in err


def test_ctrl_c_during_simulation_exits_130_without_results(workspace, monkeypatch):
    import experiments.run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments.run, "run_experiment", interrupted)
    rc, err = _main(["run", "myexp/config.yaml", "--out", "results/x", "--no-progress"])
    assert rc == 130 and err == "draftsim: interrupted\n"
    assert not (workspace / "results" / "x").exists()


def test_ctrl_c_while_writing_results_keeps_the_previous_folder(workspace, monkeypatch):
    import experiments.report

    rc, _ = _main(["run", "myexp/config.yaml", "--out", "results/x", "--no-progress"])
    assert rc == 0
    before = {p.relative_to(workspace): p.read_bytes() for p in (workspace / "results").rglob("*") if p.is_file()}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments.report, "write_plots", interrupted)
    rc, err = _main(["run", "myexp/config.yaml", "--out", "results/x", "--no-progress", "--set", "seed=9"])
    assert rc == 130 and err == "draftsim: interrupted\n"
    after = {p.relative_to(workspace): p.read_bytes() for p in (workspace / "results").rglob("*") if p.is_file()}
    assert after == before  # the old results, whole; no half-written folder, no staging folder left


FLAG_VALUES = ["0", "-1", "1", "3", "0.5", "nan", "inf", "-inf", "1e308", "x", "", str(2**70), "100000000"]


def _specbench_file(path: Path, rng: random.Random) -> Path:
    import json

    lines = []
    for i in range(3):
        n = rng.randint(4, 12)
        lines.append(json.dumps({"id": f"q{i}", "prompt_token_ids": list(range(1, 6)),
                                 "generated_token_ids": list(range(100, 100 + n)),
                                 "acc_eagle": {"acc_len": [rng.randint(1, 4) for _ in range(n)]},
                                 "acc_ngram": {"acc_len": [rng.randint(1, 3) for _ in range(n)]}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fuzz_other_command_flags(tmp_path, monkeypatch):
    """bounds, placement, specbench, traces: random values for their numeric and name flags."""
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED + 1)
    tally = FuzzTally("other commands' flags")
    trace = _specbench_file(tmp_path / "combined_cnn.jsonl", rng)
    for case in range(70):
        v = lambda: rng.choice(FLAG_VALUES)  # noqa: E731
        kind = rng.choice(["bounds", "bounds-sim", "frontier", "placement", "specbench", "traces"])
        if kind == "bounds":
            argv = ["bounds", "--draft-time", v(), "--verify-time", v()]
        elif kind == "bounds-sim":
            argv = ["bounds", "--draft-time", rng.choice(["0.01", v()]), "--verify-time", "0.02", "--simulate",
                    "--requests", rng.choice(["200", v()]), "--sub-batch", rng.choice(["4", v()])]
        elif kind == "frontier":
            argv = ["bounds", "--frontier", "--alpha-v", v(), "--k", rng.choice(["1", "3", v()]),
                    *(["--range", v(), v()] if rng.random() < 0.4 else [])]
        elif kind == "placement":
            argv = ["placement", "--target", rng.choice(["qwen3-32b", "llama3.1-8b", "nope", ""]),
                    "--gpu", rng.choice(["h100-80gb", "l40s", "nope"]), "--tp", rng.choice(["1", "2", "4", v()]),
                    *(["--drafter", rng.choice(["qwen3-4b", "smollm2-135m", "nope"]), "--drafter-tp", v()]
                      if rng.random() < 0.5 else []),
                    *(["--util", v()] if rng.random() < 0.4 else []),
                    *(["--reserve-gib", v()] if rng.random() < 0.4 else []),
                    *(["--max-model-len", v()] if rng.random() < 0.4 else [])]
        elif kind == "specbench":
            argv = ["specbench", "--trace", rng.choice([str(trace), "missing.jsonl", str(tmp_path)]),
                    "--proposer", rng.choice(["eagle3", "ngram", "combined"]),
                    "--predict", rng.choice(["FIXED_1", "FIXED_3", "ORACLE"]),
                    "--batch-size", rng.choice(["1", "4", v()]),
                    "--num-requests", rng.choice(["2", "3", v()]),
                    *(["--match-prob", v()] if rng.random() < 0.5 else [])]
        else:
            argv = ["traces", rng.choice(["validate", "stats"]), rng.choice([str(tmp_path), "missing", str(trace)])]

        def case_fn(argv=argv):
            rc, err = _main(argv)
            if "Traceback" in err:
                raise RuntimeError(f"traceback printed:\n{err[-800:]}")
            if rc != 0:
                raise ValueError(err.strip().splitlines()[-1] if err.strip() else f"exit {rc}")
            return rc

        tally.run(" ".join(argv), case_fn, clean=(ValueError,), must_reject=False, cpu_s=30)
    tally.assert_clean(min_cases=70)
