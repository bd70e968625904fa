"""How far acceptance measured at one k carries to another (traces/acceptance_levels.py `extrapolation`), on the
SpecDecode-Bench reference traces: vLLM's counters computed from the traces at the measured k, extrapolated to a
held-back k, compared with the counters at that k (mean tokens per verify step). The table in docs/workloads.md.

Run from the repository root: `python -m benchmarks.bench_acceptance_extrapolation [--pairs 2:4,3:5,4:8]`. Prints
figures; asserts nothing (tests/traces/test_acceptance_extrapolation.py bounds 3 -> 5).
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference-traces" / "specbench-llama3.1-8b-h100"
FILES = {"GSM8K": "combined_gsm8k.jsonl", "InstructCoder": "combined_instructcoder.jsonl"}


def main(argv: list[str] | None = None) -> int:
    from traces.acceptance_levels import extrapolated_mean_length, source_from_bundle
    from traces.importers.specbench import import_specbench

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="2:4,3:5,4:8", help="measured:held-back k pairs (default: %(default)s)")
    args = p.parse_args(argv)
    pairs = [tuple(int(x) for x in pair.split(":")) for pair in args.pairs.split(",")]
    if not REFERENCE.is_dir():
        raise SystemExit(f"reference traces not found at {REFERENCE}")
    print("| traces | drafter | " + " | ".join(f"{a} -> {b}: measured, per-position, mean length" for a, b in pairs)
          + " |")
    for label, name in FILES.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bundle, _ = import_specbench(REFERENCE / name, on_mismatch="shortest")
        for d in bundle.meta.drafters:
            cells = []
            for a, b in pairs:
                src, held = source_from_bundle(bundle, d, a), source_from_bundle(bundle, d, b).mean_length
                err = {lv: 100 * (extrapolated_mean_length(lv, src, b) / held - 1)
                       for lv in ("per_position", "mean_length")}
                cells.append(f"{held:.3f}, {err['per_position']:+.1f}%, {err['mean_length']:+.1f}%")
            print(f"| {label} | {d} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
