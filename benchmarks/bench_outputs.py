"""What a run's outputs cost: the results folder of the open-loop 10k workload, phase by phase.

Run from the repository root:  python -m benchmarks.bench_outputs [--requests 10000] [--repeats 3]

Workload (issue 18): 10,000 AR requests, 512 prompt / 256 output tokens, Poisson arrivals at 12 req/s, at most
64 sequences per step, one AR run on the linear Llama-3.1-8B / H100 profile (the published SpecDecode-Bench
fit). The run is simulated once; then each output is timed on its own (median of --repeats): the comparison
table, the per-request and per-step tables (Parquet), the plots, the timeline, and the whole results folder
(`write_results_folder`, as `draftsim run` writes it, with and without plots). Imports are outside every
figure. Prints the machine load beside the figures; asserts nothing.

`--before DIR` (a checkout of an earlier commit, e.g. a git worktree) also times that checkout's plots,
timeline and results folder on the same simulated run in the same process, and prints after/before ratios.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

# modules of the output path, loaded from --before under private names (their imports of each other redirected)
_BEFORE_MODULES = (("simulator/measure/timeline.py", "simulator.measure.timeline"), ("experiments/plots.py", "experiments.plots"),
                   ("experiments/report.py", "experiments.report"))


def load_before(root: Path) -> dict[str, types.ModuleType]:
    """The output modules of an earlier checkout at `root`, importable side by side with the current ones."""
    loaded: dict[str, types.ModuleType] = {}
    for rel, name in _BEFORE_MODULES:
        src = (root / rel).read_text(encoding="utf-8")
        for _, other in _BEFORE_MODULES:
            if other in loaded:
                src = src.replace(f"from {other} import", f"from _before_{other.replace('.', '_')} import")
        mod_name = f"_before_{name.replace('.', '_')}"
        module = types.ModuleType(mod_name)
        module.__file__ = str(root / rel)
        sys.modules[mod_name] = module
        exec(compile(src, str(root / rel), "exec"), module.__dict__)
        loaded[name] = module
    return loaded


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
    ap.add_argument("--before", type=Path, default=None, help="an earlier checkout to compare with, same process")
    args = ap.parse_args(argv)
    from rich.console import Console

    from experiments.plots import write_plots
    from experiments.report import _write_table, print_comparison, write_results_folder
    from experiments.run import run_experiment
    from simulator.measure.timeline import to_chrome_trace, write_chrome_trace

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
        before = {}
        if args.before is not None:
            old = load_before(args.before)
            before = {
                "plots": lambda: old["experiments.plots"].write_plots(d / "old-plots", req, steps, res.summary),
                "timeline (first 2000 steps)": lambda: old["simulator.measure.timeline"].write_chrome_trace(
                    d / "old-t.json", trace=old["simulator.measure.timeline"].to_chrome_trace(res.steps, max_steps=2000)),
                "results folder, all outputs": lambda: old["experiments.report"].write_results_folder(
                    d / "old-out", config_dict=cfg, runs=runs, timeline_max_steps=2000),
            }
        for name, fn in phases.items():
            fn()  # warm: first-use imports (matplotlib, pyarrow) are not output cost
            wall, cpu = _median_s(fn, args.repeats)
            line = f"  {name:<30} wall {wall * 1e3:7.1f} ms, CPU {cpu * 1e3:7.1f} ms"
            if name in before:
                before[name]()
                b_wall, b_cpu = _median_s(before[name], args.repeats)
                line += (f"; before: wall {b_wall * 1e3:7.1f} ms, CPU {b_cpu * 1e3:7.1f} ms -> CPU ratio "
                         f"{cpu / b_cpu:.2f}")
            print(f"{line} (median of {args.repeats}); {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
