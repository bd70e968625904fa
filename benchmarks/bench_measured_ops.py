"""Measured-ops step prices (calibration/op_profile.py) against the measured Llama-3.1-8B / H100 fit, per shape.

The reference is the SpecDecode-Bench release's fitted target step of Llama-3.1-8B on one H100 under vLLM 0.10.1
(built-in profile `llama3.1-8b-h100-specbench`, its fixed per-step overhead excluded as in draftsim); the
measured-ops side is aiconfigurator-core's vLLM tables for h100_sxm (`--version`, default 0.24.0): the op model
itself (calibration/op_step.py) and the structured profile fitted to it. Shapes: decode and verify at k = 1..5
drafts per sequence, batch 1..128, context `--context` tokens per sequence; lone prompt chunks of 256..8192
tokens. Also the draftsim roofline (simulator/costs/roofline.py, stated defaults) as it prices today (`overlap: step`)
and with `overlap: op` plus `host_s` fitted here (relative least squares over the fit's decode and verify shapes:
batch 1..128, k = 0..5, context 512 / 1,100 / 2,048; mfu and bandwidth_util kept at their stated defaults).

Also: the EAGLE-3 head's drafting phase from the same tables (calibration/op_drafter.py) against the release's EAGLE-3
fit and the host term fitted to it; verify / decode at batch 32 and 128; the SD / AR step ratio of the published
rows' setup (Llama-3.3-70B TP 2, EAGLE-3 and a Llama-3.2-1B draft model).

Run from the repository root: `python -m benchmarks.bench_measured_ops [--markdown]` (needs the optional extra
`aiconfigurator`). Prints errors in percent of the fit; asserts nothing. Figures are computed, not timed.
"""
from __future__ import annotations

import argparse

import numpy as np

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
KS = (0, 1, 2, 3, 4, 5)
PROMPTS = (256, 512, 1024, 2048, 4096, 8192)


def fit_host_s() -> tuple[float, float, float]:
    """host_s of the `overlap: op` roofline fitted to the measured 8B/H100 fit; (host_s, MAPE %, worst %)."""
    from scipy.optimize import least_squares

    from simulator.costs.latency import resolve_profile
    from simulator.costs.roofline import RooflineProfile
    from traces.catalog import get_gpu, get_model

    fit = resolve_profile("llama3.1-8b-h100-specbench")
    model, gpu = get_model("llama3.1-8b"), get_gpu("h100-80gb")
    pts = [(b, b * (k + 1), b * (c + k)) for b in BATCHES for k in KS for c in (512, 1100, 2048)]
    y = np.array([fit.step_time(*p) for p in pts])

    def rel(x: np.ndarray) -> np.ndarray:
        r = RooflineProfile(model, gpu, overlap="op", host_s=float(x[0]))
        return np.array([r.step_time(*p) for p in pts]) / y - 1.0

    res = least_squares(rel, [5e-4], bounds=([0.0], [0.1]), x_scale=[1e-4])
    e = np.abs(rel(res.x)) * 100.0
    return float(res.x[0]), float(e.mean()), float(e.max())


def rows(context: int, version: str, host_s: float) -> list[tuple[str, int, int, float, float, float, float, float]]:
    """(phase, batch, k or prompt tokens, fit s, op model s, op profile s, roofline s, roofline op s) per shape."""
    from calibration.op_profile import SYSTEMS, build_profile
    from calibration.op_step import OpStepModel
    from calibration.op_tables import load_op_tables
    from simulator.costs.latency import resolve_profile
    from simulator.costs.roofline import RooflineProfile
    from simulator.costs.step_model import StepShape
    from traces.catalog import get_gpu, get_model

    model, gpu = get_model("llama3.1-8b"), get_gpu("h100-80gb")
    fit = resolve_profile("llama3.1-8b-h100-specbench")
    ops = OpStepModel(model, gpu, load_op_tables(SYSTEMS[gpu.name], version))
    prof = build_profile(model.name, gpu.name, 1, version)
    roof = RooflineProfile(model, gpu)
    roof_op = RooflineProfile(model, gpu, overlap="op", host_s=host_s)
    out = []
    for b in BATCHES:
        for k in KS:
            s = StepShape(decode_seqs=b, draft_tokens=b * k, decode_kv=b * (context + k))
            args = (b, b * (k + 1), b * (context + k))
            out.append(("decode" if k == 0 else "verify", b, k, fit.step_time(*args), ops.shape_time(s),
                        prof.shape_time(s), roof.step_time(*args), roof_op.step_time(*args)))
    for t in PROMPTS:
        s = StepShape(0, 0, 0, prefill_seqs=1, prefill_tokens=t, prefill_kv=t, prefill_attn=t * t)
        out.append(("prefill", 1, t, fit.step_time(1, t, t), ops.shape_time(s), prof.shape_time(s),
                    roof.step_time(1, t, t), roof_op.step_time(1, t, t)))
    return out


