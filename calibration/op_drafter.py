"""A drafter's forwards priced from the same measured per-op tables as the target, plus its stated host work.

`python -m calibration.op_drafter --method eagle3 --target llama3.1-8b --gpu h100-80gb --tp 1 --out FILE.yaml`
(`--method draft_model --drafter llama3.2-1b` for a draft model) writes a `structured` profile of one drafting
forward, fitted to calibration/op_step.py's prices on the drafter's own shapes, with provenance; an experiment uses
it as `{kind: autoregressive, profile: FILE.yaml, host_s: PROPOSAL_HOST_S}` (`drafter_cost`).

- Draft model (vLLM method `draft_model`): the catalog model it is, on `tp` GPUs (vLLM's default: the target's TP),
  every op of calibration/op_step.py at m = B (one token per sequence per forward): small GEMMs and the TP
  all-reduces at the draft model's shapes.
- EAGLE / EAGLE-3 head: one decoder layer of the target's shape and the LM head over the head's vocabulary
  (EAGLE-3: its draft vocabulary, `EAGLE3_DRAFT_VOCAB`; EAGLE: the target's), on the target's TP (vLLM builds the
  head with the target's parallel config: 2 all-reduces per layer + 1). EAGLE-3 adds the fusion of three target
  hidden states (a GEMM 3 x hidden -> hidden) and a QKV projection over embedding + hidden (2 x hidden in); EAGLE
  the fusion 2 x hidden -> hidden. The fusion is priced in every proposal step (vLLM runs it once per drafting phase,
  over the step's verified tokens, which this also leaves out: the two go opposite ways).
- A drafting phase of k proposals = k forwards of B sequences, the KV growing by B each (the `autoregressive` draft
  cost rule, simulator/engine/rules/pricing.py, which prices the profile this writes).
- Prompt pass (the drafter's own pass over new prompts): the engine asks the profile at (sequences, prompt tokens,
  KV); the grid records the op model's price of that prompt as a prefill there, so the profile answers it.
- Host work: `PROPOSAL_HOST_S` per drafting phase that proposes (the draft cost's `host_s`): no GPU table holds
  it. Fitted by `fit_proposal_host_s`: the SpecDecode-Bench release's measured EAGLE-3 fit for Llama-3.1-8B on one
  H100 (vLLM 0.10.1.1, built-in profile `eagle3-llama3.1-8b-h100-specbench`, its whole drafting phase) less k head
  forwards of this op model (h100_sxm vLLM 0.24.0 tables), least squares over batch 1..128, k = 1..5, context
  512 / 1,100 / 2,048 tokens per sequence (a constant: the mean residual); borrowed by every other drafter.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from calibration.op_step import OpLookup, OpStepModel
from simulator.costs.profile_records import Measurement, Provenance
from simulator.costs.step_model import StepShape, StructuredProfile
from simulator.engine.rules.pricing import DRAFT_AUTOREGRESSIVE, DraftTerms, draft_time
from traces.catalog import GpuSpec, ModelSpec, get_gpu, get_model

METHODS = ("draft_model", "eagle", "eagle3")
EAGLE3_DRAFT_VOCAB = 32000  # draft_vocab_size of the published EAGLE-3 heads (Llama-3.1-8B, Llama-3.3-70B)
# fitted by fit_proposal_host_s on the h100_sxm vLLM 0.24.0 tables (tests/calibration/test_op_drafter.py re-fits it)
PROPOSAL_HOST_S = 0.00111
HOST_FIT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
HOST_FIT_KS = (1, 2, 3, 4, 5)
HOST_FIT_CONTEXTS = (512, 1100, 2048)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (256, 1024, 4096)
PROMPTS = ((1, 128), (1, 512), (1, 2048), (4, 256), (16, 256))  # (sequences, prompt tokens each)


def head_spec(target: ModelSpec, method: str) -> ModelSpec:
    """The EAGLE / EAGLE-3 head of `target` as a one-layer model of its shape with the head's vocabulary."""
    vocab = EAGLE3_DRAFT_VOCAB if method == "eagle3" else target.vocab_size
    return replace(target, name=f"{method}-head-{target.name}", num_layers=1, vocab_size=vocab,
                   tie_word_embeddings=False, mtp_layers=0)


