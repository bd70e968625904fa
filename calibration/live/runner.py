"""The live-batched runner (`draftsim calibrate live-batched`): AR, SD, SD on both devices and two-device PSD served
with continuous batching on real models (batch 1: `--max-num-seqs 1 --clients 1`), against the simulator.

Placements (CPU; "device" = one pinned core with its own torch threads):
- `ar`, `sd:<drafter>:<k>` and policy modes: target and drafters in this process on the target core;
- `sd2:<drafter>:<k>`: the same SD on both cores (2 threads): SD at PSD's device count;
- `psd:<drafter>:<k>`: the drafter in its own process on the draft core, the target on the target core.
Every mode serves the same prompts with the same batching rules (calibration/live/batched.py). The
latency profiles are measured first with the same forward, in the same processes, cores and thread
counts; the acceptance trace is measured on the AR run's outputs (its teacher-forced target pass also
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
from calibration.live.records import (METRICS, LiveMode, LiveRun, TraceSetting, drafter_name, drafter_usage,
                                     live_metrics, machine_load, measure_traces, refuse_oracle, rel_err,
                                     sim_metrics, step_mismatches)
from calibration.live.batched import BatchedServer, LocalDrafts, ServeConfig, poisson_arrivals

PLACEMENTS = {"ar": "one", "sd": "one", "sd2": "both", "psd": "psd"}


@dataclass(frozen=True)
class BatchMode:
    """One live configuration: name, policy (None: AR) and placement (one core, both cores, PSD)."""

    name: str
    policy: dict[str, Any] | None
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
    reply_timeout_s: float = 300.0
    psd_step_hook: Any = None  # tests: called with the PSD server after every PSD step (e.g. to kill the drafter)


def parse_batch_modes(modes: list[str], policies: list[dict[str, Any]]) -> tuple[list[BatchMode], list[str]]:
    """`ar`, `sd|sd2|psd:<drafter spec>:<k>` and SD policy modes; returns them and the drafter specs needed."""
    from policies.registry import make_policy

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
        out.append(BatchMode(f"{label}-{name}-k{k_text}", {"name": "fixed", "drafter": name, "k": int(k_text)},
                             PLACEMENTS[head]))
        specs.append(spec)
    for i, spec in enumerate(policies):
        refuse_oracle(spec, f"--policy {i + 1}")
        pol = {k: v for k, v in spec.items() if k != "label"}
        make_policy(pol, where=f"--policy {i + 1}")
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


def _fitted(name: str, model_name: str, points, placement: str) -> dict[str, Any]:
    """Linear and table profiles fitted by the simulator's own code, with provenance."""
    from calibration.latency_sweep import fit_profiles, provenance

    prov = provenance("hf-batched", "cpu", "float32", notes=f"live batched forward; placement {placement}")
    return {"fitted": fit_profiles(name, model_name, points, prov), "points": points}


def measure_profiles(cfg: BatchedLiveConfig, placements: set[str], lm, drafters, eos, remote) -> dict[str, dict]:
    """placement -> {"target": fitted, drafter name: fitted}: each measured where that placement runs it."""
    from calibration.live.batched_kv import BatchedLM
    from calibration.models.drafters import LookupDrafter, ModelDrafter
    from calibration.latency_sweep import SweepConfig, sweep_ngram
    from simulator.latency import fit_linear

    out: dict[str, dict] = {}
    ngram_points = {}
    for placement in sorted(placements):
        cores, threads = _placement_setup(cfg, placement)
        _pin_self(cores, threads)
        prof = {"target": _fitted(f"live-{placement}-target", cfg.target, measure_points(BatchedLM(lm.model, eos),
                                                                                         cfg.grid), placement)}
        for name, d in drafters.items():
            if isinstance(d, ModelDrafter):
                if placement == "psd":
                    pts = remote.sweep(name, cfg.grid)
                else:
                    pts = measure_points(BatchedLM(d.model, eos), cfg.grid, query_tokens=(1,))
                prof[name] = _fitted(f"live-{placement}-{name}", name, pts, placement)
            elif isinstance(d, LookupDrafter):
                if name not in ngram_points:
                    sc = SweepConfig(batch_sizes=list(cfg.grid.batch_sizes), context_lens=list(cfg.grid.context_lens),
                                     repeats=cfg.grid.repeats, warmup=cfg.grid.warmup)
                    ngram_points[name] = sweep_ngram(d.ngram, sc)
                prof[name] = {"fitted": None, "points": ngram_points[name],
                              "linear": fit_linear(f"live-{name}", ngram_points[name]).profile}
        out[placement] = prof
    return out


def draft_costs_for(prof: dict[str, dict], drafters, kind: str = "linear") -> dict:
    """DraftCost per drafter from a placement's measured profiles (n-gram: one lookup pass per proposal)."""
    from calibration.models.drafters import LookupDrafter
    from simulator.draft_cost import DraftCost

    costs = {}
    for name, d in drafters.items():
        if isinstance(d, LookupDrafter):
            costs[name] = DraftCost(kind="whole_proposal", profile=prof[name]["linear"])
        else:
            costs[name] = DraftCost(kind="autoregressive", profile=getattr(prof[name]["fitted"], kind))
    return costs


