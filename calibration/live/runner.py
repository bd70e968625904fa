"""The live runner (`draftsim calibrate live`): AR, SD, SD on both devices and two-device PSD served
with continuous batching on real models (batch 1: `--max-num-seqs 1 --clients 1`), against the simulator.

Placements (CPU; "device" = one pinned core with its own torch threads):
- `ar`, `sd:<drafter>:<k>` and policy modes: target and drafters in this process on the target core;
- `sd2:<drafter>:<k>`: the same SD on both cores (2 threads): SD at PSD's device count;
- `psd:<drafter>:<k>`: the drafter in its own process on the draft core, the target on the target core.
Every mode serves the same prompts with the same batching rules (calibration/live/batched.py). The
latency profiles are measured first with the same forward, in the same processes, cores and thread
counts, at the batch sizes the run can reach (up to max_num_seqs) and the query lengths its modes verify;
or they are supplied (`profile`: a measured profile set such as the packaged CPU one, no measuring); the
acceptance trace is measured on the AR run's outputs (its teacher-forced target pass also
checks that they are the target's greedy outputs); the simulator predicts every mode through the
scenario builder with the same batch rules (`prefill: separate`, same max_num_seqs, same arrivals).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.live.batched_profile import Grid, measure_points
from calibration.latency_sweep import machine_load
from calibration.live.records import (METRICS, LiveMode, LiveRun, TraceSetting, drafter_name, drafter_usage,
                                     live_metrics, measure_traces, refuse_oracle, rel_err, sim_metrics,
                                     step_mismatches)
from calibration.live.batched import BatchedServer, LocalDrafts, ServeConfig, poisson_arrivals
from policies.registry import PolicySpec, policy_spec

PLACEMENTS = {"ar": "one", "sd": "one", "sd2": "both", "psd": "psd"}


@dataclass(frozen=True)
class BatchMode:
    """One live configuration: name, parsed policy (policies/registry.py PolicySpec; None: AR) and placement (one
    core, both cores, PSD)."""

    name: str
    policy: PolicySpec | None
    placement: str  # one | both | psd


@dataclass
class BatchedLiveConfig:
    """What a live batched comparison runs."""

    workload: str
    num_requests: int = 8
    max_new_tokens: int = 48
    modes: list[str] = field(default_factory=lambda: ["ar", "sd:int8:2", "sd2:int8:2", "psd:int8:2"])
    policies: list[dict[str, Any]] = field(default_factory=list)  # SD modes (one core) driven by these specs
    drafters: list[str] = field(default_factory=list)  # drafter specs policies may choose from
    target: str = "smollm2-135m-instruct"
    max_num_seqs: int = 4
    clients: int = 4  # closed loop; 0 with arrival_rate > 0: open loop Poisson
    arrival_rate: float = 0.0
    target_core: int = 0
    draft_core: int = 1
    seed: int = 0
    grid: Grid = field(default_factory=Grid)
    profile: str | None = None  # supplied profiles instead of measuring: target PROFILE, drafters PROFILE-<name>
    int8_kernels: bool = False  # draft live with torch's fbgemm int8 copy (the trace keeps the W8A8 copy's numerics)
    warmup: bool = True  # serve the first prompt a few tokens per mode before timing (kernels, allocations)
    reply_timeout_s: float = 300.0
    psd_step_hook: Any = None  # tests: called with the PSD server after every PSD step (e.g. to kill the drafter)


def parse_batch_modes(modes: list[str], policies: list[dict[str, Any]]) -> tuple[list[BatchMode], list[str]]:
    """`ar`, `sd|sd2|psd:<drafter spec>:<k>` and SD policy modes; returns them and the drafter specs needed."""
    out, specs = [], []
    for text in modes:
        text = text.strip()
        if text == "ar":
            out.append(BatchMode("AR", None, "one"))
            continue
        head, _, rest = text.partition(":")
        spec, _, k_text = rest.rpartition(":")
        if head not in ("sd", "sd2", "psd") or not spec or not k_text.isdigit() or int(k_text) < 1:
            raise ValueError(f"--modes: {text!r} is not 'ar' or '<sd|sd2|psd>:<drafter>:<k>' with k >= 1 "
                             "(e.g. sd:int8:2, sd2:int8:2, psd:int8:2, sd:ngram:3)")
        name = drafter_name(spec)
        label = {"sd": "SD", "sd2": "SD-2dev", "psd": "PSD"}[head]
        fixed = policy_spec({"name": "fixed", "drafter": name, "k": int(k_text)}, f"--modes {text!r}")
        out.append(BatchMode(f"{label}-{name}-k{k_text}", fixed, PLACEMENTS[head]))
        specs.append(spec)
    for i, spec in enumerate(policies):
        refuse_oracle(spec, f"--policy {i + 1}")
        pol = policy_spec({k: v for k, v in spec.items() if k != "label"}, f"--policy {i + 1}")
        out.append(BatchMode(str(spec.get("label", spec["name"])), pol, "one"))
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"live modes must have distinct names, got {names} (give a policy a 'label')")
    if not out or out[0].policy is not None:
        out = [BatchMode("AR", None, "one")] + [m for m in out if m.name != "AR"]
    return out, specs


def _placement_setup(cfg: BatchedLiveConfig, placement: str) -> tuple[set[int] | None, int]:
    """(cores, threads) of the target's process for a placement."""
    cores = {cfg.target_core, cfg.draft_core} if placement == "both" else {cfg.target_core}
    return cores, len(cores)


