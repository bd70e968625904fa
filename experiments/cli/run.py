"""`draftsim run [CONFIG]`: simulate an experiment, print the comparison table, write the results folder."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def results_dir(args: argparse.Namespace, name: str, where: str) -> Path | None:
    """Where the results folder goes (None with --no-out), checked before anything is simulated."""
    from experiments.config import check_plain_name
    from experiments.report import RESULT_ENTRIES, check_results_target

    if args.no_out:
        if args.out is not None:
            raise ValueError("give --out or --no-out, not both")
        return None
    if args.out is None:
        out = Path("results") / check_plain_name(name, f"{where}: name")
    elif not args.out.strip():
        raise ValueError("--out: expected a folder path, got an empty string")
    else:
        out = Path(args.out)
    check_results_target(out, entries=RESULT_ENTRIES)
    return out


def register(sub: argparse._SubParsersAction) -> None:
    from simulator.engine.scheduler import describe_schedulers  # the registry: the engine runs it anyway

    p = sub.add_parser("run", help="run an experiment (default: the built-in AR vs SD comparison)",
                       description="Simulate every run of an experiment config and compare them.",
                       epilog=f"Schedulers (server.scheduler, e.g. --set server.scheduler=draftsim): "
                              f"{describe_schedulers()}.")
    p.add_argument("config", nargs="?", default="default",
                   help="experiment YAML file or built-in name (default: %(default)s)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set workload.arrival.rate=12 (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="seed for every random choice (default: the config's)")
    p.add_argument("--out", default=None, help="results folder (default: results/<config name>)")
    p.add_argument("--no-out", action="store_true", help="do not write a results folder")
    p.add_argument("--no-plots", action="store_true", help="write the results folder without plots/ (numbers only)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print summary.json to stdout instead of the table")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from experiments.cli import freeze_loaded
    from experiments.config import load_config, read_config_doc
    from experiments.run import run_experiment

    doc, where = read_config_doc(args.config)
    if doc.get("kind") == "plan":
        raise ValueError(f"{where}: a capacity plan; run it with `draftsim plan {args.config}`")
    cfg = load_config(args.config, args.overrides, args.seed)
    if cfg.sweep is not None:  # an experiment with a sweep: block is run point by point
        raise ValueError(f"{where}: has a sweep: block; run it with `draftsim sweep {args.config}` "
                         "(serial, process pool or Ray; resumable; the PSD studies then `draftsim psd-report`)")
    out = results_dir(args, cfg.name, where)
    # progress on stderr, as `plan` does: stdout stays the answer (a bar on a terminal, plain lines in a log)
    progress = not args.no_progress and not args.json
    freeze_loaded(args)  # the program itself: the loaded modules' objects are no longer walked by collections
    res = run_experiment(cfg, out=out, progress=progress, console=_console(stderr=True) if progress else None,
                         plots=not args.no_plots)
    if args.json:  # no rich: the summary alone, as plain JSON
        print(json.dumps(res.summary, indent=2, sort_keys=True, default=str))
        return 0
    from experiments.report import print_comparison

    console = _console(stderr=False)
    fitted = {n: s for n, s in res.summary.items() if s.get("fits", True)}
    print_comparison(fitted, cfg.baseline_run, console, title=cfg.description or cfg.name)
    for name, s in res.summary.items():
        if not s.get("fits", True):
            console.print(f"[yellow]{name}: does not fit: {s.get('does_not_fit')}[/yellow]")
    print_provenance(res.summary, console)
    if res.out_dir is not None:
        console.print(f"results: {res.out_dir}  (summary.json, requests/steps tables, "
                      f"{'' if args.no_plots else 'plots, '}timeline.json — open timeline.json in "
                      f"https://ui.perfetto.dev)")
    return 0


def print_provenance(summary: dict, console) -> None:
    """Under the table: what each run borrowed (summary.json `provenance`; experiments/provenance.py)."""
    from experiments.provenance import provenance_lines

    lines = provenance_lines(summary)
    if lines:
        console.print("what the runs borrowed (summary.json: provenance):", markup=False, highlight=False)
        for line in lines:
            console.print(line, markup=False, highlight=False)


def _console(stderr: bool):
    """A rich console (rich is imported only where something is printed through it)."""
    from rich.console import Console

    return Console(stderr=stderr)
