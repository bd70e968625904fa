"""Test helpers: run one command module's parser without the rest of the CLI; run the whole CLI quietly."""
from __future__ import annotations

import argparse
import contextlib
import io


def run_cli(module, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="draftsim")
    module.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def run_main_quietly(argv: list[str]) -> tuple[int, str]:
    """`draftsim ARGV` in this process: its exit code (argparse's SystemExit included) and what it wrote to stderr."""
    from experiments import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
    return rc, err.getvalue()
