"""Side by side: `draftsim specbench` against the reference SpecDecode-Bench simulator, whole process each.

Run from the repository root:

    python -m benchmarks.bench_specbench_vs_reference --reference PATH [--repeats 5] [--trace FILE]

PATH is a checkout of the reference release (github.com/SpecDecode-Bench/simulator: main.py and
data/llama3.1-8B/); the user fetches it, the project ships none of its code or data. Without it the benchmark
prints why and exits 0 (skipped). Case: cnn, eagle3, FIXED_3, B = 32, i.e. the reference's
`python main.py --proposer eagle3 --datasets cnn --predict-methods FIXED_3 --batch-sizes 32` against
`draftsim specbench --trace <release>/data/llama3.1-8B/combined_cnn.jsonl --proposer eagle3 --predict FIXED_3
--batch-size 32`. Both run with the same interpreter, alternating, after one untimed warm-up each; Python may
cache bytecode (in a temporary folder, outside both trees) as an installed program would. The speedups the
two print must agree to the reference's two decimals, or the comparison is void. Prints both wall and CPU
times, the ratio (target >= 100x, on wall medians) and the machine load before and after; asserts nothing.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 100.0  # issue 18
MODEL_DIR = "llama3.1-8B"  # the release's data folder for its only model


def draftsim_command(trace: Path, dataset: str) -> list[str]:
    return [sys.executable, "-m", "experiments.cli", "specbench", "--trace", str(trace), "--dataset", dataset,
            "--proposer", "eagle3", "--predict", "FIXED_3", "--batch-size", "32", "--json"]


def reference_command(dataset: str, out_dir: Path) -> list[str]:
    return [sys.executable, "main.py", "--proposer", "eagle3", "--datasets", dataset, "--predict-methods", "FIXED_3",
            "--batch-sizes", "32", "--output-dir", str(out_dir)]


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system) of one whole process, and its stdout."""
    c0, t0 = _cpu_children(), time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _cpu_children() - c0
    if done.returncode != 0:
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return wall, cpu, done.stdout


def _reference_speedup(out_dir: Path, dataset: str) -> float:
    with open(out_dir / f"eagle3_{dataset}_speedup.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["speedup"])


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", required=True, help="folder of the reference release (main.py, data/)")
    ap.add_argument("--dataset", default="cnn", help="dataset both simulators run (default cnn)")
    ap.add_argument("--trace", default=None,
                    help="draftsim's trace file (default: the release's data/llama3.1-8B/combined_<dataset>.jsonl, "
                         "the file the reference reads)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    args = ap.parse_args(argv)
    ref = Path(args.reference).expanduser().resolve()
    ref_trace = ref / "data" / MODEL_DIR / f"combined_{args.dataset}.jsonl"
    if not (ref / "main.py").is_file() or not ref_trace.is_file():
        print(f"skipped: no reference release at {ref} (expected main.py and data/{MODEL_DIR}/"
              f"combined_{args.dataset}.jsonl; fetch github.com/SpecDecode-Bench/simulator and pass --reference)")
        return 0
    trace = Path(args.trace).resolve() if args.trace else ref_trace
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="bench-specbench-") as tmp:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        out_dir = Path(tmp) / "reference-results"
        out_dir.mkdir()
        ours_cmd, ref_cmd = draftsim_command(trace, args.dataset), reference_command(args.dataset, out_dir)
        print(f"case: {args.dataset} eagle3 FIXED_3 B=32; draftsim trace {trace}")
        print(f"before: {_load()}")
        _, _, ours_out = _timed(ours_cmd, ROOT, env)  # warm-up runs: bytecode caches, file system cache
        _timed(ref_cmd, ref, env)
        ours_speedup = json.loads(ours_out)["speedup"]
        ref_speedup = _reference_speedup(out_dir, args.dataset)
        ours, theirs = [], []  # (wall, cpu) per run
        for _ in range(args.repeats):
            ours.append(_timed(ours_cmd, ROOT, env)[:2])
            theirs.append(_timed(ref_cmd, ref, env)[:2])
        print(f"after:  {_load()}")
    agree = round(ours_speedup, 2) == ref_speedup
    print(f"speedup printed: draftsim {ours_speedup:.4f}, reference {ref_speedup:.2f} "
          f"({'agree' if agree else 'DISAGREE: the comparison is void'})")
    for name, runs in (("draftsim ", ours), ("reference", theirs)):
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{name} whole process: wall median {statistics.median(walls):7.3f} s, min {min(walls):7.3f} s, "
              f"max {max(walls):7.3f} s; cpu median {statistics.median(cpus):7.3f} s  "
              f"(walls {', '.join(f'{t:.3f}' for t in walls)})")
    ratio = statistics.median(w for w, _ in theirs) / statistics.median(w for w, _ in ours)
    cpu_ratio = statistics.median(c for _, c in theirs) / statistics.median(c for _, c in ours)
    print(f"ratio reference / draftsim, wall medians: {ratio:.1f}x (target >= {TARGET_RATIO:g}x: "
          f"{'met' if ratio >= TARGET_RATIO else 'NOT met'}); best wall against best "
          f"{min(w for w, _ in theirs) / min(w for w, _ in ours):.1f}x; cpu medians {cpu_ratio:.1f}x")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