def _pin_self(cores: set[int] | None, threads: int) -> None:
    import torch

    if cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads)


@dataclass(frozen=True)
class ModelProfiles:
    """One model's step-time profiles for one placement: linear and table forms, where they came from."""

    linear: Any  # simulator.costs.latency.LinearProfile
    table: Any  # TableProfile (the linear one where no table form exists: n-gram, supplied without -table)
    source: str  # "measured" or "supplied <name>"
    fit: dict[str, Any] | None = None  # the fit report of measured points
    points: tuple = ()

    def of(self, kind: str) -> Any:
        """The `linear` or `table` profile."""
        return self.linear if kind == "linear" else self.table


def _fitted(name: str, model_name: str, points, placement: str) -> ModelProfiles:
    """Linear and table profiles fitted by the simulator's own code, with provenance."""
    from calibration.latency_sweep import fit_profiles, provenance

    prov = provenance("hf-batched", "cpu", "float32", notes=f"live batched forward; placement {placement}")
    f = fit_profiles(name, model_name, points, prov)
    return ModelProfiles(f.linear, f.table, "measured", f.report, tuple(points))


def profile_grid(cfg: BatchedLiveConfig, modes: list[BatchMode]) -> Grid:
    """The configured grid cut to the batches this run can form (<= max_num_seqs, which is kept) and widened to
    the query lengths its fixed modes verify (k + 1), so the profile is measured where it is used."""
    from dataclasses import replace

    batches = sorted({b for b in cfg.grid.batch_sizes if b <= cfg.max_num_seqs} | {cfg.max_num_seqs})
    prefill = sorted({b for b in cfg.grid.prefill_batches if b <= cfg.max_num_seqs}) or [1]
    given_k = [m.policy.given().get("k") for m in modes if m.policy is not None]
    ks = {int(k) + 1 for k in given_k if isinstance(k, int)}
    return replace(cfg.grid, batch_sizes=tuple(batches), prefill_batches=tuple(prefill),
                   query_tokens=tuple(sorted(set(cfg.grid.query_tokens) | ks)))


def supplied_profiles(name: str, placements: set[str], drafters) -> dict[str, dict[str, ModelProfiles]]:
    """Profiles measured elsewhere (e.g. the packaged CPU set): target `name`, drafter d `name-d`, with the
    `-table` form where one exists; the same for every placement."""
    from simulator.costs.latency import builtin_profiles, resolve_profile
    from traces.errors import TraceFormatError

    def one(n: str) -> ModelProfiles:
        try:
            lin = resolve_profile(n)
        except (TraceFormatError, OSError) as e:
            raise ValueError(f"--profile {name}: no profile {n!r} for this model ({e})") from None
        tab = resolve_profile(n + "-table") if (n + "-table") in builtin_profiles() else lin
        return ModelProfiles(lin, tab, f"supplied {n}")

    prof = {"target": one(name), **{d: one(f"{name}-{d}") for d in drafters}}
    return {pl: prof for pl in placements}


