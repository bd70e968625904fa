"""`draftsim plan CONFIG`: the cheapest deployment that serves the traffic within the SLOs, and every
candidate's maximum sustainable rate and cost."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.cli.sweep import add_backend_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="capacity plan: max sustainable rate and cost per candidate deployment",
                       description="For every candidate (GPU type x TP x replicas x mode x scheduler setting) find "
                                   "the highest arrival rate that meets the SLO (bisection, repeated seeds) and its "
                                   "cost; rank them and name the cheapest that sustains the target rate. Writes "
                                   "OUT/plan.json, OUT/curves.png, OUT/pareto.png, OUT/pareto_user_gpu.png; points are cached "
                                   "in OUT/points.")
    p.add_argument("config", help="plan YAML file or built-in name (e.g. plan_llama8b)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a plan config value, e.g. --set traffic.target_rate=30 (repeatable)")
    p.add_argument("--prices", default=None, help="GPU price file (default: the config's, else the built-in table)")
    p.add_argument("--out", default=None, help="results folder (default: results/<plan name>)")
    add_backend_args(p)
    p.add_argument("--top", type=int, default=25, help="rows of the table to print (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print plan.json to stdout")
    p.add_argument("--explain", action="store_true", help="also print every rule and note (always in plan.json)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from experiments.plan.planner import run_plan
    from experiments.plan.config import load_plan_config
    from experiments.plan.report import print_plan

    console = Console(stderr=args.json)
    if not console.is_terminal:  # piped or captured: wide enough for the table instead of 80 columns
        console = Console(stderr=args.json, width=170)
    from experiments.output_folder import PLAN_ENTRIES, claim_output_folder

    plan = load_plan_config(args.config, args.overrides)
    out = claim_output_folder(args.out or Path("results") / plan.name, PLAN_ENTRIES)
    # progress on stderr: a bar on a terminal, else a plain line every few seconds (stdout stays the answer)
    doc = run_plan(plan, out, args.backend, args.workers, args.address, progress=not args.no_progress,
                   console=Console(stderr=True), price_file=args.prices)
    stats = doc.pop("_stats")
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return 0
    print_plan(doc, console, limit=args.top, explain=args.explain)
    console.print(f"{stats['computed']} simulations, {stats['cached']} from the cache; results: {out} "
                  "(plan.json, curves.png, pareto.png, pareto_user_gpu.png)")
    console.print(f"simulations by stage: {stats['stages'].line()}")
    return 0
