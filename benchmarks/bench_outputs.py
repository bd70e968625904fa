"""What a run's outputs cost: the results folder of the open-loop 10k workload, phase by phase.

Run from the repository root:  python -m benchmarks.bench_outputs [--requests 10000] [--repeats 3]

Workload (issue 18): 10,000 AR requests, 512 prompt / 256 output tokens, Poisson arrivals at 12 req/s, at most
64 sequences per step, one AR run on the linear Llama-3.1-8B / H100 profile (the published SpecDecode-Bench
fit). The run is simulated once; then each output is timed on its own (median of --repeats): the comparison
table, the per-request and per-step tables (Parquet), the plots, the timeline, and the whole results folder
(`write_results_folder`, as `draftsim run` writes it, with and without plots). Imports are outside every
figure. Prints the machine load beside the figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from pathlib import Path


def config(n: int) -> dict:
    return {
        "name": "bench-outputs", "seed": 0, "traces": "builtin:default",
        "workload": {"num_requests": n, "arrival": {"kind": "poisson", "rate": 12.0},
                     "lengths": {"source": "parametric", "prompt": {"dist": "constant", "value": 512},
                                 "output": {"dist": "constant", "value": 256}}},
        "server": {"target_profile": "llama3.1-8b-h100-specbench", "step_overhead_s": 0.00120683946,
                   "max_num_seqs": 64, "max_num_batched_tokens": 8192, "kv_capacity_tokens": 430000},
        "runs": [{"name": "AR", "mode": "ar"}],
    }


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _median_s(fn, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `repeats` calls (CPU time is steadier on a loaded machine)."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from rich.console import Console

    from experiments.plots import write_plots
    from experiments.report import _write_table, print_comparison, write_results_folder
    from experiments.run import run_experiment
    from simulator.timeline import to_chrome_trace, write_chrome_trace

    cfg = config(args.requests)
    t0 = time.perf_counter()
    res = run_experiment(cfg)
    sim_wall = time.perf_counter() - t0
    s = res.summary["AR"]
    print(f"{args.requests:,} AR requests, Poisson 12 req/s, 64 seqs: {len(res.steps):,} step rows, simulated "
          f"{s['makespan_s']:.0f} s in {sim_wall:.2f} s wall (run_experiment without outputs); {_load()}")
    req = {"AR": res.requests.drop(columns="run")}
    steps = {"AR": res.steps.drop(columns="run")}
    runs = {"AR": (req["AR"], steps["AR"], s)}
    with tempfile.TemporaryDirectory(prefix="bench-outputs-") as tmp:
        d = Path(tmp)
        phases = {
            "comparison table": lambda: print_comparison(res.summary, "AR", Console(file=io.StringIO())),
            "requests + steps parquet": lambda: (_write_table(res.requests, d / "r.parquet", "parquet"),
                                                 _write_table(res.steps, d / "s.parquet", "parquet")),
            "plots": lambda: write_plots(d / "plots", req, steps, res.summary),
            "timeline (first 2000 steps)": lambda: write_chrome_trace(
                d / "t.json", trace=to_chrome_trace(res.steps, max_steps=2000)),
            "results folder, all outputs": lambda: write_results_folder(d / "out", config_dict=cfg, runs=runs,
                                                                        timeline_max_steps=2000),
            "results folder, --no-plots": lambda: write_results_folder(d / "out2", config_dict=cfg, runs=runs,
                                                                       timeline_max_steps=2000, plots=False),
        }
        for name, fn in phases.items():
            fn()  # warm: first-use imports (matplotlib, pyarrow) are not output cost
            wall, cpu = _median_s(fn, args.repeats)
            print(f"  {name:<30} wall {wall * 1e3:7.1f} ms, CPU {cpu * 1e3:7.1f} ms (median of {args.repeats}); "
                  f"{_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
