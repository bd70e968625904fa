"""The shipped H200 profiles (measured with `python -m calibration.gpu_profile`) beside the two models that price
the same steps without a GPU: the measured-ops model (aiconfigurator-core's vLLM tables for h200_sxm,
calibration/op_step.py) and the draftsim roofline (simulator/costs/roofline.py): at its stated defaults, and with
`overlap: op` and the `host_s` fitted to the Llama-3.1-8B / H100 fit (benchmarks/bench_measured_ops.py).

The measured side is transformers' kernels replayed as CUDA graphs (an upper bound for a serving engine's fused
kernels), so the absolute errors say how far apart the three are, not which is right. What a speculative-decoding
answer turns on is what verifying k drafts adds to a step at large batch: printed as verify / decode (with each
model's mean error in that ratio over the rows printed), as verify k / verify k=1 and as the added milliseconds,
which the fixed costs do not enter.
Every measured point is the median of 10 replays; the run's provenance is in each profile file.

Run from the repository root: `python -m benchmarks.bench_gpu_profiles [--markdown]` (the op model needs the optional
extra `aiconfigurator`; without it that column is left out). Prints; asserts nothing. Figures are computed, not timed.
"""
from __future__ import annotations

import argparse

import numpy as np

TARGETS = ("llama3.1-8b", "qwen3-8b", "qwen3-32b")
GPU = "h200-141gb"


def points(model: str, version: str | None, host_s: float) -> list[tuple[int, int, int, float, float | None, float,
                                                                         float]]:
    """(batch, query tokens, context, measured s, op model s or None, roofline s, roofline `overlap: op` s with
    `host_s`) for every measured step."""
    from simulator.costs.latency import resolve_profile
    from simulator.costs.roofline import RooflineProfile
    from simulator.costs.step_model import StepShape
    from traces.catalog import get_gpu, get_model

    spec, gpu = get_model(model), get_gpu(GPU)
    measured = resolve_profile(f"{model}-h200-hf-bf16-table")
    roof = RooflineProfile(spec, gpu)
    roof_op = RooflineProfile(spec, gpu, overlap="op", host_s=host_s)
    ops = None
    if version is not None:
        from calibration.op_profile import SYSTEMS
        from calibration.op_step import OpStepModel
        from calibration.op_tables import load_op_tables

        ops = OpStepModel(spec, gpu, load_op_tables(SYSTEMS[GPU], version))
    out = []
    for m in measured.measurements:
        b, q, c = m.num_seqs, m.extra["query_tokens"], m.extra["context_len"]
        shape = StepShape(decode_seqs=b, draft_tokens=b * (q - 1), decode_kv=b * c)
        op = ops.shape_time(shape) if ops is not None else None
        args = (m.num_seqs, m.batched_tokens, m.kv_tokens)
        out.append((b, q, c, m.seconds, op, roof.step_time(*args), roof_op.step_time(*args)))
    return out


def op_version(requested: str) -> str | None:
    """The tables' version when the optional extra is installed, else None."""
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        return None
    return requested


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.24.0", help="vLLM version of aiconfigurator-core's tables")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    from benchmarks.bench_measured_ops import fit_host_s

    version = op_version(args.version)
    if version is None:
        print("aiconfigurator-core is not installed: the op model column is left out")
    host_s = fit_host_s()[0]
    print(f"roofline `overlap: op`: host_s = {host_s * 1e3:.3f} ms, fitted to the measured Llama-3.1-8B / H100 fit "
          "(benchmarks/bench_measured_ops.py)")
    for model in TARGETS:
        rows = points(model, version, host_s)
        by = {(b, q, c): (t, o, r, ro) for b, q, c, t, o, r, ro in rows}
        contexts = sorted({c for _, _, c, *_ in rows})
        batches = sorted({b for b, *_ in rows})
        print(f"\n{model} on one H200 ({len(rows)} measured steps)")
        for name, i in (("op model", 1), ("roofline", 2), ("roofline op", 3)):
            if any(v[i] is None for v in by.values()):
                continue
            for phase, sel in (("decode", lambda q: q == 1), ("verify", lambda q: q > 1)):
                e = [100.0 * (v[i] / v[0] - 1.0) for (b, q, c), v in by.items() if sel(q)]
                print(f"  {name} vs measured, {phase}: mean {np.mean(e):+.1f}%, mean |error| "
                      f"{np.mean(np.abs(e)):.1f}%, range {min(e):+.1f}..{max(e):+.1f}%")
        cols = ["measured"] + (["op model"] if version else []) + ["roofline", "roofline op"]
        idx = [0] + ([1] if version else []) + [2, 3]
        if args.markdown:
            names = ", ".join(cols)
            print(f"\n| batch | context | k | verify / decode ({names}) | verify k / verify k=1 ({names}) "
                  f"| verify k - verify k=1, ms ({names}) |")
            print("|---:|---:|---:|---|---|---|")
        ratio = {i: [] for i in idx[1:]}  # each model's verify / decode against the measured one, per row
        for b in [x for x in batches if x in (32, 64, 128)] or batches[-1:]:
            for c in contexts:
                for q in (4, 8):
                    v, one, d = by[(b, q, c)], by[(b, 2, c)], by[(b, 1, c)]
                    for i in idx[1:]:
                        ratio[i].append(100.0 * ((v[i] / d[i]) / (v[0] / d[0]) - 1.0))
                    to_decode = " / ".join(f"{v[i] / d[i]:.2f}" for i in idx)
                    to_one = " / ".join(f"{v[i] / one[i]:.2f}" for i in idx)
                    extra = " / ".join(f"{(v[i] - one[i]) * 1e3:.2f}" for i in idx)
                    if args.markdown:
                        print(f"| {b} | {c} | {q - 1} | {to_decode} | {to_one} | {extra} |")
                    else:
                        print(f"  B = {b:3d} context {c:4d} k = {q - 1}: verify / decode {to_decode};  verify k / "
                              f"verify k=1 {to_one};  verify k - verify k=1 {extra} ms")
        print("  verify / decode against the measured ratio, over these rows: " + "; ".join(
            f"{cols[idx.index(i)]} mean {np.mean(e):+.1f}%, mean |error| {np.mean(np.abs(e)):.1f}%"
            for i, e in ratio.items()))
        top = batches[-1]
        print(f"  ({' / '.join(cols)}; measured decode at B = {top}: "
              + ", ".join(f"{by[(top, 1, c)][0] * 1e3:.2f} ms at context {c}" for c in contexts) + ")")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
