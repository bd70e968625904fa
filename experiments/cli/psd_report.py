"""`draftsim psd-report CONFIG`: the PSD studies' report (gain, saving, per GPU, best k, bounds, plots) over the
results of `draftsim sweep CONFIG`; it simulates nothing."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("psd-report", help="report a finished PSD sweep (psd_vs_sd, psd_bounds): tables + plots",
                              description="Read the sweep.json that `draftsim sweep CONFIG` wrote and write the PSD "
                                          "study's report.md, psd_table.csv and plots beside it.")
    p.add_argument("config", help="the swept experiment config (file or built-in name: psd_vs_sd, psd_bounds)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="the same overrides the sweep was run with (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="the seed the sweep was run with")
    p.add_argument("--results", default=None, help="the sweep's folder (default: results/<config name>-sweep)")
    p.add_argument("--out", default=None, help="where the report goes (default: the sweep's folder)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from experiments.config import load_config
    from experiments.studies.psd_report import read_sweep, write_report

    cfg = load_config(args.config, args.overrides, args.seed)
    folder = Path(args.results) if args.results else Path("results") / f"{cfg.name}-sweep"
    info = write_report(read_sweep(cfg, folder), args.out)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(Path(info["report"]).read_text(encoding="utf-8"))
    print(f"report: {info['report']}  (psd_table.csv, {len(info['plots'])} plots)")
    return 0
