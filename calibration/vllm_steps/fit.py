"""Latency profiles from vLLM step records: the target's step (decode, verify, prefill) and each drafter.

Every recorded step is one measurement (no averaging: the fit sees the spread). The target's time is
the engine step (schedule() start to update_from_output() end) minus the drafter's propose time, so it
includes the scheduler and the hand-off to the worker, as a served request experiences them. The
drafter's time is the model runner's propose call. Each step also carries its shape (decode sequences, drafts,
KV, prompt chunks) for the structured step model (simulator/costs/step_model.py); `fit_target` is the one target fit
`validate` and `calibrate vllm` use, with MAPE and bias per phase (decode, verify, prefill).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from calibration.vllm_steps.acceptance import join_ids
from calibration.vllm_steps.records import StepLog, StepRecord
from traces.errors import TraceFormatError, shorten
from simulator.costs.latency import LatencyProfile, LinearProfile, Measurement, Provenance, fit_linear
from simulator.costs.step_model import StepShape, holdout_split, phase_bias, phase_mape, select_form

PHASES = ("decode", "verify", "prefill")
GROUP_FIELD = "group"  # a measurement's extra field: the client group its step ran in (None: several)


def phase(st: StepRecord) -> str:
    """prefill if any request is in a prompt (or recompute) chunk, else verify if any drafts, else decode."""
    if st.prefill_tokens:
        return "prefill"
    return "verify" if st.drafted_tokens else "decode"


def step_shape(st: StepRecord) -> StepShape:
    """The step's decode/verify and prompt-chunk parts, as simulator/costs/step_model.py prices them."""
    dec = [r for r in st.requests if not r.is_prefill]
    pre = [r for r in st.requests if r.is_prefill]
    return StepShape(decode_seqs=len(dec), draft_tokens=sum(r.drafted for r in dec),
                     decode_kv=sum(r.computed_before + r.scheduled for r in dec), prefill_seqs=len(pre),
                     prefill_tokens=sum(r.scheduled for r in pre),
                     prefill_kv=sum(r.computed_before + r.scheduled for r in pre),
                     prefill_attn=sum(r.scheduled * (r.computed_before + r.scheduled) for r in pre))


def _extra(st: StepRecord, ph: str, run: str) -> dict[str, Any]:
    return {"phase": ph, "run": run, "step": st.step, "prefill_tokens": st.prefill_tokens,
            "drafted_tokens": st.drafted_tokens, "num_waiting": st.num_waiting, "shape": asdict(step_shape(st))}


def _load_per_core(st: StepRecord, log: StepLog) -> float | None:
    """The step's 1-minute load average per core (Measurement.load's convention)."""
    cores = log.header.get("cpu_count") or os.cpu_count() or 1
    return None if st.load is None else round(st.load / cores, 3)


def step_group(st: StepRecord, group_of: Mapping[str, str]) -> str | None:
    """The one client group (engine request id -> group name) whose requests the step scheduled; None when it
    scheduled requests of several (requests of no named group, e.g. a warm-up or another client, do not count)."""
    names = {group_of[r.id] for r in st.requests if r.id in group_of}
    return names.pop() if len(names) == 1 else None


