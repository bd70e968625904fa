"""Check a plan's answers with long plain runs: each named candidate at its answer and at 1.2x, another seed.

Run from the repository root after `draftsim plan CONFIG --out DIR`:
    python -m benchmarks.check_plan_answers CONFIG DIR [--requests 20000] [--candidates ID,ID|cheapest|all-ok]
A long run at the answer must meet the SLO (steady-state attainment >= the target, not overloaded); at 1.2x the
answer it must miss, unless 1.2x lies inside the plan's stated interval. Prints what each run measured; asserts
nothing (the tests/experiments/test_plan.py known-answer cases assert the same rule on small cases).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from experiments.plan.config import load_plan_config
from experiments.plan.candidates import base_experiment, build_candidates
from experiments.plan.traffic import TrafficModel
from experiments.plan.prices import price_table
from experiments.run import run_experiment
from simulator.measure.metrics import steady_state_summary

CHECK_SEED = 12345  # not one of the plan's seeds (those derive from plan.seed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("plan_dir")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--candidates", default="cheapest")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    a = ap.parse_args()
    doc = json.loads((Path(a.plan_dir) / "plan.json").read_text())
    plan = load_plan_config(a.config, a.overrides)
    base = base_experiment(plan)
    traffic = TrafficModel.of(plan, base)
    cands = {c.id: c for c in build_candidates(plan, base, price_table(plan.prices.file, plan.prices.usd_per_gpu_hour))}
    rows = {c["id"]: c for c in doc["candidates"]}
    if a.candidates == "cheapest":
        want = [doc["cheapest"]["id"] if isinstance(doc.get("cheapest"), dict) else doc.get("cheapest")]
    elif a.candidates == "all-ok":
        want = [i for i, c in rows.items() if c.get("status") == "ok" and c.get("max_rate_req_s")]
    else:
        want = a.candidates.split(",")
    slo = {k: v for k, v in (("ttft_s", plan.slo.ttft_s), ("tpot_s", plan.slo.tpot_s), ("e2e_s", plan.slo.e2e_s))
           if v is not None}
    q = plan.slo.attainment
    for cid in want:
        row, c = rows[cid], cands[cid]
        rate, (lo, hi) = row["max_rate_req_s"], row["interval_req_s"]
        for label, r in (("answer", rate), ("1.2x", 1.2 * rate)):
            wl, _ = traffic.at_rate(r, a.requests)
            t0, load = time.process_time(), os.getloadavg()[0]
            res = run_experiment({**c.config, "workload": wl, "seed": CHECK_SEED})
            ss = steady_state_summary(res.requests, slo)
            att, over = ss["steady_slo_attainment"], ss["overloaded"]
            ok = (att >= q and not over) if label == "answer" else (att < q or over or r <= hi)
            print(f"{cid} {label} {r:.2f} req/s (interval [{lo:g}, {hi:g}]): attainment {att:.4f} vs {q}, "
                  f"overloaded {over}, TTFT p99 {ss.get('steady_ttft_p99_s')}, {a.requests} requests, "
                  f"{time.process_time() - t0:.1f} CPU s, load {load:.1f}: {'HOLDS' if ok else 'DOES NOT HOLD'}")


if __name__ == "__main__":
    main()