def measure_profiles(cfg: BatchedLiveConfig, placements: set[str], lm, drafters, eos, remote, grid: Grid | None = None
                     ) -> dict[str, dict[str, ModelProfiles]]:
    """placement -> {"target": profiles, drafter name: profiles}: each measured where that placement runs it."""
    from calibration.live.batched_kv import BatchedLM
    from calibration.models.drafters import LookupDrafter, ModelDrafter
    from calibration.latency_sweep import SweepConfig, sweep_ngram
    from simulator.costs.latency import fit_linear

    grid = grid or cfg.grid
    out: dict[str, dict[str, ModelProfiles]] = {}
    ngram_points = {}
    for placement in sorted(placements):
        cores, threads = _placement_setup(cfg, placement)
        _pin_self(cores, threads)
        prof = {"target": _fitted(f"live-{placement}-target", cfg.target, measure_points(BatchedLM(lm.model, eos),
                                                                                         grid), placement)}
        for name, d in drafters.items():
            if isinstance(d, ModelDrafter):
                if placement == "psd":
                    pts = remote.sweep(name, grid)
                else:
                    pts = measure_points(BatchedLM(d.model, eos), grid, query_tokens=(1,))
                prof[name] = _fitted(f"live-{placement}-{name}", name, pts, placement)
            elif isinstance(d, LookupDrafter):
                if name not in ngram_points:
                    sc = SweepConfig(batch_sizes=list(grid.batch_sizes), context_lens=list(grid.context_lens),
                                     repeats=grid.repeats, warmup=grid.warmup)
                    ngram_points[name] = sweep_ngram(d.ngram, sc)
                lin = fit_linear(f"live-{name}", ngram_points[name]).profile
                prof[name] = ModelProfiles(lin, lin, "measured", None, tuple(ngram_points[name]))
        out[placement] = prof
    return out


def draft_costs_for(prof: dict[str, ModelProfiles], drafters, kind: str = "linear") -> dict:
    """DraftCost per drafter from a placement's profiles (n-gram: one lookup pass per proposal)."""
    from calibration.models.drafters import LookupDrafter
    from simulator.costs.draft_cost import DraftCost

    return {name: DraftCost(kind="whole_proposal" if isinstance(d, LookupDrafter) else "autoregressive",
                            profile=prof[name].of(kind)) for name, d in drafters.items()}


def simulate(cfg: BatchedLiveConfig, mode: BatchMode, bundle, target_profile, costs, arrivals) -> Any:
    """The simulator's prediction of one live mode: same requests, batching rules and arrivals."""
    from simulator.scenario import drafter_kinds, inputs_from_traces, make_scenario, simulate
    from simulator.server_config import PSDConfig, RunSpec, ServerConfig

    reqs = bundle.requests
    inputs = inputs_from_traces(reqs, bundle.drafter_names, clients=cfg.clients,
                                arrival=None if cfg.clients else np.asarray(arrivals, dtype=float),
                                kinds=drafter_kinds(bundle))
    need = max(r.prompt_len + r.output_len for r in reqs) + 64
    sim_mode = "psd" if mode.placement == "psd" else ("sd" if mode.policy else "ar")
    psd = PSDConfig.split(cfg.max_num_seqs) if sim_mode == "psd" else None
    run = RunSpec(name=mode.name, mode=sim_mode, policy=mode.policy, psd=psd)
    server = ServerConfig(target_profile=target_profile, max_num_seqs=cfg.max_num_seqs,
                          max_num_batched_tokens=4096, kv_capacity_tokens=4 * need * cfg.max_num_seqs,
                          prefill="separate", scheduler="draftsim")  # the live runner's prefill-only steps
    return simulate(make_scenario(run, server, costs, cfg.seed), inputs, live=True)


