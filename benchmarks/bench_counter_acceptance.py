"""Acceptance from vLLM's counters, with and without the proposal rate, against each request's own acceptance,
on a shipped `draftsim validate` n-gram run (experiments/validation/*/raw-runs.tar.xz).

Per load level the level's requests are simulated three times with the same replay profiles (fitted on the
load steps) and send times, changing only the acceptance: (a) `per_request`, the acceptance vLLM measured on
each request (the step records), (b) `counters`, vLLM's spec-decode counters over the level as `import
vllm-bench` imported them before the proposal rate (per-position rates, every decode step proposing), and
(c) `counters+rate`, the same counters with the proposal rate derived from the level's output tokens. The
counters are what `vllm bench serve` reports: sums of the requests' drafts and accepted tokens per position.
Printed: mean TPOT and E2E error against the client's measurement, per level and pooled over levels.

Run from the repository root: `python -m benchmarks.bench_counter_acceptance [--folder
experiments/validation/vllm-cpu-smollm2-quiet] [--mode ngram:4] [--json OUT]`. Simulated figures (no
timing); asserts nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("per_request", "counters", "counters+rate")


def level_counters(requests: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """vLLM's counters over these requests (drafts, accepted, accepted per position) and their output tokens."""
    drafts = accepted = 0
    per_pos = np.zeros(k)
    for q in requests:
        m = q["spec_decode_metrics"]
        steps = np.asarray(m["per_step_accepted"], dtype=int)
        drafts += int(m["num_spec_steps"])
        accepted += int(m["num_accepted_draft_tokens"])
        per_pos += (steps[:, None] > np.arange(k)[None, :]).sum(axis=0)
    return {"drafts": drafts, "accepted": accepted, "per_pos": per_pos.tolist(),
            "output_tokens": sum(len(q["output_token_ids"]) for q in requests), "requests": len(requests)}


def counter_source(c: dict[str, Any], k: int, with_rate: bool):
    from traces.acceptance_levels import proposal_rate_from_counts, source_from_vllm_counters

    rate = proposal_rate_from_counts(c["output_tokens"], c["requests"], c["drafts"], c["accepted"], k) \
        if with_rate else None
    return source_from_vllm_counters(c["drafts"], c["accepted"], c["per_pos"], k, {"format": "level counters"}, rate)


def run(folder: Path, mode_text: str, seed: int = 0) -> dict[str, Any]:
    from calibration.vllm_steps.calibrate import parse_mode
    from calibration.vllm_steps.validate_compare import (client_rows, fit_mode_profiles, load_mode,
                                                         measured_latencies, replay_traces, simulate_level,
                                                         simulated_latencies)
    from traces.acceptance_levels import with_level
    from traces.bundle import BundleMeta, DrafterSpec, TraceBundle

    mode = parse_mode(mode_text)
    out: dict[str, Any] = {"folder": str(folder), "mode": mode.label, "levels": []}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(folder / "raw-runs.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        data = load_mode(Path(tmp) / mode.label, mode)
        profiles = fit_mode_profiles(data, data.load_log, "load", "target")
        sums = {kind: {"tpot": [], "e2e": []} for kind in KINDS}
        for i, lv in enumerate(data.levels):
            measured = measured_latencies(client_rows(lv, "result.json"))
            own = replay_traces(data, i, "target")
            bundle = TraceBundle(BundleMeta(target="target", drafters={mode.label: DrafterSpec(mode.label, mode.method,
                                                                                               mode.label)}), own)
            c = level_counters(lv["requests"], mode.k)
            traces = {"per_request": own}
            for kind, rate in (("counters", False), ("counters+rate", True)):
                src = counter_source(c, mode.k, rate)
                traces[kind] = with_level(bundle, mode.label, src, "per_position", seed + i).requests
            row: dict[str, Any] = {"fraction": float(lv["fraction"]), "requests": len(own), "counters": c,
                                   "proposal_rate": counter_source(c, mode.k, True).proposal_rate,
                                   "measured": {"tpot_ms": 1e3 * float(np.mean(measured.tpot)), "e2e_s": float(np.mean(measured.e2e))}}
            for kind in KINDS:
                lat = simulated_latencies(simulate_level(data, i, [dataclasses.replace(t) for t in traces[kind]],
                                                         profiles, seed + i))
                err = {"tpot_pct": 100 * (float(np.mean(lat.tpot)) / float(np.mean(measured.tpot)) - 1),
                       "e2e_pct": 100 * (float(np.mean(lat.e2e)) / float(np.mean(measured.e2e)) - 1)}
                row[kind] = err
                sums[kind]["tpot"].append((float(np.mean(lat.tpot)), float(np.mean(measured.tpot))))
                sums[kind]["e2e"].append((float(np.mean(lat.e2e)), float(np.mean(measured.e2e))))
            out["levels"].append(row)
        out["pooled"] = {kind: {m: 100 * (sum(p for p, _ in v) / sum(q for _, q in v) - 1) for m, v in s.items()}
                         for kind, s in sums.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default=str(ROOT / "experiments" / "validation" / "vllm-cpu-smollm2-quiet"))
    ap.add_argument("--mode", default="ngram:4")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = run(Path(args.folder), args.mode)
    print(f"{res['folder']} {res['mode']}: mean TPOT / E2E error vs the client's measurement")
    print(f"{'level':>6s} {'proposal rate':>13s} " + " ".join(f"{k:>22s}" for k in KINDS))
    for row in res["levels"]:
        print(f"{row['fraction']:6.2f} {row['proposal_rate']:13.3f} " +
              " ".join(f"{row[k]['tpot_pct']:+10.1f} / {row[k]['e2e_pct']:+9.1f}" for k in KINDS))
    print(f"{'pooled':>6s} {'':13s} " + " ".join(f"{res['pooled'][k]['tpot']:+10.1f} / {res['pooled'][k]['e2e']:+9.1f}"
                                                 for k in KINDS))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
