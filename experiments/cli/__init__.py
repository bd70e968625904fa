"""The `draftsim` command line: one subcommand module per job, registered here."""
from __future__ import annotations

import argparse
import importlib
import signal
import sys

# Each module defines register(subparsers) for the command named here and sets a `func(args) -> int` default on
# its parser. Registration imports only what argument definitions need; a command imports its heavy modules
# (pandas, scipy, the engine) when it runs.
COMMAND_MODULES = {
    "run": "experiments.cli.run",
    "import": "experiments.cli.imports",
    "validate": "experiments.cli.validate",
    "compare": "experiments.cli.compare",
    "traces": "experiments.cli.traces",
    "bounds": "experiments.cli.bounds",
    "specbench": "experiments.cli.specbench",
    "policies": "experiments.cli.policies",
    "psd-report": "experiments.cli.psd_report",
    "placement": "experiments.cli.placement",
    "calibrate": "experiments.cli.calibrate",
    "sweep": "experiments.cli.sweep",
    "plan": "experiments.cli.plan",
}


def version_text() -> str:
    """`draftsim X.Y.Z (Python A.B.C)`: the installed distribution's version, else the source tree's."""
    import importlib.metadata
    import platform

    try:
        version = importlib.metadata.version("draftsim")
    except importlib.metadata.PackageNotFoundError:
        from traces.bundle import TOOL_VERSION as version
    return f"draftsim {version} (Python {platform.python_version()})"


class _VersionAction(argparse.Action):
    """--version without importing anything until it is asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter, set up (terminal width included) when help is first formatted, not when it is made:
    argparse makes one for every add_argument only to check a metavar, and the first one imports shutil for the
    width (~2 ms of a `draftsim specbench` process, ~2% of it). The help text is argparse's own."""

    def __init__(self, *args, **kwargs):
        self._deferred = (args, kwargs)

    def __getattr__(self, name):  # only reached for what argparse's own __init__ sets: set it up now
        deferred = self.__dict__.pop("_deferred", None)
        if deferred is None:
            raise AttributeError(name)
        super().__init__(*deferred[0], **deferred[1])
        return getattr(self, name)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with `HelpFormatter` by default; subcommand parsers are of this class too."""

    def __init__(self, *args, formatter_class: type = HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `draftsim` parser; when argv starts with a command name only that command is registered (faster start)."""
    parser = ArgumentParser(
        prog="draftsim",
        description="Trace-driven simulator of LLM serving with speculative decoding.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the draftsim version and exit")
    # prog given: argparse would otherwise format a usage line to find it (the parser has no positionals)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog=parser.prog)
    names = [argv[0]] if argv and argv[0] in COMMAND_MODULES else list(COMMAND_MODULES)
    for name in names:
        importlib.import_module(COMMAND_MODULES[name]).register(sub)
    from experiments.cli.numbers import harden_numeric_flags

    harden_numeric_flags(parser)  # every numeric flag: finite, >= 0, 64-bit (experiments/cli/numbers.py)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so it unwinds like Ctrl-C: staging folders and workers are removed."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    """Run one command; `argv` None (the `draftsim` program itself) reads sys.argv and readies a fast exit."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if argv is None:
            _ready_exit()


def _ready_exit() -> None:
    """Before the program exits: move every object to the collector's permanent generation (gc.freeze), so the
    interpreter's final collections skip them. With pandas, SciPy and matplotlib loaded, those passes over a
    few hundred thousand objects cost ~0.4 s of a run's wall time; atexit handlers and file flushes still run
    as usual, only cyclic garbage left at exit goes uncollected (the operating system frees the memory)."""
    import gc

    gc.freeze()


def freeze_loaded(args: argparse.Namespace) -> None:
    """In the `draftsim` program itself (main() without argv), once a command has imported what it runs: move
    every object alive now to the collector's permanent generation (gc.freeze), so the full collections that the
    command's own objects trigger (a 100,000-request workload builds hundreds of thousands) no longer walk the
    loaded modules' objects each time; as `_ready_exit`, only cyclic garbage among them goes uncollected. A
    caller's main(argv) (a test, a notebook) keeps its collector as it was."""
    if getattr(args, "program", False):
        import gc

        gc.freeze()


def _main(argv: list[str] | None) -> int:
    try:  # from the first import on: Ctrl-C while the commands load is an interrupt too, not a traceback
        parser = build_parser(sys.argv[1:] if argv is None else argv)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            if args.command is None and (argv if argv is not None else sys.argv[1:]) == []:
                args = parser.parse_args(["run"])
            else:
                parser.print_help()
                return 2
        args.program = argv is None  # read by freeze_loaded
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:  # bad input: one clear line, no traceback
        print(f"draftsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: results are written whole or not at all, so nothing to clean up
        print("draftsim: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("draftsim: terminated (SIGTERM); nothing half-written was left behind", file=sys.stderr)
        return 143
    except OSError as e:  # unwritable or invalid paths, full disk: one line naming the file
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"draftsim: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