def _phase_means(steps, kinds: tuple[str, ...]) -> dict[str, float]:
    """Mean draft and verify seconds per step of the given kinds (the t and V of the pipeline formula)."""
    sel = [s for s in steps if s.kind in kinds]
    if not sel:
        return {"steps": 0, "draft_s": 0.0, "verify_s": 0.0}
    return {"steps": len(sel), "draft_s": float(np.mean([s.draft_s for s in sel])),
            "verify_s": float(np.mean([s.verify_s for s in sel]))}


@dataclass
class LiveModels:
    """Already loaded models (tests): target (`.model` at least), drafters, EOS ids, the drafter process's
    setup (its loader builds the same drafters) and the prompts as (id, token ids)."""

    target: Any
    drafters: dict
    eos: list[int]
    setup: Any
    prompts: list[tuple[str, list[int]]]
    categories: list[str] | None = None


def run_batched_live(cfg: BatchedLiveConfig, *, models: LiveModels | None = None, progress: bool = True
                     ) -> dict[str, Any]:
    """Profiles, live runs of every mode, traces, simulator predictions; returns the report (JSON-ready,
    plus `_bundle`)."""
    import sys

    import torch

    from calibration.live.draft_engine import DraftEngine
    from calibration.models.drafters import LookupDrafter, with_int8_kernels
    from calibration.live.psd_workers import PSDServer, RemoteDrafts
    from policies.registry import make_policy

    def say(msg):
        if progress:
            print(f"draftsim calibrate live: {msg} (load/core {machine_load():.2f})", file=sys.stderr, flush=True)

    if cfg.num_requests < 1 or cfg.max_new_tokens < 2:
        raise ValueError("calibrate live: --requests must be >= 1 and --max-new-tokens >= 2")
    if cfg.clients == 0 and cfg.arrival_rate <= 0:
        raise ValueError("live-batched: give --clients N > 0 (closed loop) or --arrival-rate R > 0 (open loop)")
    modes, specs = parse_batch_modes(cfg.modes, cfg.policies)
    serve = ServeConfig(max_new_tokens=cfg.max_new_tokens, max_num_seqs=cfg.max_num_seqs, clients=cfg.clients,
                        arrivals=None if cfg.clients else poisson_arrivals(cfg.num_requests, cfg.arrival_rate, cfg.seed))
    placements = {md.placement for md in modes}
    supplied = None  # checked before any model loads
    if cfg.profile:
        supplied = supplied_profiles(cfg.profile, placements, dict.fromkeys(map(drafter_name, [*specs, *cfg.drafters])))
    m = models if models is not None else load_live_models(cfg, specs)
    if len(m.prompts) < cfg.num_requests:
        raise ValueError(f"workload {cfg.workload!r} has {len(m.prompts)} prompts, fewer than {cfg.num_requests}")
    ids = m.prompts[:cfg.num_requests]
    categories = (m.categories or [""] * len(m.prompts))[:cfg.num_requests]
    drafters, eos = m.drafters, m.eos  # the traces are measured with these
    live_drafters = with_int8_kernels(drafters, m.target.model) if cfg.int8_kernels else drafters
    names = tuple(drafters)
    lookups = {n: d for n, d in drafters.items() if isinstance(d, LookupDrafter)}
    affinity0 = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    threads0 = torch.get_num_threads()
    remote, failure, profiles = None, None, {}
    runs: list[tuple[BatchMode, Any, list, float, float, float]] = []
    old_term = _sigterm_raises()
    try:
        if "psd" in placements:
            remote = RemoteDrafts(m.setup)
            say(f"drafter process {remote.info['pid']} ready on cores {remote.info['affinity']}")
        if cfg.profile:
            say(f"latency profiles supplied: {cfg.profile} (target) and {cfg.profile}-<drafter>")
            profiles = supplied
        else:
            grid = profile_grid(cfg, modes)
            say(f"measuring latency profiles with the live forward: batches {grid.batch_sizes}, queries "
                f"{grid.query_tokens}, contexts {grid.context_lens}, prefills {grid.prefill_lens}")
            profiles = measure_profiles(cfg, placements, m.target, live_drafters, eos, remote, grid)
        cap = max(len(p) for _, p in ids) + cfg.max_new_tokens + 64

        def server_for(mode: BatchMode, prompts, serving: ServeConfig, policy, hook=None):
            if mode.placement == "psd":
                return PSDServer(m.target.model, eos, prompts, serving, policy, remote, names, lookups, categories,
                                 step_hook=hook)
            return BatchedServer(m.target.model, eos, prompts, serving, policy,
                                 LocalDrafts(DraftEngine(live_drafters, eos, cap)), names, lookups, categories)

        for mode in modes:
            _pin_self(*_placement_setup(cfg, mode.placement))
            if cfg.warmup:  # first calls allocate and pick kernels; keep them out of the timings
                warm = ServeConfig(max_new_tokens=min(8, cfg.max_new_tokens), max_num_seqs=1, clients=1)
                server_for(mode, [(f"warmup-{ids[0][0]}", ids[0][1])], warm,
                           make_policy(mode.policy, seed=cfg.seed) if mode.policy else None).serve()
            policy = make_policy(mode.policy, where=f"mode {mode.name}", seed=cfg.seed) if mode.policy else None
            before, t0 = machine_load(), time.perf_counter()
            server = server_for(mode, ids, serve, policy, cfg.psd_step_hook)
            reqs = server.serve()
            wall = time.perf_counter() - t0
            runs.append((mode, server, reqs, before, machine_load(), wall))
            say(f"{mode.name}: {len(reqs)}/{len(ids)} requests in {wall:.1f} s")
            if mode.placement == "psd" and server.psd.failure:
                failure = {"mode": mode.name, "error": server.psd.failure,
                           "finished_requests": [r.id for r in reqs],
                           "unfinished_requests": [rid for rid, _ in ids if rid not in {r.id for r in reqs}]}
                say(f"drafter failure: {server.psd.failure}; stopping after writing what finished")
                break
    finally:
        if remote is not None:
            remote.close()
        _restore_sigterm(old_term)
        if affinity0 is not None:
            os.sched_setaffinity(0, affinity0)
        torch.set_num_threads(threads0)
    return _assemble(cfg, runs, profiles, drafters, m.target, ids, categories, eos, failure, serve, remote, say)


