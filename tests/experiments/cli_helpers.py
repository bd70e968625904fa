"""Test helper: run one command module's parser without the rest of the CLI."""
from __future__ import annotations

import argparse


def run_cli(module, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="draftsim")
    module.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
