"""Cluster speed: simulated request-steps per CPU second of one server vs the same traffic on replicas behind
a router, so the router's and the shared Environment's overhead show as a ratio.

Run from the repository root:  python -m benchmarks.bench_cluster [--requests 10000] [--mode sd|psd]

Workload: the built-in default bundle (EAGLE-3-like acceptance, SD k=3, or PSD k=3 with `--mode psd`: 64 sequences
per replica in all, split over its two sub-batches), a closed loop of 64 clients per replica (so every replica is as
busy as the single server), Llama-3.1-8B / H100 published profile. Nothing is asserted; the ratio to the single
server is printed, with the machine's load.
"""
from __future__ import annotations

import argparse
import os
import time

from experiments.config import load_config
from experiments.run import experiment_inputs, prepare
from simulator.scenario import simulate
from simulator.reproductions.specbench import STEP_OVERHEAD_S

POLICY = {"name": "fixed", "drafter": "eagle3", "k": 3}


def _config(n: int, clients: int, cluster: dict | None, mode: str = "sd") -> dict:
    doc = {
        "name": "bench-cluster", "seed": 0, "traces": "builtin:default",
        "workload": {"num_requests": n, "arrival": {"kind": "closed_loop", "clients": clients, "think_time": 0.0},
                     "lengths": {"source": "bundle"}, "sample": {"with_replacement": True}},
        "server": {"target_profile": "llama3.1-8b-h100-specbench", "step_overhead_s": STEP_OVERHEAD_S,
                   "max_num_seqs": 64, "max_num_batched_tokens": 8192, "kv_capacity_tokens": 430000},
        "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"}},
        "runs": [{"name": f"{mode}-eagle3-k3", "mode": mode, "policy": POLICY,
                  **({"psd": {"sub_batch_max_num_seqs": 32}} if mode == "psd" else {})}],
    }
    if cluster:
        doc["cluster"] = cluster
    return doc


def measure(n: int, replicas: int, router: str | None, mode: str = "sd") -> dict:
    """Engine-only CPU time of one run (workload built first, summary not included)."""
    cluster = None if router is None else {"replicas": replicas, "router": {"name": router}}
    cfg = load_config(_config(n, 64 * replicas, cluster, mode))
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
    ap.add_argument("--mode", choices=("sd", "psd"), default="sd")
    args = ap.parse_args()
    for router in (None, "least_outstanding"):  # the kernels' first calls (numba import, cache load) not timed
        measure(200, 1, router, args.mode)
    rows = [measure(args.requests, 1, None, args.mode), measure(args.requests, 1, "least_outstanding", args.mode)]
    for router in ("round_robin", "least_outstanding", "least_kv", "affinity"):
        rows.append(measure(args.requests, 4, router, args.mode))
    base = rows[0]["rate"]
    print(f"{'run':<26} {'CPU s':>7} {'wall s':>7} {'request-steps':>14} {'per CPU-s':>11} {'vs single':>9}")
    for r in rows:
        print(f"{r['label']:<26} {r['cpu_s']:>7.2f} {r['wall_s']:>7.2f} {r['request_steps']:>14,} "
              f"{r['rate']:>11,.0f} {r['rate'] / base:>9.2f}")
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average at the end)")


if __name__ == "__main__":
    main()
