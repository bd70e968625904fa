"""The CLI's import graph: building the parser, and running `draftsim specbench`, load no heavy library.

Start-up time itself is measured in benchmarks/ (bench_specbench_vs_reference.py), never asserted here; these
tests check the cause instead: which modules a fresh interpreter has loaded after the step.
"""
from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cli import COMMAND_MODULES, build_parser, main

COMMANDS = set(COMMAND_MODULES.values())  # one module per subcommand in experiments/cli/

ROOT = Path(__file__).resolve().parents[2]
# libraries that cost 40 ms to 2 s to import and that argument registration never needs
HEAVY = {"pandas", "scipy", "matplotlib", "torch", "transformers", "simpy", "pydantic", "rich", "pyarrow"}


def _loaded_after(code: str) -> dict:
    """Top-level packages and our command modules loaded by a fresh interpreter after running `code`."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    mods = json.loads(out.stdout.strip().splitlines()[-1])
    return {"top": {m.split(".")[0] for m in mods}, "commands": {m for m in mods if m in COMMANDS}, "all": set(mods)}


def test_building_the_whole_parser_imports_no_heavy_library():
    loaded = _loaded_after("from experiments.cli import build_parser\nbuild_parser()")
    assert loaded["top"] & HEAVY == set()
    assert loaded["commands"] == set(COMMAND_MODULES.values())  # --help lists every command


def test_a_named_command_registers_only_its_own_module():
    loaded = _loaded_after("from experiments.cli import build_parser\nbuild_parser(['specbench', '--help'])")
    assert loaded["commands"] == {"experiments.cli.specbench"}


def test_running_specbench_imports_no_heavy_library(tmp_path):
    lines = [json.dumps({"id": str(i), "prompt_token_ids": [1] * 6, "generated_token_ids": [2] * 5,
                         "acc_eagle": {"acc_len": [1, 3, 1, 2, 1]}, "acc_ngram": {"acc_len": [2, 1, 1, 1, 1]}})
             for i in range(4)]
    trace = tmp_path / "combined_gsm8k.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    argv = ["specbench", "--trace", str(trace), "--proposer", "eagle3", "--predict", "FIXED_3",
            "--batch-size", "2", "--num-requests", "4", "--json"]
    loaded = _loaded_after(f"from experiments.cli import main\nassert main({argv!r}) == 0")
    assert loaded["top"] & HEAVY == set()
    # nor numpy (~0.1-0.2 s of a ~0.3 s process): the reader, the profiles and the replay are plain Python
    assert "numpy" not in loaded["top"]
    assert "shutil" not in loaded["top"]  # argparse's formatter asks for the terminal width only to print help
    engine = argv + ["--position-convention", "engine"]  # the engine's replay rule (traces.acceptance) does use it
    assert "numpy" in _loaded_after(f"from experiments.cli import main\nassert main({engine!r}) == 0")["top"]


@pytest.mark.parametrize("name", sorted(COMMAND_MODULES))
def test_each_module_registers_exactly_the_command_it_is_listed_under(name):
    parser = argparse.ArgumentParser(prog="draftsim")
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(COMMAND_MODULES[name]).register(sub)
    assert set(sub.choices) == {name}


def test_help_lists_every_command_and_an_unknown_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMAND_MODULES)
    with pytest.raises(SystemExit) as e:
        main(["no-such-command"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_parser_for_one_command_parses_like_the_full_parser():
    argv = ["bounds", "--draft-time", "0.01", "--verify-time", "0.02", "--json"]
    one, full = build_parser(argv).parse_args(argv), build_parser().parse_args(argv)
    assert vars(one) == vars(full)


def test_run_without_a_results_folder_draws_no_plots_and_fits_nothing():
    argv = ["run", "default", "--no-out", "--no-progress", "--json", "--set", "workload.num_requests=10"]
    loaded = _loaded_after(f"import contextlib, io\nfrom experiments.cli import main\n"
                           f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({argv!r}) == 0")
    assert loaded["top"] & {"matplotlib", "torch"} == set()
    # numba (the compiled engine path) imports scipy's top package to check its version; nothing fits
    assert {m for m in loaded["all"] if m.startswith(("scipy.optimize", "scipy.stats", "scipy.interpolate"))} == set()


def test_the_program_freezes_the_collector_before_its_exit_and_an_in_process_call_does_not():
    """`draftsim` itself (main() reading sys.argv) hands its objects to gc.freeze so the interpreter's last
    collections skip them; main(argv) called from other code leaves the collector alone."""
    code = ("import contextlib, gc, io, sys\nsys.argv = ['draftsim', 'policies', '--json']\n"
            "from experiments.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main() == 0\nprint(gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) > 10_000  # every object the command loaded
    import gc

    before = gc.get_freeze_count()
    assert main(["policies", "--json"]) == 0
    assert gc.get_freeze_count() == before


def test_the_program_freezes_what_run_loaded_before_it_simulates_and_an_in_process_call_does_not(monkeypatch):
    """`draftsim run` itself freezes the loaded modules' objects before the experiment runs (freeze_loaded), so
    the collections its workload triggers skip them; main(argv) from other code does not."""
    argv = ["run", "default", "--no-out", "--no-progress", "--json", "--set", "workload.num_requests=5"]
    code = ("import contextlib, gc, io, sys\n"
            f"sys.argv = ['draftsim', *{argv!r}]\n"
            "import experiments.run as er\nseen = []\nreal = er.run_experiment\n"
            "def spy(*a, **k):\n    seen.append(gc.get_freeze_count())\n    return real(*a, **k)\n"
            "er.run_experiment = spy\n"
            "from experiments.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main() == 0\nprint(seen[0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) > 10_000  # pandas, numpy, the config's modules: frozen before the run
    import gc

    import experiments.run as er

    seen = []
    real = er.run_experiment

    def spy(*a, **k):
        seen.append(gc.get_freeze_count())
        return real(*a, **k)

    monkeypatch.setattr(er, "run_experiment", spy)
    before = gc.get_freeze_count()
    assert main(argv) == 0
    assert seen == [before] and gc.get_freeze_count() == before


def _parsers(parser: argparse.ArgumentParser):
    """`parser` and every subcommand parser under it, depth first."""
    yield parser
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its actions here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_help_and_usage_are_argparses_own_for_every_command(monkeypatch):
    """The deferred formatter (experiments.cli.HelpFormatter) prints what argparse's own prints, for every parser,
    and its errors name the flag the same way."""
    monkeypatch.setenv("COLUMNS", "100")
    lazy, plain = list(_parsers(build_parser())), list(_parsers(build_parser()))
    for p in plain:
        if p.formatter_class is not argparse.HelpFormatter and issubclass(p.formatter_class, argparse.HelpFormatter) \
                and p.formatter_class.__module__ == "experiments.cli":
            p.formatter_class = argparse.HelpFormatter
    assert len(lazy) == len(plain) > len(COMMAND_MODULES)
    computed = argparse.ArgumentParser(prog="draftsim").add_subparsers().add_parser("run").prog  # argparse's own
    assert computed == "draftsim run" and {p.prog for p in lazy} >= {f"draftsim {name}" for name in COMMAND_MODULES}
    for a, b in zip(lazy, plain):
        assert a.prog == b.prog
        assert a.format_help() == b.format_help()
        assert a.format_usage() == b.format_usage()
