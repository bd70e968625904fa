"""`draftsim run [CONFIG]`: simulate an experiment, print the comparison table, write the results folder."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an experiment (default: the built-in AR vs SD comparison)",
                       description="Simulate every run of an experiment config and compare them.")
    p.add_argument("config", nargs="?", default="default",
                   help="experiment YAML file or built-in name (default: %(default)s)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set workload.arrival.rate=12 (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="seed for every random choice (default: the config's)")
    p.add_argument("--out", default=None, help="results folder (default: results/<config name>)")
    p.add_argument("--no-out", action="store_true", help="do not write a results folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print summary.json to stdout instead of the table")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from experiments.config import load_config
    from experiments.report import print_comparison
    from experiments.run import run_experiment

    console = Console(stderr=args.json)
    cfg = load_config(args.config, args.overrides, args.seed)
    out = None if args.no_out else Path(args.out or Path("results") / cfg.name)
    res = run_experiment(cfg, out=out, progress=not args.no_progress and not args.json, console=console)
    if args.json:
        print(json.dumps(res.summary, indent=2, sort_keys=True, default=str))
        return 0
    fitted = {n: s for n, s in res.summary.items() if s.get("fits", True)}
    print_comparison(fitted, cfg.baseline_run, console, title=cfg.description or cfg.name)
    for name, s in res.summary.items():
        if not s.get("fits", True):
            console.print(f"[yellow]{name}: does not fit: {s.get('does_not_fit')}[/yellow]")
    if res.out_dir is not None:
        console.print(f"results: {res.out_dir}  (summary.json, requests/steps tables, plots, timeline.json "
                      f"— open timeline.json in https://ui.perfetto.dev)")
    return 0

