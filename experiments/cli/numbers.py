"""One rule for every numeric command-line flag: `type=int` and `type=float` flags of every subcommand take
finite, non-negative numbers that fit in 64 bits (no draftsim flag means anything below zero, and `nan`,
`inf` or `10**30` are typos that would otherwise fail deep inside a run or allocate without end).

`harden_numeric_flags(parser)` rewrites the types in place, so each command keeps its own argument
definitions and argparse reports a bad value as a one-line usage error naming the flag. Each command
still checks its own upper bounds (traces.limits) where a flag sizes work.
"""
from __future__ import annotations

import argparse
import math

MAX_INT = 2**63 - 1


def checked_int(text: str) -> int:
    """An integer in [0, 2**63 - 1] (argparse turns the error into a usage error naming the flag)."""
    value = int(text)
    if not 0 <= value <= MAX_INT:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63 - 1], got {text[:40]!r}")
    return value


def checked_float(text: str) -> float:
    """A finite number >= 0 (`nan`, `inf` and negative numbers are refused)."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text[:40]!r}")
    return value


checked_int.__name__ = "int"  # argparse names the type in its message: "invalid int value: '-1'"
checked_float.__name__ = "float"


def harden_numeric_flags(parser: argparse.ArgumentParser) -> None:
    """Replace `int`/`float` types of every argument of `parser` and its subcommands by the checked ones."""
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:  # noqa: SLF001 - argparse keeps its actions here; there is no public walk
            if action.type is int:
                action.type = checked_int
            elif action.type is float:
                action.type = checked_float
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                stack.extend(action.choices.values())
