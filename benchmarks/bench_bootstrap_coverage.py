"""Coverage of `validate`'s predictive intervals with and without the calibration bootstrap, on a shipped
`draftsim validate` run (experiments/validation/*/raw-runs.tar.xz).

Both analyses use the same runs, config, seeds and repeats; `--bootstrap` prices repeats 2..R with the
calibration profile refit on a resample of its steps (calibration/vllm_steps/bootstrap.py). Printed per mode:
the share of predictive rows whose measured value falls inside the interval, and each level's TTFT p90 row.

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


def run(folder: Path, modes: list[str], repeats: int) -> dict[str, Any]:
    from calibration.vllm_steps.validate_compare import validate_all
    from calibration.vllm_steps.validate_run import load_config

    cfg = load_config(ROOT / "experiments" / "validation" / "validate-vllm-cpu.yaml").model_copy(
        update={"modes": modes})
    out: dict[str, Any] = {"folder": str(folder), "repeats": repeats}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(folder / "raw-runs.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        for boot in (False, True):
            rows = [r for r in validate_all(cfg, tmp, repeats=repeats, bootstrap=boot).rows
                    if r["kind"] == "predictive" and r.get("inside") is not None]
            per_mode: dict[str, Any] = {}
            for r in rows:
                m = per_mode.setdefault(r["mode"], {"rows": 0, "inside": 0, "ttft_p90": []})
                m["rows"] += 1
                m["inside"] += bool(r["inside"])
                if r["metric"] == "ttft_p90_s":
                    m["ttft_p90"].append({"fraction": r["fraction"], "measured": r["measured"],
                                          "interval": r["interval"], "inside": r["inside"]})
            out["bootstrap" if boot else "seeds only"] = per_mode
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default=str(ROOT / "experiments" / "validation" / "vllm-cpu-smollm2-quiet"))
    ap.add_argument("--modes", default="ar,ngram:4")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = run(Path(args.folder), [m.strip() for m in args.modes.split(",")], args.repeats)
    for kind in ("seeds only", "bootstrap"):
        for mode, m in res[kind].items():
            print(f"{kind:10s} {mode:10s} inside {m['inside']}/{m['rows']}")
            for t in m["ttft_p90"]:
                lo, hi = t["interval"]
                print(f"    level {t['fraction']:.2f}: TTFT p90 measured {1e3 * t['measured']:.0f} ms, interval "
                      f"[{1e3 * lo:.0f}, {1e3 * hi:.0f}] ms {'in' if t['inside'] else 'OUT'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
