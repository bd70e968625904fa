"""End to end: simulated seconds per wall second of `run_experiment` on 10,000 AR requests, and where the time goes.

Run from the repository root:  python -m benchmarks.bench_end_to_end [--requests 10000] [--repeats 2]

Workload: parametric lengths, 512 prompt and 256 output tokens each, a closed loop of 64 clients (64 requests
in flight), replaying the built-in default bundle; one AR run on the Llama-3.1-8B / H100 published profile.
Figures: run_experiment wall time and simulated seconds (makespan) per wall second (target >= 500), first
in a fresh cache (memory and disk) and then warm; then the pipeline's phases timed one by one: loading the
bundle, building the workload with and without acceptance (fitting + drawing vs lengths only), the engine,
the summary. Imports are outside every figure. The disk cache goes to a temporary folder. Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

from simulator.reproductions.specbench import STEP_OVERHEAD_S

TARGET = 500.0


def config(n: int) -> dict:
    return {
        "name": "bench-end-to-end",
        "seed": 0,
        "traces": "builtin:default",
        "workload": {"num_requests": n, "arrival": {"kind": "closed_loop", "clients": 64, "think_time": 0.0},
                     "lengths": {"source": "parametric", "prompt": {"dist": "constant", "value": 512},
                                 "output": {"dist": "constant", "value": 256}}},
        "server": {"target_profile": "llama3.1-8b-h100-specbench", "step_overhead_s": STEP_OVERHEAD_S,
                   "max_num_seqs": 64, "max_num_batched_tokens": 8192, "kv_capacity_tokens": 430000},
        "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"},
                     "ngram": {"kind": "fraction_of_verify", "fraction": 0.005875}},
        "runs": [{"name": "AR", "mode": "ar"}],
    }


@contextmanager
def timed(into: dict, name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    into[name] = time.perf_counter() - t0


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=2, help="warm run_experiment calls after the cold one")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-e2e-cache-") as cache:
        os.environ["DRAFTSIM_CACHE_DIR"] = cache
        from experiments.config import load_config
        from experiments.run import prepare, resolve_bundle, run_experiment
        from simulator.scenario import inputs_for, simulate
        from simulator.measure.metrics import summarize
        from traces.synthetic.fit_cache import clear_memory_cache
        from traces.workload import workload_and_bundle

        cfg_doc = config(args.requests)
        print(f"{args.requests:,} AR requests, 512 in / 256 out, 64 concurrent (closed loop); before: {_load()}")
        clear_memory_cache()
        walls = []
        for i in range(1 + args.repeats):
            t0 = time.perf_counter()
            res = run_experiment(cfg_doc)
            walls.append(time.perf_counter() - t0)
            sim_s = res.summary["AR"]["makespan_s"]
            print(f"  run_experiment {'cold cache' if i == 0 else 'warm cache'}: wall {walls[-1]:6.2f} s, "
                  f"simulated {sim_s:.1f} s -> {sim_s / walls[-1]:7.1f} simulated s per wall s "
                  f"(target {TARGET:g}: {'met' if sim_s / walls[-1] >= TARGET else 'NOT met'})")

        phases: dict[str, float] = {}
        cfg = load_config(cfg_doc)
        spec = cfg.workload
        with timed(phases, "load bundle"):
            source = resolve_bundle(cfg.traces, cfg.seed)
        clear_memory_cache()
        for f in os.listdir(cache):  # a cold fit: empty both cache levels
            for g in os.listdir(os.path.join(cache, f)):
                os.unlink(os.path.join(cache, f, g))
        with timed(phases, "workload + acceptance (fit and draw, cold cache)"):
            workload_and_bundle(source, spec, seed=cfg.seed)
        with timed(phases, "workload + acceptance (draw, fit cached)"):
            workload_and_bundle(source, spec, seed=cfg.seed)
        with timed(phases, "workload only (need_acceptance=False)"):
            workload, bundle = workload_and_bundle(source, spec, seed=cfg.seed, need_acceptance=False)
        full_workload, full_bundle = workload_and_bundle(source, spec, seed=cfg.seed)
        with timed(phases, "engine arrays"):
            inputs = inputs_for(full_workload, full_bundle)
        with timed(phases, "simulate (AR)"):
            sim = simulate(prepare(cfg)[0], inputs)
        with timed(phases, "summarize"):
            summarize(sim.requests, sim.steps, sim.itl, slo=cfg.slo.model_dump(), num_target_gpus=1,
                      num_draft_gpus=0, extras=sim.extras)
        print("  phases (wall s):")
        for name, s in phases.items():
            print(f"    {name:50s} {s:6.2f}")
        lean = phases["load bundle"] + phases["workload only (need_acceptance=False)"] + phases["engine arrays"] \
            + phases["simulate (AR)"] + phases["summarize"]
        print(f"  pipeline with need_acceptance=False (sum of its phases): {lean:.2f} s -> "
              f"{sim_s / lean:.1f} simulated s per wall s")
        print(f"after: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
