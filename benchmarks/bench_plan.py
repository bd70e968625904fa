"""Capacity-plan speed: the shipped `plan_llama8b` end to end, then points per minute serially, on the local process
pool and on a local Ray.

Run from the repository root:  python -m benchmarks.bench_plan [--backends pool,serial,ray] [--repeats 2] [--quick]

The full plan: `plan_llama8b` exactly as shipped (`draftsim plan plan_llama8b`): 4 GPU types x 3 TP degrees x 7
AR/SD/PSD modes = 84 candidates, per candidate a saturated probe, 3 seeds x up to `search.max_tests` rates
(steady-state search, experiments/plan/search.py) and the curve points, each search run sized from the p99 SLO
(6,250 requests). Its wall time (the issue's target: within 60 s on 2 cores), CPU seconds (this process and its
workers) and the sha256 of plan.json are printed per repeat (repeats must print one hash). Then every backend runs the
same subset (one GPU type, TP 1, the 6 SD/PSD modes) from an empty cache for points per minute, and the plan.json files
are compared byte for byte. Machine load per core is printed before and after each run: the machine is shared, so
figures move with what else runs. The compiled kernels' cache (~/.cache/draftsim/numba) is used as found: a first run
on a fresh machine compiles them once. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from experiments.config import read_config_doc
from experiments.plan.planner import run_plan
from experiments.plan.config import load_plan_config


def load_per_core() -> float:
    return os.getloadavg()[0] / (os.cpu_count() or 1)


def plan_doc(gpus: list[str] | None = None, tp: list[int] | None = None, with_ar: bool = False) -> dict:
    doc, _ = read_config_doc("plan_llama8b")
    cands = dict(doc["candidates"])
    if not with_ar:
        cands["modes"] = [m for m in cands["modes"] if m["mode"] != "ar"]
    if gpus:
        cands["gpus"] = gpus
        cands["profiles"] = {g: p for g, p in cands.get("profiles", {}).items() if g in gpus}
    if tp:
        cands["tp"] = tp
    return {**doc, "candidates": cands}


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(doc: dict, backend: str, workers: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        load0, t0, c0 = load_per_core(), time.perf_counter(), cpu_seconds()
        res = run_plan(load_plan_config(doc), tmp, backend=backend, workers=workers, progress=False)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        plan_json = (Path(tmp) / "plan.json").read_bytes()
    n = res["_stats"]["computed"]
    return {"backend": backend, "points": n, "wall_s": wall, "cpu_s": cpu, "points_per_min": 60 * n / wall,
            "load_before": load0, "load_after": load_per_core(), "plan_json": plan_json,
            "candidates": len(res["candidates"]), "cheapest": res["cheapest"]}


def show(m: dict, what: str) -> None:
    cpu = f", {m['cpu_s'] / m['points']:.2f} CPU s/point (this process + pool workers)" if m["backend"] != "ray" else ""
    print(f"  {what} [{m['backend']}]: {m['candidates']} candidates, {m['points']} simulations in {m['wall_s']:.1f} s "
          f"= {m['points_per_min']:.0f} points/min{cpu}; load per core {m['load_before']:.2f} -> {m['load_after']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="pool,serial,ray", help="comma-separated; the first runs the full plan")
    ap.add_argument("--workers", type=int, default=None, help="pool size (default: CPUs available)")
    ap.add_argument("--quick", action="store_true", help="skip the full plan; subset only")
    ap.add_argument("--repeats", type=int, default=1, help="runs of the full plan (default 1)")
    ap.add_argument("--subset-gpu", default="a100-80gb")
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    print(f"plan benchmark, {os.cpu_count()} CPUs (machine load {load_per_core():.2f} per core at start)")
    if not args.quick:
        import hashlib

        for i in range(args.repeats):
            full = measure(plan_doc(with_ar=True), backends[0], args.workers)
            show(full, f"full plan_llama8b as shipped, run {i + 1}")
            print(f"    cheapest for the target rate: {full['cheapest']}; plan.json sha256 "
                  f"{hashlib.sha256(full['plan_json']).hexdigest()[:16]}")
    subset = plan_doc([args.subset_gpu], [1])
    runs = []
    for b in backends:
        if b == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                print("  [ray] skipped: Ray is not installed (pip install 'draftsim[ray]')")
                continue
        runs.append(measure(subset, b, args.workers))
        show(runs[-1], f"subset ({args.subset_gpu}, TP 1, 6 modes)")
    if len(runs) > 1:
        same = all(r["plan_json"] == runs[0]["plan_json"] for r in runs)
        print(f"  plan.json identical across {', '.join(r['backend'] for r in runs)}: {same}")


if __name__ == "__main__":
    main()