def engine_groups(log: StepLog, groups: list[dict[str, Any]], where: str,
                  skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Engine request id -> the name of the client group (a load generator's calibration group or load level)
    that sent it; the groups' `requests` carry the client ids, joined to the log's engine ids."""
    named = [g for g in groups if g["name"] not in skip]
    engine_ids = sorted({r.id for s in log.steps for r in s.requests})
    ids = join_ids([str(q["id"]) for g in named for q in g["requests"]], engine_ids, where)
    return {ids[str(q["id"])]: g["name"] for g in named for q in g["requests"]}


def target_measurements(log: StepLog, run: str, after: float = 0.0,
                        group_of: Mapping[str, str] | None = None) -> list[Measurement]:
    """One measurement per engine step that began at or after `after` (wall time; skips warm-up); with
    `group_of`, each records the client group it ran in (`extra.group`, `step_group`), for the speed drift
    between groups (calibration/vllm_steps/drift.py)."""
    out = []
    for st in log.steps:
        if st.wall_start < after:
            continue
        ph = phase(st)
        seconds = st.duration - (st.draft_seconds or 0.0)
        extra = _extra(st, ph, run)
        if group_of is not None:
            extra[GROUP_FIELD] = step_group(st, group_of)
        out.append(Measurement(num_seqs=len(st.requests), batched_tokens=st.batched_tokens, kv_tokens=st.kv_tokens,
                               seconds=seconds, load=_load_per_core(st, log), extra=extra))
    return out


def draft_measurements(log: StepLog, run: str, after: float = 0.0) -> list[Measurement]:
    """One measurement per step whose propose call was timed: sequences it drafted for (those past their
    prompt), the step's tokens (the drafter reads them) and context."""
    out = []
    for st in log.steps:
        if st.wall_start < after or st.draft_seconds is None:
            continue
        seqs = sum(1 for r in st.requests if r.emitted)
        if seqs == 0:
            continue
        out.append(Measurement(num_seqs=seqs, batched_tokens=st.batched_tokens, kv_tokens=st.kv_tokens,
                               seconds=st.draft_seconds, load=_load_per_core(st, log),
                               extra=_extra(st, phase(st), run)))
    return out


def busy_gaps(log: StepLog) -> np.ndarray:
    """Seconds between the end of a step and the start of the next one while a request runs through both
    (the engine core's loop: outputs out, inputs in); idle gaps between arrivals are left out."""
    gaps = []
    for a, b in zip(log.steps, log.steps[1:]):
        live = {r.id for r in a.requests if not r.finished}
        if live & {r.id for r in b.requests}:
            gaps.append(b.wall_start - (a.wall_start + a.duration))
    return np.array(gaps, dtype=float)


def fit_target(ms: list[Measurement], name: str, model_name: str, prov: Provenance, step_model: str = "structured",
               seed: int = 0) -> tuple[LatencyProfile, dict[str, Any]]:
    """The target's step profile from engine-step measurements, least squares on absolute error so the fitted
    time is unbiased in total (means are what validation compares; relative weighting fits below the mean of
    noisy steps): `structured` (simulator/costs/step_model.py, form chosen on held-back steps) or `linear`. The one
    fit `validate` and `calibrate vllm` use."""
    loads = [m.load for m in ms if m.load is not None]
    report: dict[str, Any] = {"steps": len(ms), "median_load": float(np.median(loads)) if loads else None,
                              "step_model": step_model}
    if step_model == "structured":
        prof, held = select_form(name, ms, seed=seed, model=model_name, provenance=prov)
        report.update(form=prof.form, held_back=held)
    elif step_model == "linear":
        prof = fit_linear(name, ms, model=model_name, weighting="absolute", provenance=prov).profile
        part, back = holdout_split(ms, 0.25, seed)  # the structured fit's split: the two compare on equal terms
        if len(part) >= 2 and back:
            p = fit_linear(name, part, weighting="absolute").profile
            report.update(form="linear", held_back={"held_back_steps": len(back), "fit_steps": len(part),
                                                    "seed": seed, "form": "linear", "forms": {"linear": {
                                                        "held_back_mape_percent": phase_mape(p, back),
                                                        "held_back_bias_percent": phase_bias(p, back)}}})
    else:
        raise ValueError(f"step_model: expected 'structured' or 'linear', got {shorten(step_model)}")
    report.update(coefficients=dict(prof.coefficients), mape_percent=phase_mape(prof, ms),
                  bias_percent=phase_bias(prof, ms))
    return prof, report


MIN_DRAFT_POINTS = 4


def fit_drafter(log: StepLog, label: str, name: str, model_name: str, prov: Provenance,
                where: str) -> tuple[LinearProfile, dict[str, Any]]:
    """The drafter's propose time per engine step (vLLM's proposer runs once per step over the step's tokens:
    an `engine_step` draft cost), linear least squares on absolute error; too few timed calls is an error."""
    dms = draft_measurements(log, label)
    if len(dms) < MIN_DRAFT_POINTS:
        raise TraceFormatError(where, f"only {len(dms)} timed propose calls for {label}; the worker file is "
                               "missing or the run was too short", field="draft_seconds")
    f = fit_linear(name, dms, model=model_name, weighting="absolute", provenance=prov)
    return f.profile, {"coefficients": f.profile.coefficients, "mape_percent": round(f.mape, 2), "steps": len(dms),
                       "cost_kind": "engine_step"}


def step_overhead(log: StepLog) -> tuple[float, int]:
    """(mean gap between busy steps in seconds, gaps counted): the engine loop's time between steps."""
    gaps = busy_gaps(log)
    return (float(gaps.mean()) if gaps.size else 0.0), int(gaps.size)
