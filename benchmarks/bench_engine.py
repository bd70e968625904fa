"""Engine speed and memory: simulated request-steps per second, AR as the in-process baseline.

Run from the repository root:  python -m benchmarks.bench_engine [--requests 10000] [--big 100000]

Workload: chat-like requests replayed from the built-in default bundle (EAGLE-3-like acceptance),
a closed loop of 64 clients (64 concurrent requests), Llama-3.1-8B / H100 published profile.
Figures: wall and CPU seconds, request-steps per CPU second (one request taking part in one
verify/decode step), the SD/AR cost ratio, and peak RSS for the large run. Nothing is asserted:
targets (SD 1,000,000 and AR 1,500,000 request-steps per CPU-s, < 2 GB for 100,000 requests) are
compared in the output.
"""
from __future__ import annotations

import argparse
import os
import resource
import time

from experiments.config import load_config
from experiments.run import experiment_inputs, prepare, run_experiment
from simulator.scenario import simulate
from simulator.reproductions.specbench import STEP_OVERHEAD_S

TARGET_RATE = {"AR": 1_500_000, "SD-k3": 1_000_000}  # request-steps per CPU second (issue 8)
TARGET_RSS_GB = 2.0


def _config(n: int, runs: list[dict]) -> dict:
    return {
        "name": "bench-engine",
        "seed": 0,
        "traces": "builtin:default",
        "workload": {"num_requests": n, "arrival": {"kind": "closed_loop", "clients": 64, "think_time": 0.0},
                     "lengths": {"source": "bundle"}, "sample": {"with_replacement": True}},
        "server": {"target_profile": "llama3.1-8b-h100-specbench", "step_overhead_s": STEP_OVERHEAD_S,
                   "max_num_seqs": 64, "max_num_batched_tokens": 8192, "kv_capacity_tokens": 430000},
        "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"},
                     "ngram": {"kind": "fraction_of_verify", "fraction": 0.005875}},
        "runs": runs,
    }


def measure(n: int, run: dict) -> dict:
    """End-to-end (workload build, simulation, summary) and engine-only CPU time of one run."""
    t0, c0 = time.perf_counter(), time.process_time()
    res = run_experiment(_config(n, [run]))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = res.summary[run["name"]]["extras"]["request_steps"]
    cfg = load_config(_config(n, [run]))
    inputs = experiment_inputs(cfg)
    scenario = prepare(cfg)[0]
    c1 = time.process_time()
    simulate(scenario, inputs)
    engine_cpu = time.process_time() - c1
    return {"name": run["name"], "wall_s": wall, "cpu_s": cpu, "engine_cpu_s": engine_cpu, "request_steps": steps,
            "rate_cpu": steps / cpu, "rate_engine": steps / engine_cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=100_000, help="requests for the memory run (0 = skip)")
    args = ap.parse_args()
    ar = measure(args.requests, {"name": "AR", "mode": "ar"})
    sd = measure(args.requests, {"name": "SD-k3", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3}})
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    print(f"engine, {args.requests} chat-like requests, 64 concurrent (machine load {load:.2f} per core):")
    for r in (ar, sd):
        print(f"  {r['name']:6s} {r['request_steps']:>9,} request-steps; end to end wall {r['wall_s']:5.2f} s, "
              f"cpu {r['cpu_s']:5.2f} s ({r['rate_cpu']:,.0f}/cpu-s); engine alone cpu {r['engine_cpu_s']:5.2f} s "
              f"({r['rate_engine']:,.0f}/cpu-s; target {TARGET_RATE[r['name']]:,}: "
              f"{'met' if r['rate_engine'] >= TARGET_RATE[r['name']] else 'NOT met'})")
    ratio = (sd["engine_cpu_s"] / sd["request_steps"]) / (ar["engine_cpu_s"] / ar["request_steps"])
    print(f"  SD/AR engine cpu per request-step: {ratio:.2f}x")
    if args.big:
        big = measure(args.big, {"name": "SD-k3", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3}})
        rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
        print(f"  {args.big:,} requests SD-k3: wall {big['wall_s']:.1f} s, {big['rate_engine']:,.0f} request-steps/cpu-s, "
              f"peak RSS {rss_gb:.2f} GB (target < {TARGET_RSS_GB} GB: {'met' if rss_gb < TARGET_RSS_GB else 'NOT met'})")


if __name__ == "__main__":
    main()
