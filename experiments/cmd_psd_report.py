"""`draftsim psd-report CONFIG --out DIR`: run a PSD experiment (psd_vs_sd or psd_bounds) into tables and plots."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("psd-report", help="run a PSD experiment config (psd_vs_sd / psd_bounds): table + plots")
    p.add_argument("config", help="experiments/configs/psd_vs_sd.yaml or psd_bounds.yaml")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from experiments.psd_report import _cli  # the study runner (pandas, the engine): only when it runs

    return _cli(args)