def _sigterm_raises():
    """SIGTERM ends the run like Ctrl-C (cleanup runs, the drafter process is stopped); returns the old handler."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    return signal.signal(signal.SIGTERM, stop)


def _restore_sigterm(old) -> None:
    import signal

    if old is not None:
        signal.signal(signal.SIGTERM, old)


def load_live_models(cfg: BatchedLiveConfig, specs: list[str]) -> LiveModels:
    """The packaged target, its drafters, the workload's prompts; the drafter process loads the same."""
    from calibration.models.hf_backend import encode_prompt
    from calibration.models.loading import load_target
    from calibration.prompts import workload_prompts
    from calibration.live.psd_workers import DrafterSetup

    all_specs = tuple(dict.fromkeys(list(specs) + list(cfg.drafters)))
    loaded = load_target(cfg.target, all_specs)
    setup = DrafterSetup(loader_args=(cfg.target, all_specs, cfg.int8_kernels), cores=(cfg.draft_core,), threads=1,
                         reply_timeout_s=cfg.reply_timeout_s)
    chosen = list(workload_prompts(cfg.workload, cfg.seed))
    return LiveModels(loaded.lm, loaded.drafters, loaded.eos, setup,
                      [(p.id, encode_prompt(loaded.lm, p.text)) for p in chosen], [p.category or "" for p in chosen])


