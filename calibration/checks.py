"""Checks built into the harness: trace consistency, and real SD on real models against the trace.

`real_sd_check` runs speculative decoding for real (the drafter proposes k tokens step by step,
the target verifies them greedily) from a bundle's prompts, with the engine's convention: the prefill
emits output token 0, decoding starts at position 1. It must emit exactly the target's recorded greedy
tokens (lossless) and, at every step, as many tokens as the replay rule predicts from the trace
(`traces.acceptance.replay_step`). Any difference is an error naming the request and position.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.models.drafters import LookupDrafter, ModelDrafter
from traces.acceptance import replay_step
from traces.bundle import RequestTrace, TraceBundle


class CalibrationCheckError(RuntimeError):
    """A measured trace disagrees with what it claims; the message names request and position."""


@dataclass
class StepRecord:
    """One real SD step: where it started, tokens emitted, and what the trace predicted."""

    position: int
    emitted: int
    predicted: int


def check_trace_consistency(bundle: TraceBundle) -> None:
    """Structural rules of greedy traces: bounds, and for model drafters acc_len[p+1] = acc_len[p] - 1 after a match."""
    greedy = bundle.meta.temperature == 0
    for r in bundle.requests:
        n = r.output_len
        for name, t in r.drafters.items():
            limit = n - np.arange(n) + 1
            bad = np.flatnonzero(t.acc_len > limit)
            if bad.size:
                p = int(bad[0])
                raise CalibrationCheckError(f"request {r.id}, drafter {name}, position {p}: acc_len {t.acc_len[p]} "
                                            f"exceeds the {n - p} tokens left plus one")
            kind = bundle.meta.drafters[name].kind
            if greedy and kind != "ngram":
                a = t.acc_len
                bad = np.flatnonzero((a[:-1] >= 2) & (a[1:] != a[:-1] - 1))
                if bad.size:
                    p = int(bad[0])
                    raise CalibrationCheckError(
                        f"request {r.id}, drafter {name}, position {p}: acc_len {a[p]} then {a[p + 1]} "
                        f"(a greedy run must shrink by one)")


def _argmax_last(model, ids: list[int], n_last: int, first_pos: int, min_new: int, eos: list[int]) -> list[int]:
    """Greedy next tokens at the last n_last positions; EOS forbidden at output positions < min_new."""
    import torch

    dev = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids], dtype=torch.long, device=dev)).logits[0, -n_last:].float().clone()
        for j in range(n_last):
            if first_pos + j < min_new and eos:
                logits[j, eos] = float("-inf")
    return logits.argmax(-1).tolist()


def real_sd_request(target_model, drafter, req: RequestTrace, k: int, *, min_new_tokens: int,
                    eos: list[int], strict: bool = True) -> list[StepRecord]:
    """Run greedy SD with a real drafter and target on one request; raise on any mismatch with the trace.

    Output tokens must always equal the target's (lossless). With strict=False a step whose count
    differs from the trace is recorded (StepRecord.emitted != predicted) instead of raised.
    """
    if req.prompt_token_ids is None or req.output_token_ids is None:
        raise CalibrationCheckError(f"request {req.id}: the bundle has no token ids; real SD needs them")
    prompt, want = list(req.prompt_token_ids), list(req.output_token_ids)
    trace = req.drafters[drafter.name]
    n = len(want)
    got = _argmax_last(target_model, prompt, 1, 0, min_new_tokens, eos) if n else []  # the prefill: token 0
    if got[:1] != want[:1]:
        raise CalibrationCheckError(f"request {req.id}, position 0: the target's prefill gave token {got[0]}, "
                                    f"its recorded greedy output has {want[0]}")
    steps = []
    while len(got) < n:
        p = len(got)
        ctx = prompt + got
        if isinstance(drafter, LookupDrafter):
            props = drafter.ngram.propose(ctx, k)
        else:
            props = []
            for j in range(k):
                props += _argmax_last(drafter.model, ctx + props, 1, p + j, min_new_tokens, eos)
        verdict = _argmax_last(target_model, ctx + props, len(props) + 1, p, min_new_tokens, eos)
        acc = next((j for j in range(len(props)) if props[j] != verdict[j]), len(props))
        emitted = props[:acc] + [verdict[acc]]
        emitted = emitted[: n - p]
        for j, tok in enumerate(emitted):
            if tok != want[p + j]:
                raise CalibrationCheckError(f"request {req.id}, position {p + j}: real SD emitted token {tok}, the "
                                            f"target's greedy output has {want[p + j]} (not lossless)")
        prop_len = None if trace.proposal_len is None else int(trace.proposal_len[p])
        predicted = replay_step(int(trace.acc_len[p]), k, prop_len, p, n).emitted
        if predicted != len(emitted) and strict:
            raise CalibrationCheckError(f"request {req.id}, drafter {drafter.name}, position {p}, k={k}: real SD "
                                        f"emitted {len(emitted)} tokens, the trace predicts {predicted}")
        steps.append(StepRecord(p, len(emitted), predicted))
        got += emitted
    return steps


def real_sd_check(bundle: TraceBundle, target, drafter: ModelDrafter | LookupDrafter, k: int, *,
                  num_requests: int, min_new_tokens: int, strict: bool = True) -> dict:
    """Real SD on the first num_requests requests; returns a summary or raises CalibrationCheckError.

    With strict=False, steps whose emitted count differs from the trace are counted and listed
    (request, position, emitted, predicted) instead of raised; lossless violations always raise.
    """
    from calibration.models.hf_backend import eos_ids

    if drafter.name not in bundle.meta.drafters:
        raise ValueError(f"drafter {drafter.name!r} is not in the bundle (has {bundle.drafter_names})")
    if bundle.meta.temperature != 0:
        raise ValueError("the real-SD check compares greedy runs; the bundle was measured at temperature "
                         f"{bundle.meta.temperature}")
    eos = eos_ids(target)
    total_steps = total_tokens = 0
    mismatches = []
    for req in bundle.requests[:num_requests]:
        steps = real_sd_request(target.model, drafter, req, k, min_new_tokens=min_new_tokens, eos=eos, strict=strict)
        total_steps += len(steps)
        total_tokens += sum(s.emitted for s in steps)
        mismatches += [(req.id, s.position, s.emitted, s.predicted) for s in steps if s.emitted != s.predicted]
    return {"requests": min(num_requests, len(bundle.requests)), "steps": total_steps, "tokens": total_tokens,
            "tokens_per_step": total_tokens / max(total_steps, 1), "drafter": drafter.name, "k": k,
            "count_mismatches": mismatches}


def check_bundle(bundle: TraceBundle, drafter_spec: str, k: int, *, num_requests: int, threads: int = 1,
                 device: str = "cpu", strict: bool = True) -> dict | None:
    """`draftsim calibrate check`: the trace's consistency, then (num_requests > 0) real SD of `drafter_spec` on the
    bundle's target; returns real_sd_check's result (None when no request is run). Raises CalibrationCheckError."""
    from calibration.models.loading import load_target

    check_trace_consistency(bundle)
    if num_requests <= 0:
        return None
    loaded = load_target(bundle.meta.target, [drafter_spec], device=device, threads=threads)
    gen = bundle.meta.source.get("generation", {})
    return real_sd_check(bundle, loaded.lm, next(iter(loaded.drafters.values())), k, num_requests=num_requests,
                         min_new_tokens=int(gen.get("min_new_tokens", 0)), strict=strict)