def simulate(cfg: BatchedLiveConfig, mode: BatchMode, bundle, target_profile, costs, arrivals) -> Any:
    """The simulator's prediction of one live mode: same requests, batching rules and arrivals."""
    from simulator.scenario import inputs_from_traces, make_scenario, simulate
    from simulator.server_config import PSDConfig, RunSpec, ServerConfig

    reqs = bundle.requests
    inputs = inputs_from_traces(reqs, bundle.drafter_names, clients=cfg.clients,
                                arrival=None if cfg.clients else np.asarray(arrivals, dtype=float))
    need = max(r.prompt_len + r.output_len for r in reqs) + 64
    sim_mode = "psd" if mode.placement == "psd" else ("sd" if mode.policy else "ar")
    psd = PSDConfig(sub_batch_max_num_seqs=max(1, cfg.max_num_seqs // 2)) if sim_mode == "psd" else None
    run = RunSpec(name=mode.name, mode=sim_mode, policy=mode.policy, psd=psd)
    server = ServerConfig(target_profile=target_profile, max_num_seqs=cfg.max_num_seqs,
                          max_num_batched_tokens=4096, kv_capacity_tokens=4 * need * cfg.max_num_seqs,
                          prefill="separate")
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

    from calibration.models.draft_engine import DraftEngine
    from calibration.models.drafters import LookupDrafter
    from calibration.live.psd_workers import PSDServer, RemoteDrafts
    from policies.registry import make_policy

    def say(msg):
        if progress:
            print(f"draftsim live-batched: {msg} (load/core {machine_load():.2f})", file=sys.stderr, flush=True)

    if cfg.num_requests < 1 or cfg.max_new_tokens < 2:
        raise ValueError("live-batched: --requests must be >= 1 and --max-new-tokens >= 2")
    if cfg.clients == 0 and cfg.arrival_rate <= 0:
        raise ValueError("live-batched: give --clients N > 0 (closed loop) or --arrival-rate R > 0 (open loop)")
    modes, specs = parse_batch_modes(cfg.modes, cfg.policies)
    serve = ServeConfig(max_new_tokens=cfg.max_new_tokens, max_num_seqs=cfg.max_num_seqs, clients=cfg.clients,
                        arrivals=None if cfg.clients else poisson_arrivals(cfg.num_requests, cfg.arrival_rate, cfg.seed))
    m = models if models is not None else load_live_models(cfg, specs)
    if len(m.prompts) < cfg.num_requests:
        raise ValueError(f"workload {cfg.workload!r} has {len(m.prompts)} prompts, fewer than {cfg.num_requests}")
    ids = m.prompts[:cfg.num_requests]
    categories = (m.categories or [""] * len(m.prompts))[:cfg.num_requests]
    drafters, eos = m.drafters, m.eos
    names = tuple(drafters)
    lookups = {n: d for n, d in drafters.items() if isinstance(d, LookupDrafter)}
    placements = {md.placement for md in modes}
    affinity0 = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    threads0 = torch.get_num_threads()
    remote, failure, profiles = None, None, {}
    runs: list[tuple[BatchMode, Any, list, float, float, float]] = []
    old_term = _sigterm_raises()
    try:
        if "psd" in placements:
            remote = RemoteDrafts(m.setup)
            say(f"drafter process {remote.info['pid']} ready on cores {remote.info['affinity']}")
        say("measuring latency profiles with the live forward")
        profiles = measure_profiles(cfg, placements, m.target, drafters, eos, remote)
        for mode in modes:
            _pin_self(*_placement_setup(cfg, mode.placement))
            policy = make_policy(mode.policy, where=f"mode {mode.name}", seed=cfg.seed) if mode.policy else None
            before, t0 = machine_load(), time.perf_counter()
            if mode.placement == "psd":
                server = PSDServer(m.target.model, eos, ids, serve, policy, remote, names, lookups, categories,
                                   step_hook=cfg.psd_step_hook)
            else:
                cap = max(len(p) for _, p in ids) + cfg.max_new_tokens + 64
                server = BatchedServer(m.target.model, eos, ids, serve, policy, LocalDrafts(DraftEngine(drafters, eos, cap)),
                                       names, lookups, categories)
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
    setup = DrafterSetup(loader_args=(cfg.target, all_specs), cores=(cfg.draft_core,), threads=1,
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
            "policy": mode.policy, "placement": mode.placement, "requests_finished": len(reqs),
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
                tgt = getattr(prof["target"]["fitted"], kind)
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
            })
        if mode.placement == "psd":
            row["psd_fallback_steps_live"] = server.psd.fallback_steps
        rows[mode.name] = row
    prof_doc = {pl: {name: ({"linear": p["fitted"].linear.coefficients, "fit": p["fitted"].report}
                            if p.get("fitted") is not None else {"linear": p["linear"].coefficients})
                     for name, p in prof.items()} for pl, prof in profiles.items()}
    return {
        "setting": {"workload": cfg.workload, "requests": len(ids), "max_new_tokens": n_tok, "target": cfg.target,
                    "max_num_seqs": cfg.max_num_seqs, "clients": cfg.clients, "arrival_rate": cfg.arrival_rate,
                    "arrivals": list(serve.arrivals) if serve.arrivals else None, "prefill": "separate",
                    "greedy": True, "eos_forbidden": True, "target_core": cfg.target_core,
                    "draft_core": cfg.draft_core, "cpu_count": os.cpu_count(), "seed": cfg.seed,
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


def _step_counts(steps) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in steps:
        out[s.kind] = out.get(s.kind, 0) + 1
    return out


def _request_row(r) -> dict[str, Any]:
    return {"id": r.id, "prompt_len": r.prompt_len, "tokens": len(r.output_ids), "output_ids": r.output_ids,
            "arrival_s": r.start,
            "ttft_s": r.ttft_s, "e2e_s": r.e2e_s, "verify_steps": len(r.steps),
            "accepted_per_step": [s.accepted for s in r.steps], "drafters": [s.drafter for s in r.steps]}
