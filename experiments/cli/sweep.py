"""`draftsim sweep CONFIG`: run every point of an experiment's `sweep:` block (serial, process pool or Ray)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.sweep.backends import BACKENDS


def add_backend_args(p: argparse.ArgumentParser) -> None:
    """--backend/--workers/--address, shared by `sweep` and `plan`."""
    p.add_argument("--backend", choices=BACKENDS, default="pool",
                   help="where points run: serial, a local process pool (default) or Ray")
    p.add_argument("--workers", type=int, default=None, help="pool size (default: the CPUs available)")
    p.add_argument("--address", default=None,
                   help="Ray cluster address (e.g. auto or ray://head:10001); default: a local Ray")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a grid/random sweep over config keys (the config's sweep: block)",
                       description="Simulate every point of an experiment config's sweep: block. Results are "
                                   "cached per point under OUT/points, so an interrupted sweep resumes.")
    p.add_argument("config", help="experiment YAML file or built-in name with a sweep: block")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value before sweeping (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="the experiment seed (the sweep seed defaults to it)")
    p.add_argument("--out", default=None, help="results folder (default: results/<config name>-sweep)")
    add_backend_args(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print sweep.json to stdout")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from experiments.config import load_config
    from experiments.sweep.experiment import TABLE_METRICS, run_sweep

    console = Console(stderr=args.json)
    cfg = load_config(args.config, args.overrides, args.seed)
    out = Path(args.out or Path("results") / f"{cfg.name}-sweep")
    doc = run_sweep(cfg, out, args.backend, args.workers, args.address,
                    progress=not args.no_progress and not args.json, console=Console(stderr=True))
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return 0
    from experiments.tables import print_table, sweep_table

    print_table(sweep_table(doc["points"], title=f"sweep {cfg.name}: {len(doc['points'])} points"), console)
    console.print(f"{doc['computed']} points simulated, {doc['cached']} from the cache; results: {out} "
                  f"(sweep.json, table.csv; metrics: {', '.join(TABLE_METRICS)})")
    return 0

