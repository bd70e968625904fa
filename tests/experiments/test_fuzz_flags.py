"""Seeded fuzzing of every subcommand's flags (issue 17: "every subcommand's flags").

The parser is walked, so a flag added later is fuzzed too: every numeric flag of every (nested) subcommand gets
values that are not finite non-negative 64-bit numbers and must be refused by argparse with a usage error naming
the flag; every command that reads a file gets a missing file, a folder, a FIFO and /dev/zero and must fail with
one `draftsim: error:` line. No traceback, no hang (CPU-time bound per case), no invalid value accepted.
"""
from __future__ import annotations

import argparse
import os
import random

import pytest

from experiments import cli
from tests.experiments.cli_helpers import run_main_quietly as _main
from experiments.cli.numbers import checked_float, checked_int
from tests.fuzz_support import FuzzTally

SEED = 20261219
BAD_NUMBERS = ["x", "-1", "nan", "inf", "-inf", "1e400", str(2**70), "", "0x10", "1,5"]


def _leaf_parsers() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """(command words, parser) of every subcommand that runs something."""
    out, stack = [], [([], cli.build_parser())]
    while stack:
        words, p = stack.pop()
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        if not subs:
            out.append((words, p))
        for a in subs:
            stack.extend(([*words, name], sp) for name, sp in a.choices.items())
    return sorted(out, key=lambda x: x[0])


def _filler(p: argparse.ArgumentParser) -> list[str]:
    """Placeholder values for the required arguments, so parsing reaches the flag under test."""
    argv: list[str] = []
    for a in p._actions:  # noqa: SLF001
        value = str(next(iter(a.choices))) if a.choices else "1" if a.type in (checked_int, checked_float) else "x"
        if a.option_strings and a.required:
            argv += [a.option_strings[0], value]
        elif not a.option_strings and a.nargs not in ("?", "*", argparse.SUPPRESS) and a.dest != "help":
            n = a.nargs if isinstance(a.nargs, int) else 1
            argv += [value] * n
    return argv


def _refused(argv: list[str], flag: str | None = None):
    def case():
        rc, err = _main(argv)
        if "Traceback" in err:
            raise RuntimeError(f"traceback printed:\n{err[-600:]}")
        if rc == 0:
            return rc
        line = next((x for x in err.splitlines() if "error:" in x or x.startswith("INVALID:")), "")
        if not line:
            raise RuntimeError(f"exit {rc} without an error line: {err[-300:]!r}")
        if flag is not None and flag not in line:
            raise RuntimeError(f"error does not name {flag}: {line}")
        raise ValueError(line)
    return case


def test_every_numeric_flag_refuses_non_numbers_negatives_and_overflow():
    rng = random.Random(SEED)
    tally = FuzzTally("numeric flags of every subcommand")
    leaves = _leaf_parsers()
    assert len(leaves) >= 20, [w for w, _ in leaves]
    flags = 0
    for words, p in leaves:
        base = [*words, *_filler(p)]
        for a in p._actions:  # noqa: SLF001
            if not a.option_strings or a.type not in (checked_int, checked_float):
                continue
            flags += 1
            n = a.nargs if isinstance(a.nargs, int) else 1
            pool = BAD_NUMBERS if a.type is checked_int else [b for b in BAD_NUMBERS if b != str(2**70)]
            for bad in rng.sample(pool, 4) + (["1.5", str(2**70)] if a.type is checked_int else []):
                argv = [*base, a.option_strings[0], *([bad] * n)]
                tally.run(" ".join(argv), _refused(argv, a.option_strings[0]), clean=(ValueError,),
                          must_reject=True, cpu_s=10)
    assert flags >= 40, flags  # the walk reaches the nested subcommands
    tally.assert_clean(min_cases=4 * flags)


@pytest.fixture()
def specials(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    return {"missing": str(tmp_path / "missing.yaml"), "folder": str(tmp_path / "folder"),
            "fifo": str(tmp_path / "fifo"), "zero": "/dev/zero"}


# commands that read a file given on the command line (no model loading, no simulation before the read)
FILE_COMMANDS = [
    ["run", "{f}", "--no-out"], ["sweep", "{f}", "--out", "o1"], ["plan", "{f}", "--out", "o2"],
    ["traces", "validate", "{f}"], ["traces", "stats", "{f}"], ["traces", "synth", "--spec", "{f}", "--out", "o3"],
    ["traces", "fit", "{f}", "--out", "o4.yaml"], ["import", "specbench", "{f}", "o5"],
    ["import", "minedraft", "{f}", "--out-dir", "o6", "--name", "x"], ["import", "vllm-metrics", "{f}"],
    ["import", "vllm-metrics", "{f}", "--json"], ["psd-report", "{f}", "--out", "o7"],
    ["calibrate", "pool-report", "{f}"], ["run", "default", "--no-out", "--set", "server.target_profile={f}"],
]


def test_every_file_argument_refuses_missing_folders_fifos_and_devices(specials, tmp_path):
    tally = FuzzTally("file arguments of every reading command")
    for template in FILE_COMMANDS:
        for kind, f in specials.items():
            argv = [x.replace("{f}", f) for x in template]
            tally.run(f"{kind}: {' '.join(argv)}", _refused(argv), clean=(ValueError,), must_reject=True, cpu_s=30)
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("o"))
    assert leftovers == [], f"a refused command wrote {leftovers}"
    tally.assert_clean(min_cases=4 * len(FILE_COMMANDS))
