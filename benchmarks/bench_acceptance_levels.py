"""What each lower acceptance level loses (traces/acceptance_levels.py), measured on shipped bundles.

For a bundle, each drafter's acceptance is replaced by (1) the mean acceptance length vLLM would print for
it served at k = K, (2) vLLM's per-position counters at K, or kept as (3) the per-request traces; each
version runs the same experiment (the `default` config's server, drafter costs and runs, same seed, so the
same requests replay) and the table shows mean and p99 TPOT per run, the best k per drafter and the best run
(lowest mean TPOT) per request category.

Run from the repository root: `python -m benchmarks.bench_acceptance_levels [--bundle builtin:default]
[--bundle specbench:FILE] [--requests N] [--rate R] [--json OUT]`. Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

LEVELS = ("per_request", "per_position", "mean_length")
MEASURED_K = 5  # the default config's runs use k = 1, 3, 5
REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference-traces" / "specbench-llama3.1-8b-h100"


def load(ref: str):
    from experiments.run import resolve_bundle

    if ref.startswith("specbench:"):
        from traces.importers.specbench import import_specbench

        return import_specbench(ref.split(":", 1)[1], on_mismatch="shortest")[0]  # as bench_specbench reads them
    return resolve_bundle(ref)


def level_bundle(bundle, level: str, k: int, seed: int):
    """The bundle with every drafter's acceptance at `level`, measured from the bundle itself at k."""
    from traces.acceptance_levels import source_from_bundle, with_level

    if level == "per_request":
        return bundle
    for j, d in enumerate(list(bundle.meta.drafters)):
        bundle = with_level(bundle, d, source_from_bundle(bundle, d, k), level, seed + j)
    return bundle


def run_level(bundle, requests: int, rate: float, seed: int) -> dict[str, Any]:
    """The default experiment on this bundle: per run mean/p99 TPOT and throughput, per category the best run."""
    from experiments.run import run_experiment
    from traces.bundle import save_bundle

    with tempfile.TemporaryDirectory() as tmp:
        save_bundle(bundle, Path(tmp) / "b")
        res = run_experiment("default", overrides=[f"traces={Path(tmp) / 'b'}", f"workload.num_requests={requests}",
                                                   f"workload.arrival.rate={rate}", f"seed={seed}"])
    runs = {name: {"tpot_mean_ms": 1e3 * s["tpot_mean_s"], "tpot_p99_ms": 1e3 * s["tpot_p99_s"],
                   "throughput_tok_s": s["throughput_tok_s"], "accept_length": s.get("pooled_acceptance_length")}
            for name, s in res.summary.items()}
    best_k = {}
    for d in ("eagle3", "ngram"):
        cands = {n: v["tpot_mean_ms"] for n, v in runs.items() if n.startswith(d + "-k")}
        if cands:
            best_k[d] = min(cands, key=cands.get)
    req = res.requests
    per_cat = {}
    for cat, g in req.groupby("category"):
        means = g.groupby("run").tpot.mean()
        per_cat[str(cat)] = str(means.idxmin())
    return {"runs": runs, "best_k": best_k, "best_run_per_category": per_cat}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bundle", action="append", default=None,
                    help="builtin:NAME, a bundle folder or specbench:FILE (default: builtin:default and the "
                         "SpecDecode-Bench reference traces when ../shared/reference-traces exists)")
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write all figures here")
    args = ap.parse_args(argv)
    refs = args.bundle or (["builtin:default"] + [f"specbench:{p}" for p in sorted(REFERENCE.glob("*.jsonl"))])
    print(f"load 1-min {os.getloadavg()[0]:.2f} (figures are simulated, not timed)")
    out: dict[str, Any] = {}
    for ref in refs:
        bundle = load(ref)
        out[ref] = {lv: run_level(level_bundle(bundle, lv, MEASURED_K, args.seed), args.requests, args.rate,
                                  args.seed) for lv in LEVELS}
        base = out[ref]["per_request"]
        print(f"\n{ref} ({len(bundle.requests)} traces, dataset {bundle.meta.dataset}); acceptance measured at "
              f"k = {MEASURED_K}; {args.requests} requests at {args.rate} req/s")
        print(f"{'run':<11}" + "".join(f" {lv + ' TPOT mean/p99 ms':>34}" for lv in LEVELS))
        for name in base["runs"]:
            cells = []
            for lv in LEVELS:
                r, b = out[ref][lv]["runs"][name], base["runs"][name]
                err = "" if lv == "per_request" else \
                    f" ({100 * (r['tpot_mean_ms'] / b['tpot_mean_ms'] - 1):+.1f}%, {100 * (r['tpot_p99_ms'] / b['tpot_p99_ms'] - 1):+.1f}%)"
                cells.append(f"{r['tpot_mean_ms']:.3f}/{r['tpot_p99_ms']:.3f}{err}")
            print(f"{name:<11}" + "".join(f" {c:>34}" for c in cells))
        for lv in LEVELS:
            o = out[ref][lv]
            print(f"  {lv:<13} best k {o['best_k']}; best run per category {o['best_run_per_category']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