def _assemble(cfg, runs, profiles, drafters, lm, ids, categories, eos, failure, serve, remote, say):
    """Lossless checks, traces, predictions and the JSON-ready report."""
    import platform

    import torch
    import transformers

    ar = next(r for r in runs if r[0].policy is None)
    reference = [r.output_ids for r in ar[2]]
    n_tok = cfg.max_new_tokens
    setting = TraceSetting(cfg.workload, cfg.target, "live-batched", n_tok, cfg.seed)
    bundle, mismatches = measure_traces(setting, lm, drafters, ids, reference, categories, eos)
    say("traces measured; simulating")
    rows: dict[str, Any] = {}
    for mode, server, reqs, before, after, wall in runs:
        by_id = {r.id: r for r in reqs}
        bad = [rid for (rid, _), want in zip(ids, reference) if rid in by_id and by_id[rid].output_ids != want]
        prof = profiles[mode.placement]
        row: dict[str, Any] = {
            "policy": None if mode.policy is None else mode.policy.model_dump(mode="json"),
            "placement": mode.placement, "requests_finished": len(reqs),
            "lossless": not bad and len(reqs) == len(ids), "differing_requests": bad, "wall_s": wall,
            "load_per_core": {"before": round(before, 3), "after": round(after, 3)},
            "steps_total": int(sum(len(r.steps) for r in reqs)),
            "server_steps": _step_counts(server.steps),
            "phases_per_step": _phase_means(server.steps, ("decode", "verify", "psd", "psd-fallback")),
            "drafter_usage_live": drafter_usage(LiveRun(LiveMode(mode.name, mode.policy), reqs, before, after))}
        if len(reqs) == len(ids):
            live_run = LiveRun(LiveMode(mode.name, mode.policy), reqs, before, after)
            meas = live_metrics(live_run, n_tok)
            preds = {}
            for kind in ("linear", "table"):
                tgt = prof["target"].of(kind)
                costs = draft_costs_for(prof, {d: drafters[d] for d in server.used}, kind)
                res = simulate(cfg, mode, bundle, tgt, costs, serve.arrivals)
                preds[kind] = (sim_metrics(res), res)
            row.update({
                "measured": meas, "predicted": preds["linear"][0],
                "error_percent": {k: rel_err(preds["linear"][0][k], meas[k]) for k in METRICS},
                "predicted_table_profiles": preds["table"][0],
                "error_percent_table_profiles": {k: rel_err(preds["table"][0][k], meas[k]) for k in METRICS},
                "steps_live": [len(r.steps) for r in reqs],
                "steps_simulated": [int(x) for x in preds["linear"][1].requests.decode_steps],
                "steps_differing_from_trace": step_mismatches(bundle, live_run),
                "psd_fallback_steps_simulated": preds["linear"][1].extras.get("psd_fallback_steps"),
                "steps_trace_walk": trace_walk_steps(bundle, mode),
                "accepted_per_step_live": float(np.mean([s.accepted for r in reqs for s in r.steps])),
            })
            row["steps_equal_trace_walk"] = (None if row["steps_trace_walk"] is None
                                             else row["steps_trace_walk"] == row["steps_live"])
            if mode.placement != "psd":  # PSD's phases overlap on two devices; no per-phase sum to compare
                mine = {d: drafters[d] for d in server.used}
                row["phases"] = phase_check(server.steps, prof, mine, "linear")
                row["phases_table_profiles"] = phase_check(server.steps, prof, mine, "table")
        if mode.placement == "psd":
            row["psd_fallback_steps_live"] = server.psd.fallback_steps
        rows[mode.name] = row
    prof_doc = {pl: {name: {"source": p.source, "linear": p.linear.name, "coefficients": p.linear.coefficients,
                            "table": p.table.name, "fit": p.fit}
                     for name, p in prof.items()} for pl, prof in profiles.items()}
    return {
        "setting": {"workload": cfg.workload, "requests": len(ids), "max_new_tokens": n_tok, "target": cfg.target,
                    "max_num_seqs": cfg.max_num_seqs, "clients": cfg.clients, "arrival_rate": cfg.arrival_rate,
                    "arrivals": list(serve.arrivals) if serve.arrivals else None, "prefill": "separate",
                    "greedy": True, "eos_forbidden": True, "target_core": cfg.target_core,
                    "draft_core": cfg.draft_core, "cpu_count": os.cpu_count(), "seed": cfg.seed,
                    "profiles": cfg.profile or "measured", "warmup": cfg.warmup,
                    "int8_live": "fbgemm (torch dynamic int8)" if cfg.int8_kernels else "W8A8 per-token (the trace's)",
                    "drafter_process": None if remote is None else remote.info},
        "versions": {"python": platform.python_version(), "torch": str(torch.__version__),
                     "transformers": str(transformers.__version__), "numpy": np.__version__,
                     "platform": platform.platform()},
        "note": ("wall-clock side shares the CPU with other processes (load per core recorded per mode). "
                 "Reference outputs = the AR run's; target_argmax_mismatches counts tokens where they differ from "
                 "the target's teacher-forced greedy choice. A model drafter's prompt pass runs after the target's in "
                 "the prefill step; the simulator prices it on the target's core in SD and on the draft core in PSD."),
        "target_argmax_mismatches": mismatches,
        "drafter_failure": failure,
        "profiles": prof_doc,
        "modes": rows,
        "requests": {m.name: [_request_row(r) for r in reqs] for m, _, reqs, *_ in runs},
        "_bundle": bundle,
    }


