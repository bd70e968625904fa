"""Coverage of `validate`'s predictive intervals by what they span (seeds; + the calibration refit, `--bootstrap`;
+ the speed drift between the calibration cells, `--drift`), on a shipped `draftsim validate` run
(experiments/validation/*/raw-runs.tar.xz).

Every analysis uses the same runs, config, seeds and repeats. Printed per source and mode: the predictive rows whose
measured value falls inside the interval, in all, per load level and per metric, and each level's TTFT p90 row.

Run from the repository root: `python -m benchmarks.bench_bootstrap_coverage [--folder
experiments/validation/vllm-cpu-smollm2-quiet] [--modes ar,ngram:4] [--repeats 5] [--json OUT]`. Simulated
figures (no timing); asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"seeds": {}, "seeds + refit": {"bootstrap": True}, "seeds + refit + drift": {"bootstrap": True,
                                                                                         "drift": True}}


def run(folder: Path, modes: list[str], repeats: int) -> dict[str, Any]:
    from calibration.vllm_steps.validate_compare import interval_coverage, validate_all
    from calibration.vllm_steps.validate_run import load_config

    cfg = load_config(ROOT / "experiments" / "validation" / "validate-vllm-cpu.yaml").model_copy(
        update={"modes": modes})
    out: dict[str, Any] = {"folder": str(folder), "repeats": repeats}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(folder / "raw-runs.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        for source, flags in SOURCES.items():
            report = validate_all(cfg, tmp, repeats=repeats, **flags)
            cov = interval_coverage(report.rows)
            for r in report.rows:
                if r["kind"] == "predictive" and r["metric"] == "ttft_p90_s" and r.get("inside") is not None:
                    cov[r["mode"]].setdefault("ttft_p90", []).append(
                        {"fraction": r["fraction"], "measured": r["measured"], "interval": r["interval"],
                         "inside": r["inside"]})
            for mode, mi in report.info["modes"].items():
                if "speed_drift" in mi:
                    cov[mode]["speed_drift"] = mi["speed_drift"]
            out[source] = cov
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default=str(ROOT / "experiments" / "validation" / "vllm-cpu-smollm2-quiet"))
    ap.add_argument("--modes", default="ar,ngram:4")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = run(Path(args.folder), [m.strip() for m in args.modes.split(",")], args.repeats)
    for source in SOURCES:
        for mode, m in res[source].items():
            levels = ", ".join(f"{f:g}x {v['inside']}/{v['rows']}" for f, v in m["by_level"].items())
            print(f"{source:22s} {mode:10s} inside {m['inside']}/{m['rows']} ({levels})")
            print("    " + ", ".join(f"{k} {v['inside']}/{v['rows']}" for k, v in m["by_metric"].items()))
            for t in m.get("ttft_p90", []):
                lo, hi = t["interval"]
                print(f"    level {t['fraction']:.2f}: TTFT p90 measured {1e3 * t['measured']:.0f} ms, interval "
                      f"[{1e3 * lo:.0f}, {1e3 * hi:.0f}] ms {'in' if t['inside'] else 'OUT'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