def eagle_rows(context: int, version: str, k: int) -> list[tuple[int, float, float]]:
    """(batch, op-model seconds of k EAGLE-3 head forwards, the release's EAGLE fit) per batch
    (calibration/op_drafter.py's head of Llama-3.1-8B on one H100)."""
    from calibration.op_drafter import drafter_step_model, drafting_phase_s
    from calibration.op_profile import SYSTEMS
    from calibration.op_tables import load_op_tables
    from simulator.costs.latency import resolve_profile
    from traces.catalog import get_gpu, get_model

    model, gpu = get_model("llama3.1-8b"), get_gpu("h100-80gb")
    head = drafter_step_model("eagle3", model, gpu, load_op_tables(SYSTEMS[gpu.name], version))
    fit = resolve_profile("eagle3-llama3.1-8b-h100-specbench")
    return [(b, drafting_phase_s(head, b, k, b * context), fit.step_time(b, b * k, b * context)) for b in BATCHES]


def host_fit(version: str):
    """calibration/op_drafter.py's host term re-fitted on the `version` tables (HostFit)."""
    from calibration.op_drafter import drafter_step_model, fit_proposal_host_s
    from calibration.op_profile import SYSTEMS
    from calibration.op_tables import load_op_tables
    from simulator.costs.latency import resolve_profile
    from traces.catalog import get_gpu, get_model

    gpu = get_gpu("h100-80gb")
    head = drafter_step_model("eagle3", get_model("llama3.1-8b"), gpu, load_op_tables(SYSTEMS[gpu.name], version))
    return fit_proposal_host_s(head, resolve_profile("eagle3-llama3.1-8b-h100-specbench"))


