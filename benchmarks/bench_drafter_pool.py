"""A bandit over a large drafter pool: engine request-steps per CPU second.

Run from the repository root:  python -m benchmarks.bench_drafter_pool [--specialists 11] [--requests 2000]

Workload: a synthetic pool (traces/pool.py) of `--specialists` task specialists plus a generalist (12 drafters by
default: the kernels' drafter records then pad to 16 slots, a build of their own), `--requests` requests in a
closed loop of 64 clients, max_num_seqs 64, UCB (k = 3) over every drafter with a 0.2 ms switching cost. The run is
timed `--repeats` times in this process (best CPU time kept; the first call, which loads or compiles the kernel
build, is timed on its own). Printed with `uptime` beside each figure; nothing is asserted.
"""
from __future__ import annotations

import argparse
import time

from benchmarks.bench_serving import time_run, uptime


def config(specialists: int, requests: int) -> dict:
    cats = [f"task{j:02d}" for j in range(specialists)]
    drafters = [f"spec-{c}" for c in cats] + ["generalist"]
    return {
        "name": "bench-drafter-pool", "seed": 0,
        "traces": {"pool": {"categories": cats, "num_requests": requests}},
        "workload": {"arrival": {"kind": "closed_loop", "clients": 64, "think_time": 0.0},
                     "lengths": {"source": "bundle"}},
        "server": {"target_profile": "llama3.1-8b-h100-specbench", "max_num_seqs": 64,
                   "max_num_batched_tokens": 8192, "kv_capacity_tokens": 430_000},
        "drafters": {d: {"kind": "fraction_of_verify", "fraction": 0.1} for d in drafters},
        "runs": [{"name": "ucb-pool", "mode": "sd", "switch_cost_s": 2e-4,
                  "policy": {"name": "ucb", "drafters": drafters, "k": 3}}],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specialists", type=int, default=11)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    from experiments.config import load_config
    from experiments.run import experiment_inputs, prepare
    from simulator.scenario import simulate

    cfg = load_config(config(args.specialists, args.requests))
    inputs = experiment_inputs(cfg, need_acceptance=True)
    c0 = time.process_time()
    first = simulate(prepare(cfg)[0], inputs)
    print(f"{args.specialists + 1} drafters, {args.requests:,} requests; first run (kernel build load or "
          f"compile): {time.process_time() - c0:.2f} cpu s, {first.extras['steps']:,} steps  [{uptime()}]")
    cpu, res = time_run(cfg, inputs, args.repeats)
    rs = res.extras["request_steps"]
    print(f"  {rs:,} request-steps in {res.extras['steps']:,} steps")
    print(f"  engine cpu {cpu:.3f} s -> {rs / cpu / 1e6:.2f} M/cpu-s  [{uptime()}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