def trace_walk_steps(bundle, mode: BatchMode) -> list[int] | None:
    """Verify steps per request the trace predicts for a fixed policy by the replay rule alone (AR: one token per
    step after the prefill's); None for other policies. A check on the engine's replay, not a second copy of it."""
    from traces.acceptance import FIRST_DRAFT_POSITION
    from traces.walk import walk_positions

    if mode.policy is not None and mode.policy.name != "fixed":
        return None
    out = []
    for r in bundle.requests:
        if mode.policy is None:
            out.append(max(r.output_len - FIRST_DRAFT_POSITION, 0))
        else:
            t = r.drafters[mode.policy.drafter]
            out.append(len(walk_positions(t.acc_len, mode.policy.k, t.proposal_len)))
    return out


def phase_check(steps, prof: dict[str, ModelProfiles], drafters, kind: str) -> dict[str, float]:
    """Measured seconds per phase over the steps that ran, beside what the profiles price those same steps at
    (the simulator's batch shapes: target verify of n + proposed tokens over the contexts; each drafter charged
    once for its own rows; prefill over the prompts). Shows which phase a prediction error comes from."""
    from calibration.models.drafters import LookupDrafter

    costs = draft_costs_for(prof, drafters, kind)
    target = prof["target"].of(kind)
    out = dict.fromkeys(("verify_measured_s", "verify_predicted_s", "draft_measured_s", "draft_predicted_s",
                         "prefill_measured_s", "prefill_predicted_s", "drafter_prefill_measured_s",
                         "drafter_prefill_predicted_s"), 0.0)
    for st in steps:
        if st.kind == "prefill":
            out["prefill_measured_s"] += st.verify_s
            out["prefill_predicted_s"] += target.step_time(st.num_seqs, st.prompt_tokens, st.prompt_tokens)
            out["drafter_prefill_measured_s"] += st.draft_s
            continue
        if st.kind not in ("decode", "verify") or not st.rows:
            continue
        verify = target.step_time(len(st.rows), sum(1 + r.proposed for r in st.rows), sum(r.context_len for r in st.rows))
        out["verify_measured_s"] += st.verify_s
        out["verify_predicted_s"] += verify
        out["draft_measured_s"] += st.draft_s
        for d in sorted({r.drafter for r in st.rows if r.drafter is not None and r.proposed > 0}):
            mine = [r for r in st.rows if r.drafter == d and r.proposed > 0]
            out["draft_predicted_s"] += costs[d].draft_time(len(mine), sum(r.proposed for r in mine),
                                                            max(r.k for r in mine), sum(r.context_len for r in mine),
                                                            verify)
    used = [d for d in drafters if not isinstance(drafters[d], LookupDrafter)]
    if used:  # SD modes run their model drafters' prompt pass in the prefill step
        out["drafter_prefill_predicted_s"] = sum(
            costs[d].prefill_time(st.num_seqs, st.prompt_tokens, st.prompt_tokens)
            for st in steps if st.kind == "prefill" for d in used)
    return out


def _step_counts(steps) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in steps:
        out[s.kind] = out.get(s.kind, 0) + 1
    return out


def _request_row(r) -> dict[str, Any]:
    return {"id": r.id, "prompt_len": r.prompt_len, "tokens": len(r.output_ids), "output_ids": r.output_ids,
            "arrival_s": r.start,
            "ttft_s": r.ttft_s, "e2e_s": r.e2e_s, "verify_steps": len(r.steps),
            "accepted_per_step": [s.accepted for s in r.steps], "emitted_per_step": [s.emitted for s in r.steps],
            "drafters": [s.drafter for s in r.steps]}