def source_step_ratios(version: str) -> list[tuple[str, int, float, float, float]]:
    """(drafter, batch, AR step s, SD step s, SD / AR) of the published rows' setup (Llama-3.3-70B at TP 2 on H100,
    298 context tokens): target and drafter from the op tables (calibration/op_drafter.py), the drafter's host term
    and the release's step overhead on both sides."""
    from calibration.op_drafter import PROPOSAL_HOST_S, drafter_step_model, drafting_phase_s
    from calibration.op_profile import SYSTEMS
    from calibration.op_step import OpStepModel
    from calibration.op_tables import load_op_tables
    from simulator.costs.step_model import StepShape
    from simulator.reproductions.specbench import STEP_OVERHEAD_S
    from traces.catalog import get_gpu, get_model

    gpu, target = get_gpu("h100-80gb"), get_model("llama3.3-70b")
    ops = load_op_tables(SYSTEMS[gpu.name], version)
    step, c, out = OpStepModel(target, gpu, ops, tp=2), 298, []
    for method, k, drafter in (("eagle3", 3, None), ("draft_model", 7, get_model("llama3.2-1b"))):
        head = drafter_step_model(method, target, gpu, ops, 2, drafter)
        for b in (1, 32):
            ar = step.shape_time(StepShape(b, 0, b * c)) + STEP_OVERHEAD_S
            sd = (step.shape_time(StepShape(b, b * k, b * (c + k))) + drafting_phase_s(head, b, k, b * c)
                  + PROPOSAL_HOST_S + STEP_OVERHEAD_S)
            out.append((f"{method} k = {k}", b, ar, sd, sd / ar))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=1100, help="context tokens per decoding sequence")
    ap.add_argument("--version", default="0.24.0", help="vLLM version of the tables")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    host_s, host_mape, host_worst = fit_host_s()
    print(f"roofline overlap: op, fitted host_s = {host_s * 1e3:.3f} ms (decode/verify MAPE {host_mape:.1f}%, "
          f"worst {host_worst:.1f}%)")
    rs = rows(args.context, args.version, host_s)
    err = lambda a, f: 100.0 * (a / f - 1.0)
    if args.markdown:
        print("| phase | batch | k / prompt | fit ms | op model ms (err %) | op profile ms (err %) | roofline ms (err %) "
              "| roofline op ms (err %) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for ph, b, k, f, o, p, r, ro in rs:
        if args.markdown:
            print(f"| {ph} | {b} | {k} | {f * 1e3:.2f} | {o * 1e3:.2f} ({err(o, f):+.1f}) | {p * 1e3:.2f} "
                  f"({err(p, f):+.1f}) | {r * 1e3:.2f} ({err(r, f):+.1f}) | {ro * 1e3:.2f} ({err(ro, f):+.1f}) |")
        else:
            print(f"{ph:8s} B={b:4d} {k:5d}: fit {f * 1e3:7.2f} ms  ops {o * 1e3:7.2f} ({err(o, f):+6.1f}%)  "
                  f"profile {p * 1e3:7.2f} ({err(p, f):+6.1f}%)  roofline {r * 1e3:7.2f} ({err(r, f):+6.1f}%)  "
                  f"roofline op {ro * 1e3:7.2f} ({err(ro, f):+6.1f}%)")
    print("\nmean absolute error per phase, % of the fit (op model / op profile / roofline / roofline op):")
    for ph in ("decode", "verify", "prefill"):
        sel = [x for x in rs if x[0] == ph]
        m = [np.mean([abs(err(x[i], x[3])) for x in sel]) for i in (4, 5, 6, 7)]
        print(f"  {ph}: " + " / ".join(f"{v:.1f}" for v in m) + f"  ({len(sel)} shapes)")
    hf = host_fit(args.version)
    print(f"\nEAGLE-3 drafting phase (k head forwards, op model, calibration/op_drafter.py) against the release's "
          f"EAGLE fit; host term fitted over {hf.points} shapes (batch 1..128, k = 1..5, context 512/1,100/2,048): "
          f"{hf.host_s * 1e3:.3f} ms per phase (residuals {hf.residual_min_s * 1e3:.3f}..{hf.residual_max_s * 1e3:.3f} "
          f"ms; forwards + host within {hf.mean_abs_error_percent:.1f}% of the fit on average):")
    resid = []
    for k in (1, 3, 5):
        for b, o, f in eagle_rows(args.context, args.version, k):
            resid.append(f - o)
            print(f"  k = {k} B = {b:4d}: op model {o * 1e3:6.3f} ms  + host {(o + hf.host_s) * 1e3:6.3f} ms  fit "
                  f"{f * 1e3:6.3f} ms ({100.0 * ((o + hf.host_s) / f - 1.0):+5.1f}%)  residual {(f - o) * 1e3:6.3f} ms")
    print(f"  residual at k = 1, 3, 5: mean {np.mean(resid) * 1e3:.3f} ms, range {min(resid) * 1e3:.3f}.."
          f"{max(resid) * 1e3:.3f} ms")
    print("\nverify / decode at batch 32 and 128 (fit / op model / op profile / roofline / roofline op):")
    by = {(x[0] != "prefill", x[1], x[2]): x for x in rs}
    for b in (32, 128):
        for k in KS[1:]:
            v, d = by[(True, b, k)], by[(True, b, 0)]
            print(f"  B = {b} k = {k}: " + " / ".join(f"{v[i] / d[i]:.2f}" for i in (3, 4, 5, 6, 7)))
    print("\nSD step / AR step, Llama-3.3-70B TP 2 on H100 at 298 context tokens (the published rows' setup; the "
          "source's own figures: EAGLE-3 1.56 and draft model 2.7 at concurrency 32, draft model 1.52 at 1):")
    for what, b, ar, sd, r in source_step_ratios(args.version):
        print(f"  {what}, batch {b}: AR {ar * 1e3:.2f} ms, SD {sd * 1e3:.2f} ms, ratio {r:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