def drafter_step_model(method: str, target: ModelSpec, gpu: GpuSpec, ops: OpLookup, tp: int = 1,
                       drafter: ModelSpec | None = None) -> OpStepModel:
    """One drafting forward's op model: the draft model itself, or the target's EAGLE / EAGLE-3 head (module doc)."""
    if method not in METHODS:
        raise ValueError(f"drafter method: expected one of {METHODS}, got {method!r}")
    if method == "draft_model":
        if drafter is None:
            raise ValueError("drafter method 'draft_model' needs the draft model (a catalog name)")
        return OpStepModel(drafter, gpu, ops, tp=tp)
    h = target.hidden_size
    if method == "eagle3":
        return OpStepModel(head_spec(target, method), gpu, ops, tp=tp, fusion_in=3 * h, qkv_in=2 * h)
    return OpStepModel(head_spec(target, method), gpu, ops, tp=tp, fusion_in=2 * h)


def drafting_phase_s(step: OpStepModel, seqs: int, k: int, kv_tokens: int) -> float:
    """GPU seconds of k proposal forwards for `seqs` sequences over `kv_tokens`: the engine's autoregressive rule
    (rules/pricing.draft_time) applied to the op model itself."""
    return draft_time(DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True), step, seqs, seqs * k, k, kv_tokens, 0.0)


@dataclass(frozen=True)
class HostFit:
    """The fitted host seconds per drafting phase and the residuals it leaves (seconds)."""

    host_s: float
    points: int
    residual_min_s: float  # smallest (measured fit - op forwards) over the points
    residual_max_s: float
    mean_abs_error_percent: float  # |op forwards + host_s - fit| / fit, mean over the points


def fit_proposal_host_s(step: OpStepModel, measured: Any, batches: Iterable[int] = HOST_FIT_BATCHES,
                        ks: Iterable[int] = HOST_FIT_KS, contexts: Iterable[int] = HOST_FIT_CONTEXTS) -> HostFit:
    """The constant host seconds per drafting phase that best closes measured(B, B k, B c) - k op forwards in least
    squares (their mean), over every batch B, k and context c; `measured` prices a whole phase (`whole_proposal`)."""
    fit, ops = [], []
    for b in batches:
        for k in ks:
            for c in contexts:
                fit.append(measured.step_time(b, b * k, b * c))
                ops.append(drafting_phase_s(step, b, k, b * c))
    resid = [float(f - o) for f, o in zip(fit, ops)]
    host = max(0.0, sum(resid) / len(resid))
    err = [abs(o + host - f) / f * 100.0 for f, o in zip(fit, ops)]
    return HostFit(host, len(resid), min(resid), max(resid), float(sum(err) / len(err)))


def drafter_points(step: OpStepModel, batches: Iterable[int] = BATCHES, contexts: Iterable[int] = CONTEXTS,
                   prompts: Iterable[tuple[int, int]] = PROMPTS) -> list[Measurement]:
    """The shapes the engine asks a drafter's profile for, each with the op model's price: one-token forwards of B
    sequences over B x c KV, and prompt passes (asked as (sequences, prompt tokens, KV), priced as a prefill)."""
    from calibration.op_profile import measurement

    out = [measurement(s, step.shape_time(s)) for b in batches for c in contexts
           for s in (StepShape(decode_seqs=b, draft_tokens=0, decode_kv=b * c),)]
    for n, p in prompts:
        asked = StepShape.uniform(n, n * p, n * p)
        runs = StepShape(0, 0, 0, prefill_seqs=n, prefill_tokens=n * p, prefill_kv=n * p, prefill_attn=n * p * p)
        out.append(measurement(asked, step.shape_time(runs)))
    return out


