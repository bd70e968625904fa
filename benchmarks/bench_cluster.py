"""Cluster speed: simulated request-steps per CPU second of one server vs the same traffic on replicas behind
a router, so the router's and the shared Environment's overhead show as a ratio.

Run from the repository root:  python -m benchmarks.bench_cluster [--requests 10000]

Workload: the built-in default bundle (EAGLE-3-like acceptance, SD k=3), a closed loop of 64 clients per
replica (so every replica is as busy as the single server), Llama-3.1-8B / H100 published profile.
Nothing is asserted; the ratio to the single server is printed.
"""
from __future__ import annotations

import argparse
import time

from experiments.config import load_config
from experiments.run import experiment_inputs, prepare
from simulator.scenario import simulate
from simulator.reproductions.specbench import STEP_OVERHEAD_S

RUN = {"name": "eagle3-k3", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3}}


def _config(n: int, clients: int, cluster: dict | None) -> dict:
    doc = {
        "name": "bench-cluster", "seed": 0, "traces": "builtin:default",
        "workload": {"num_requests": n, "arrival": {"kind": "closed_loop", "clients": clients, "think_time": 0.0},
                     "lengths": {"source": "bundle"}, "sample": {"with_replacement": True}},
        "server": {"target_profile": "llama3.1-8b-h100-specbench", "step_overhead_s": STEP_OVERHEAD_S,
                   "max_num_seqs": 64, "max_num_batched_tokens": 8192, "kv_capacity_tokens": 430000},
        "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"}},
        "runs": [RUN],
    }
    if cluster:
        doc["cluster"] = cluster
    return doc


def measure(n: int, replicas: int, router: str | None) -> dict:
    """Engine-only CPU time of one run (workload built first, summary not included)."""
    cluster = None if router is None else {"replicas": replicas, "router": {"name": router}}
    cfg = load_config(_config(n, 64 * replicas, cluster))
    inputs = experiment_inputs(cfg)
    scenario = prepare(cfg)[0]
    c0, t0 = time.process_time(), time.perf_counter()
    res = simulate(scenario, inputs)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    steps = res.extras["request_steps"]
    return {"label": "single server" if router is None else f"{replicas} x {router}", "cpu_s": cpu, "wall_s": wall,
            "request_steps": steps, "rate": steps / cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    args = ap.parse_args()
    rows = [measure(args.requests, 1, None), measure(args.requests, 1, "least_outstanding")]
    for router in ("round_robin", "least_outstanding", "least_kv", "affinity"):
        rows.append(measure(args.requests, 4, router))
    base = rows[0]["rate"]
    print(f"{'run':<26} {'CPU s':>7} {'wall s':>7} {'request-steps':>14} {'per CPU-s':>11} {'vs single':>9}")
    for r in rows:
        print(f"{r['label']:<26} {r['cpu_s']:>7.2f} {r['wall_s']:>7.2f} {r['request_steps']:>14,} "
              f"{r['rate']:>11,.0f} {r['rate'] / base:>9.2f}")


if __name__ == "__main__":
    main()
