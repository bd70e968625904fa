"""The `draftsim` command line: one subcommand module per job, registered here."""
from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines register(subparsers) and sets a `func(args) -> int` default on its parser.
COMMAND_MODULES = [
    "experiments.cmd_run",
    "experiments.cmd_import",
    "experiments.cmd_traces",
    "experiments.cmd_bounds",
    "experiments.cmd_specbench",
    "experiments.cmd_policies",
    "experiments.cmd_psd_report",
    "experiments.cmd_placement",
    "experiments.cmd_calibrate",
    "experiments.cmd_sweep",
    "experiments.cmd_plan",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draftsim",
        description="Trace-driven simulator of LLM serving with speculative decoding.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        if args.command is None and (argv if argv is not None else sys.argv[1:]) == []:
            args = parser.parse_args(["run"])
        else:
            parser.print_help()
            return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:  # bad input: one clear line, no traceback
        print(f"draftsim: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