def build_drafter_profile(method: str, target: str, gpu: str, tp: int = 1, version: str = "0.24.0",
                          backend: str = "vllm", *, drafter: str | None = None, system: str | None = None,
                          root: str | Path | None = None, ops: OpLookup | None = None,
                          name: str | None = None) -> StructuredProfile:
    """The measured-ops profile of one drafting forward of `method` (for `target`, or the draft model `drafter`)
    on `tp` x `gpu`, from the tables of `backend` `version` (`ops` replaces them), with provenance."""
    from calibration.op_profile import SYSTEMS, fit_points
    from calibration.op_tables import load_op_tables, package_version

    spec, g = get_model(target), get_gpu(gpu)
    dspec = get_model(drafter) if drafter else None
    if ops is None:
        if system is None:
            if g.name not in SYSTEMS:
                raise ValueError(f"measured-ops drafter profile: no aiconfigurator-core system for GPU {g.name!r} "
                                 f"(known: {', '.join(SYSTEMS)}); pass system=")
            system = SYSTEMS[g.name]
        ops = load_op_tables(system, version, backend, root)
    step = drafter_step_model(method, spec, g, ops, tp, dspec)
    files = getattr(ops, "files", {})
    read = ", ".join(f"{k}: {v}" for k, v in files.items()) or "hand-made tables"
    what = (f"draft model {dspec.name}" if method == "draft_model" else
            f"{method} head of {spec.name}: 1 decoder layer of its shape, LM head over {step.model.vocab_size} tokens, "
            f"fusion GEMM {step.fusion_in} -> {spec.hidden_size}" + (f", QKV input {step.qkv_in}" if step.qkv_in else ""))
    prov = Provenance("measured-ops", backend=f"{backend} {version}",
                      device=f"{tp}x {getattr(ops, 'device', '') or g.name}", dtype="bf16",
                      versions={"aiconfigurator-core": package_version() or "not installed"},
                      notes=f"one drafting forward of the {what}, at TP {tp}, from measured per-op tables ({read}) "
                            "by calibration/op_step.py's rules at the drafter's shapes (GEMMs at m = sequences, "
                            "all-reduces of sequences x hidden), fitted to the structured step model; prompt passes "
                            "priced as prefills. GPU work only: the proposer's host work is the draft cost's host_s "
                            f"(calibration/op_drafter.py PROPOSAL_HOST_S = {PROPOSAL_HOST_S * 1e3:.2f} ms per "
                            "drafting phase, fitted to the SpecDecode-Bench Llama-3.1-8B / H100 EAGLE-3 fit)")
    label = dspec.name if dspec else f"{method}-head-{spec.name}"
    return fit_points(name or f"{label}-{g.name}-tp{tp}-{backend}{version}-ops", step.model.name,
                      drafter_points(step), prov, "calibration/op_drafter.py drafter_points")


def drafter_cost(profile: str | dict[str, Any], host_s: float = PROPOSAL_HOST_S) -> dict[str, Any]:
    """The experiment's draft cost entry for a measured-ops drafter profile: k forwards plus the host term."""
    return {"kind": "autoregressive", "profile": profile, "host_s": host_s}


def main(argv: list[str] | None = None) -> int:
    from calibration.op_profile import SYSTEMS
    from simulator.costs.latency import save_profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", required=True, choices=METHODS)
    ap.add_argument("--target", required=True, help="catalog name of the target model (an EAGLE head's shape)")
    ap.add_argument("--drafter", default=None, help="draft_model: catalog name of the draft model")
    ap.add_argument("--gpu", required=True, help=f"catalog GPU name ({', '.join(SYSTEMS)})")
    ap.add_argument("--tp", type=int, default=1, help="the drafter's tensor parallelism (vLLM: the target's)")
    ap.add_argument("--version", default="0.24.0", help="backend version of the tables")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--out", required=True, help="profile YAML to write (never overwritten)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        print(f"{out}: exists; not overwritten (choose another --out)", file=sys.stderr)
        return 2
    try:
        prof = build_drafter_profile(args.method, args.target, args.gpu, args.tp, args.version, args.backend,
                                     drafter=args.drafter)
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as e:
        print(f"measured-ops drafter profile: {e}", file=sys.stderr)
        return 2
    save_profile(prof, out)
    print(f"wrote {out}: form {prof.form}, grid MAPE {prof.fit['grid_mape_percent_by_phase']}, worst "
          f"{prof.fit['grid_max_error_percent']}%; use it as {drafter_cost(str(out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
