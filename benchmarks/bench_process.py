"""Where the seconds of one whole `draftsim run` process go: interpreter and imports, engine, and everything else.

Run from the repository root:  python -m benchmarks.bench_process [--requests 10000] [--repeats 2] [--no-plots]

Workload: benchmarks/bench_serving.py's open-loop case (10,000 AR requests, 512 in / 256 out, Poisson 12 req/s,
64 sequences, the linear Llama-2-7B / H100-like profile), as `python -m experiments.cli run CONFIG --out DIR
--no-progress --json` runs it. Each repeat is a fresh process that wraps the pipeline's phases with wall and CPU
timers (nothing else changes): config, workload (bundle + arrivals), engine (`simulate`), summary, and the
results folder split into tables, timeline and the wait for the plots (drawn in a forked child process while
this one writes the rest, experiments/beside.py: the child's CPU is in no figure here, only the wall time this
process still waits for it). A phase's figure includes the imports it triggers. Bytecode is cached in a temporary folder after one untimed small run, as an
installed program has it. `--importtime`: a second process per repeat runs under `python -X importtime` to
total the import time. Prints the load beside every figure; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# phases: (label, module, attribute); each wrapped where the pipeline looks it up
PHASES = (
    ("config", "experiments.config", "load_config"),  # first: experiments.run binds the wrapped one
    ("workload (bundle, arrivals)", "experiments.run", "experiment_inputs_and_meta"),  # what run_experiment calls
    ("engine (simulate)", "experiments.run", "simulate"),
    ("summary", "experiments.run", "summarize_run"),
    ("results folder, whole", "experiments.report", "write_results_folder"),
    ("  tables (parquet)", "experiments.report", "_write_table"),
    ("  timeline", "experiments.report", "to_chrome_trace"),
    ("  timeline file", "experiments.report", "write_chrome_trace"),
    ("  plots: waiting for their child process", "experiments.report", "_plots_written"),
)

PROBE = """
import time
T0, C0 = time.perf_counter(), time.process_time()
import importlib, json, sys
PHASES = {phases!r}
spent = {{}}

def timed(label, fn):
    def wrapper(*a, **k):
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            w, p = spent.get(label, (0.0, 0.0))
            spent[label] = (w + time.perf_counter() - t, p + time.process_time() - c)
    return wrapper

from experiments.cli import main
for label, mod, attr in PHASES:
    m = importlib.import_module(mod)
    if hasattr(m, attr):  # an older checkout (--root) may not have every phase's function
        setattr(m, attr, timed(label, getattr(m, attr)))
spent["import experiments.cli + phase modules"] = (time.perf_counter() - T0, time.process_time() - C0)
import contextlib, io
out = io.StringIO()
t, c = time.perf_counter(), time.process_time()
sys.argv = ["draftsim", *{argv!r}]
with contextlib.redirect_stdout(out):
    rc = main()  # as the program calls it (argv from sys.argv: the exit is readied as the program's is)
spent["main() in all"] = (time.perf_counter() - t, time.process_time() - c)
spent["probe in all"] = (time.perf_counter() - T0, time.process_time() - C0)
print(json.dumps({{"rc": rc, "spent": spent, "summary": json.loads(out.getvalue())}}))
"""


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _import_seconds(stderr: str) -> float:
    """Total import time from `-X importtime` output: the sum of the outermost imports' cumulative times."""
    total = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if cumulative.strip().isdigit() and not name[1:].startswith(" "):  # no indent: imported from outside
            total += int(cumulative)
    return total / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-plots", action="store_true", help="run with --no-plots")
    ap.add_argument("--importtime", action="store_true", help="also total the imports under -X importtime")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="checkout whose code runs (default: this one; e.g. a worktree of an earlier commit)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    import yaml

    from benchmarks.bench_serving import RUNS, config

    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached (outside the tree) as an installed program has it
    with tempfile.TemporaryDirectory(prefix="bench-process-") as tmp:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        cfg_path = Path(tmp) / "serving.yaml"
        cfg_path.write_text(yaml.safe_dump(config(args.requests, [RUNS["AR"]])))
        argv_run = ["run", str(cfg_path), "--out", str(Path(tmp) / "out"), "--no-progress", "--json"]
        argv_run += ["--no-plots"] if args.no_plots else []
        probe = PROBE.format(phases=PHASES, argv=argv_run)
        warm_cfg = Path(tmp) / "warm.yaml"  # an untimed small run first: every module's bytecode is cached
        warm_cfg.write_text(yaml.safe_dump(config(200, [RUNS["AR"]])))
        warm = PROBE.format(phases=PHASES, argv=["run", str(warm_cfg), "--out", str(Path(tmp) / "warm"),
                                                 "--no-progress", "--json"])
        subprocess.run([sys.executable, "-c", warm], cwd=root, env=env, capture_output=True, text=True, check=True)
        print(f"code: {root}; {args.requests:,} AR requests, open loop; {'--no-plots' if args.no_plots else 'all outputs'}")
        for r in range(args.repeats):
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if done.returncode != 0:
                raise SystemExit(f"probe failed:\n{done.stderr[-3000:]}")
            got = json.loads(done.stdout.strip().splitlines()[-1])
            spent = got["spent"]
            sim_s = got["summary"]["AR"]["makespan_s"]
            engine_w = spent["engine (simulate)"][0]
            print(f"repeat {r + 1}: process wall {wall:.2f} s for {sim_s:.0f} simulated s ({sim_s / wall:,.0f}x real "
                  f"time); engine {engine_w:.2f} s wall, the rest {wall - engine_w:.2f} s; {_load()}")
            print(f"  {'interpreter start and exit (process - probe)':<48} wall {wall - spent['probe in all'][0]:6.3f} s")
            for label, (w, c) in spent.items():
                print(f"  {label:<48} wall {w:6.3f} s, CPU {c:6.3f} s")
            if args.importtime:
                imp = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], cwd=root, env=env,
                                     capture_output=True, text=True)
                print(f"  {'imports in all (-X importtime, another process)':<48} wall "
                      f"{_import_seconds(imp.stderr):6.3f} s; {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
