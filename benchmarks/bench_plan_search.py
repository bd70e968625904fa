"""Plan search work: simulations and CPU seconds of one plan with the first-seed rule on and off, answers side by side.

Run from the repository root:
    python -m benchmarks.bench_plan_search [CONFIG] [--set KEY=VALUE ...] [--only on|off] [--known-case]

CONFIG is a plan YAML or built-in name (default: plan_llama8b cut to H100 TP 1, AR + sd-eagle3-k3); --known-case
plans the M/D/1 case of tests/experiments/test_plan.py instead (its bundle and profile written to a temporary
folder; its threshold by the test's Lindley recursion is printed beside). The plan runs
serially twice in this process from empty caches: `search.first_seed_settles: true` (a rate's first seed settles a
clear rate, experiments/plan/search.py) and `false` (every seed at every rate). Printed per setting: simulations,
CPU seconds (this process, serial backend), `uptime`'s load before and after; per candidate the answer, its
interval and whether each setting's answer lies inside the other's interval. Nothing is asserted (the tests check
the verdicts: tests/experiments/test_plan.py); the machine may be shared, so read CPU seconds, not wall time.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time

from experiments.config import read_config_doc
from experiments.plan.config import load_plan_config
from experiments.plan.planner import run_plan


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load %.2f %.2f %.2f" % os.getloadavg()


def cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def default_doc() -> dict:
    doc, _ = read_config_doc("plan_llama8b")
    cands = {**doc["candidates"], "gpus": ["h100-80gb"], "tp": [1],
             "modes": [m for m in doc["candidates"]["modes"] if m["name"] in ("AR", "sd-eagle3-k3")]}
    return {**doc, "name": "plan_llama8b_h100_tp1", "candidates": cands}


def measure(doc: dict, overrides: list[str], settles: bool) -> dict:
    plan = load_plan_config(doc, [*overrides, f"search.first_seed_settles={str(settles).lower()}"])
    with tempfile.TemporaryDirectory(prefix="bench-plan-search-") as tmp:
        load0, t0, c0 = uptime(), time.perf_counter(), cpu_seconds()
        res = run_plan(plan, tmp, backend="serial", progress=False)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {"settles": settles, "res": res, "cpu_s": cpu, "wall_s": wall, "load_before": load0,
            "load_after": uptime(), "sims": res["_stats"]["computed"]}


def inside(x: float, interval: list) -> bool:
    lo, hi = interval
    return lo <= x and (hi is None or x <= hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--only", choices=("on", "off"), default=None, help="run one setting only")
    ap.add_argument("--known-case", action="store_true", help="the M/D/1 case of tests/experiments/test_plan.py")
    args = ap.parse_args()
    keep = tempfile.TemporaryDirectory(prefix="bench-plan-case-")
    if args.known_case:
        from pathlib import Path

        from tests.experiments.test_plan import TTFT_S, Q, make_known_case, md1_threshold

        doc = make_known_case(Path(keep.name))
        print(f"M/D/1 known case: threshold {md1_threshold(TTFT_S, Q):.3f} req/s (Lindley recursion)")
    else:
        doc = read_config_doc(args.config)[0] if args.config else default_doc()
    settings = {"on": [True], "off": [False]}.get(args.only, [True, False])
    runs = [measure(doc, args.overrides, s) for s in settings]
    for m in runs:
        print(f"first_seed_settles={m['settles']}: {m['sims']} simulations, {m['cpu_s']:.1f} CPU s "
              f"({m['wall_s']:.1f} s wall)\n  before: {m['load_before']}\n  after:  {m['load_after']}")
    by_id = [{c["id"]: c for c in m["res"]["candidates"] if c["status"] == "ok"} for m in runs]
    for cid in by_id[0]:
        row = []
        for m, cands in zip(runs, by_id):
            c = cands[cid]
            row.append(f"{'on' if m['settles'] else 'off'}: {c['max_rate_req_s']:g} {c['interval_req_s']} "
                       f"({c['simulations']} sims)")
        line = f"  {cid}: " + "; ".join(row)
        if len(runs) == 2:
            a, b = by_id[0][cid], by_id[1][cid]
            line += (f"; each inside the other's interval: {inside(a['max_rate_req_s'], b['interval_req_s'])}, "
                     f"{inside(b['max_rate_req_s'], a['interval_req_s'])}")
        print(line)
    if len(runs) == 2:
        print(f"CPU ratio off/on: {runs[1]['cpu_s'] / runs[0]['cpu_s']:.2f}x, simulations "
              f"{runs[1]['sims']} -> {runs[0]['sims']}")


if __name__ == "__main__":
    main()
