"""Speed of the SpecDecode-Bench compatibility mode (issue 2 "Speed"): wall time and request-steps per second.

Run from the repository root: `python -m benchmarks.bench_specbench [--trace FILE] [--repeats N]`.
Default case: instructcoder, eagle3, FIXED_3, B=32 (target: under 1 s). Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from simulator.reproductions.specbench import simulate_specbench
from traces.importers.specbench import dataset_from_filename, read_specbench

DEFAULT_TRACE = (Path(__file__).resolve().parents[1].parent / "shared" / "reference-traces"
                 / "specbench-llama3.1-8b-h100" / "combined_instructcoder.jsonl")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT_TRACE), help="SpecDecode-Bench .jsonl file")
    ap.add_argument("--proposer", default="eagle3")
    ap.add_argument("--predict", default="FIXED_3")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs (median reported)")
    args = ap.parse_args(argv)
    path = Path(args.trace)
    if not path.is_file():
        print(f"trace file not found: {path} (pass --trace)")
        return 2
    t0 = time.perf_counter()
    records = read_specbench(path, token_ids=False)
    read_s = time.perf_counter() - t0
    dataset = dataset_from_filename(path)
    walls, result = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        result = simulate_specbench(records, dataset=dataset, proposer=args.proposer, predict=args.predict,
                                    batch_size=args.batch_size)
        walls.append(time.perf_counter() - t0)
    wall = statistics.median(walls)
    sd_copy_steps = sum(b.copy_steps for b in result.batches)
    sd_steps = sum(b.sd_steps for b in result.batches)
    print(f"specbench compat: {dataset} {args.proposer} {args.predict} B={args.batch_size} "
          f"({result.num_requests} batches) speedup {result.speedup:.2f}")
    print(f"  read file            {read_s * 1e3:9.1f} ms ({len(records)} requests)")
    print(f"  simulate (median {args.repeats}) {wall * 1e3:9.1f} ms   min {min(walls) * 1e3:.1f} ms, "
          f"max {max(walls) * 1e3:.1f} ms")
    print(f"  request-steps        {result.request_steps:9d} (AR + SD decode, per copy; SD: {sd_copy_steps}, "
          f"in {sd_steps} batch steps)")
    print(f"  request-steps / s    {result.request_steps / wall:12.0f}")
    print(f"  SD batch steps / s   {sd_steps / wall:12.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
