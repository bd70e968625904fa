"""A `structured` step profile of a catalog model on a catalog GPU from measured per-op tables.

`python -m calibration.op_profile --model llama3.1-8b --gpu h100-80gb --tp 1 --version 0.24.0 --out FILE.yaml`
prices a grid of decode, verify (k + 1 queries per sequence) and prompt-chunk steps with calibration/op_step.py
from aiconfigurator-core's tables (the optional extra `draftsim[aiconfigurator]`), fits the structured step model
(simulator/costs/step_model.py, the kind the engine prices by step shape) to those prices, keeps the form (linear or
roofline) with the lower mean error, and writes it with the grid, the fit's error per phase and the provenance:
tables read, their backend version, the package version and every assumption op_step.py adds.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from calibration.op_step import GRAPH_MAX_TOKENS, OpLookup, OpStepModel
from simulator.costs.profile_records import Measurement, Provenance
from simulator.costs.step_model import FORMS, StepShape, StructuredProfile, fit_structured, phase_mape
from traces.catalog import get_gpu, get_model

# draftsim's GPU catalog name -> aiconfigurator-core's system folder
SYSTEMS = {"h100-80gb": "h100_sxm", "h200-141gb": "h200_sxm", "a100-80gb": "a100_sxm", "l40s": "l40s"}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DRAFTS = (0, 1, 2, 3, 4, 5)
CONTEXTS = (256, 1024, 4096)
CHUNKS = (128, 512, 2048, 8192)
ASSUMPTIONS = ("verify attention = the larger of one KV pass (generation attention with (k+1) x query heads on the "
               "same KV heads; causal mask among the k+1 queries ignored) and the k+1 queries' compute as a prompt "
               "chunk of k+1 on the context (context attention x the chunk's share of causal pairs)",
               "prompt chunk attention = context attention of the whole context x the chunk's share of its causal pairs",
               "2 all-reduces per layer + 1 after the embedding, tokens x hidden bf16 elements (CUDA-graph kernel up "
               f"to {GRAPH_MAX_TOKENS} tokens, eager above)",
               "elementwise ops and embedding read: bytes over 0.8 x datasheet bandwidth (not in the tables)",
               "LM head at m = decode + draft tokens + one per prompt chunk",
               "sampling, rejection and host scheduling not priced (server step_overhead_s)",
               "table lookup: multilinear on the grid, linear beyond it, monotone in every axis")


def default_grid(batches: Iterable[int] = BATCHES, drafts: Iterable[int] = DRAFTS,
                 contexts: Iterable[int] = CONTEXTS, chunks: Iterable[int] = CHUNKS) -> list[StepShape]:
    """Decode/verify steps (every batch x drafts per sequence x context), lone prompt chunks from scratch and after
    a cached prefix, and one chunk joining a batch of decodes: the shapes a serving run prices."""
    out = []
    for b in batches:
        for k in drafts:
            for c in contexts:
                out.append(StepShape(decode_seqs=b, draft_tokens=b * k, decode_kv=b * (c + k)))
    for q in chunks:
        for cached in (0, q):
            L = cached + q
            out.append(StepShape(0, 0, 0, prefill_seqs=1, prefill_tokens=q, prefill_kv=L, prefill_attn=q * L))
        for b in (8, 64):
            c = 1024
            out.append(StepShape(b, 0, b * c, prefill_seqs=1, prefill_tokens=q, prefill_kv=q, prefill_attn=q * q))
    return out


def measurement(shape: StepShape, seconds: float) -> Measurement:
    """A grid point as a profile measurement (the step's shape in extra, as the structured fit reads it)."""
    return Measurement(num_seqs=shape.num_seqs, batched_tokens=shape.decode_seqs + shape.draft_tokens +
                       shape.prefill_tokens, kv_tokens=shape.decode_kv + shape.prefill_kv, seconds=seconds,
                       extra={"shape": asdict(shape)})


def fit_grid(name: str, step: OpStepModel, grid: list[StepShape], provenance: Provenance) -> StructuredProfile:
    """Fit both structured forms to the step model's prices on `grid`; keep the lower mean error over the grid."""
    return fit_points(name, step.model.name, [measurement(s, step.shape_time(s)) for s in grid], provenance,
                      "calibration/op_profile.py default_grid")


def fit_points(name: str, model: str, points: list[Measurement], provenance: Provenance,
               grid: str) -> StructuredProfile:
    """Fit both structured forms to priced grid points (`grid` says which); keep the lower mean error over them."""
    best = None
    tried = {}
    for form in FORMS:
        p = fit_structured(name, points, form, model=model, provenance=provenance, weighting="relative")
        err = phase_mape(p, points)
        tried[form] = err
        if best is None or err["all"] < best.fit["mape_percent"]:
            best = p
    worst = max(abs(best.shape_time(shape_of_point(m)) - m.seconds) / m.seconds * 100.0 for m in points)
    best.fit.update({"grid_mape_percent_by_phase": tried[best.form], "grid_max_error_percent": round(worst, 2),
                     "forms_tried": tried, "grid": f"{len(points)} steps of {grid}"})
    return best


def shape_of_point(m: Measurement) -> StepShape:
    return StepShape(**m.extra["shape"])


def build_profile(model: str, gpu: str, tp: int = 1, version: str = "0.24.0", backend: str = "vllm", *,
                  system: str | None = None, root: str | Path | None = None, ops: OpLookup | None = None,
                  grid: list[StepShape] | None = None, name: str | None = None) -> StructuredProfile:
    """The measured-ops profile of `model` on `tp` x `gpu` (tables of `backend` `version`; `ops` replaces them)."""
    from calibration.op_tables import load_op_tables, package_version

    spec, g = get_model(model), get_gpu(gpu)
    if ops is None:
        if system is None:
            if g.name not in SYSTEMS:
                raise ValueError(f"measured-ops profile: no aiconfigurator-core system for GPU {g.name!r} "
                                 f"(known: {', '.join(SYSTEMS)}); pass system=")
            system = SYSTEMS[g.name]
        ops = load_op_tables(system, version, backend, root)
    step = OpStepModel(spec, g, ops, tp=tp)
    files = getattr(ops, "files", {})
    read = ", ".join(f"{k}: {v}" for k, v in files.items()) or "hand-made tables"
    prov = Provenance("measured-ops", backend=f"{backend} {version}", device=f"{tp}x {getattr(ops, 'device', '') or g.name}",
                      dtype="bf16", versions={"aiconfigurator-core": package_version() or "not installed"},
                      notes=f"step prices from measured per-op tables ({read}), fitted to the structured step model. "
                            "Assumptions: " + "; ".join(ASSUMPTIONS))
    return fit_grid(name or f"{spec.name}-{g.name}-tp{tp}-{backend}{version}-ops", step, grid or default_grid(), prov)


def main(argv: list[str] | None = None) -> int:
    from simulator.costs.latency import save_profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="catalog model name")
    ap.add_argument("--gpu", required=True, help=f"catalog GPU name ({', '.join(SYSTEMS)})")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--version", default="0.24.0", help="backend version of the tables (older tables fill gaps)")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--out", required=True, help="profile YAML to write (never overwritten)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        print(f"{out}: exists; not overwritten (choose another --out)", file=sys.stderr)
        return 2
    try:
        prof = build_profile(args.model, args.gpu, args.tp, args.version, args.backend)
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as e:
        print(f"measured-ops profile: {e}", file=sys.stderr)
        return 2
    save_profile(prof, out)
    print(f"wrote {out}: form {prof.form}, grid MAPE by phase {prof.fit['grid_mape_percent_by_phase']}, "
          f"worst {prof.fit['grid_max_error_percent']}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
