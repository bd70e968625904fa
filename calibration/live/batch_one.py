"""`draftsim calibrate live`: run AR / SD modes and policies on the real models, and the simulator on the same requests.

Keep-it-simple setting, stated: one client, closed loop, think time 0, batch 1 (one request at a
time), every request emits exactly `max_new_tokens` (EOS forbidden), greedy verification, CPU
threads fixed with `torch.set_num_threads`. For each mode a fresh `Policy` object from
`policies.registry.make_policy` drives the real run (fixed, or a learning policy fed real
feedback); oracles are refused. The acceptance trace of the same prompts is then measured with
the teacher-forced pass of `calibration.collect` over the target's live greedy output, and the
simulator (`ServerSimulation`, measured CPU profiles) predicts the same runs. The wall-clock side
shares the machine with whatever else runs: the 1-minute load per core is recorded per mode.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibration.live.batch_one_decode import serve_request
from calibration.live.records import (METRICS, LiveMode, LiveRequest, LiveRun, TraceSetting, drafter_name,
                                     drafter_usage, live_metrics, machine_load, measure_traces, refuse_oracle,
                                     rel_err, sim_metrics, step_mismatches)
from policies.registry import make_policy

DEFAULT_PROFILE = "smollm2-135m-instruct-cpu"


@dataclass
class LiveConfig:
    """What a live comparison runs (see module docstring for the fixed setting)."""

    workload: str
    num_requests: int = 8
    modes: list[str] = field(default_factory=lambda: ["ar", "sd:int8:4", "sd:ngram:4"])
    policies: list[dict[str, Any]] = field(default_factory=list)  # extra modes driven by these policy specs
    drafters: list[str] = field(default_factory=list)  # drafter specs the policies may choose from
    max_new_tokens: int = 128
    target: str = "smollm2-135m-instruct"
    profile: str = DEFAULT_PROFILE  # target profile; drafters use <profile>-<drafter name>
    threads: int = 1
    seed: int = 0
    warmup: bool = True
    int8_kernels: bool = False  # draft live with torch's fbgemm int8 copy (what the shipped int8 profile timed)


def parse_modes(modes: list[str], policies: list[dict[str, Any]]) -> tuple[list[LiveMode], list[str]]:
    """Modes (`ar`, `sd:<drafter spec>:<k>`) and policy modes; returns them and the drafter specs they need."""
    out: list[LiveMode] = []
    specs: list[str] = []
    for text in modes:
        text = text.strip()
        if text == "ar":
            out.append(LiveMode("AR", None))
            continue
        head, _, rest = text.partition(":")
        spec, _, k_text = rest.rpartition(":")
        if head != "sd" or not spec or not k_text.isdigit() or int(k_text) < 1:
            raise ValueError(f"--modes: {text!r} is not 'ar' or 'sd:<drafter>:<k>' with k >= 1 "
                             "(e.g. sd:int8:4, sd:ngram:4, sd:layers:24:2)")
        name = drafter_name(spec)
        out.append(LiveMode(f"{name}-k{k_text}", {"name": "fixed", "drafter": name, "k": int(k_text)}))
        specs.append(spec)
    for i, spec in enumerate(policies):
        refuse_oracle(spec, f"--policy {i + 1}")
        policy = {k: v for k, v in spec.items() if k != "label"}
        make_policy(policy, where=f"--policy {i + 1}")  # parameters checked before any model loads
        out.append(LiveMode(str(spec.get("label", spec["name"])), policy))
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"live modes must have distinct names, got {names} (give a policy a 'label')")
    return out, specs


# ---------------------------------------------------------------- live side


def drafters_of(mode: LiveMode, drafters: dict) -> dict:
    """The drafters a mode may use: a fixed policy's one, or all loaded ones for other policies."""
    if mode.policy is None:
        return {}
    if mode.policy["name"] == "fixed":
        return {mode.policy["drafter"]: drafters[mode.policy["drafter"]]}
    return dict(drafters)


def run_live_modes(cfg: LiveConfig, modes: list[LiveMode], prompts: list[tuple[str, list[int]]], target, drafters,
                   eos: list[int]) -> list[LiveRun]:
    """Serve every request once per mode, in order, one at a time; a fresh policy object per mode."""
    runs = []
    for mode in modes:
        used = drafters_of(mode, drafters)
        if cfg.warmup:  # first calls allocate and pick kernels; keep them out of the timings
            pol = make_policy(mode.policy) if mode.policy else None
            serve_request("warmup", prompts[0][1], target=target.model, drafters=used, policy=pol,
                          max_new_tokens=min(8, cfg.max_new_tokens), eos=eos)
        policy = make_policy(mode.policy, where=f"mode {mode.name}", seed=cfg.seed) if mode.policy else None
        before = machine_load()
        reqs = [serve_request(rid, ids, target=target.model, drafters=used, policy=policy,
                              max_new_tokens=cfg.max_new_tokens, eos=eos) for rid, ids in prompts]
        runs.append(LiveRun(mode, reqs, before, machine_load()))
    return runs


# ---------------------------------------------------------------- traces and prediction


def trace_walk_steps(bundle, mode: LiveMode) -> list[int] | None:
    """Verify steps per request the trace predicts for a fixed policy (the replay rule; AR is k = 0)."""
    from traces.acceptance import FIRST_DRAFT_POSITION
    from traces.walk import walk_positions

    if mode.policy is not None and mode.policy["name"] != "fixed":
        return None
    out = []
    for r in bundle.requests:
        if mode.policy is None:  # one token per step after the prefill's
            out.append(max(r.output_len - FIRST_DRAFT_POSITION, 0))
        else:
            t = r.drafters[mode.policy["drafter"]]
            out.append(len(walk_positions(t.acc_len, mode.policy["k"], t.proposal_len)))
    return out


def _profile(name: str, suffix: str):
    """`name + suffix` when that profile exists (e.g. a table form), else `name`."""
    from simulator.latency import builtin_profiles, resolve_profile

    return resolve_profile(name + suffix if suffix and (name + suffix) in builtin_profiles() else name)


def draft_costs(cfg: LiveConfig, drafters, suffix: str = "") -> dict:
    """Each drafter priced by its measured profile: model drafters step by step, n-gram per proposal."""
    from calibration.models.drafters import LookupDrafter
    from simulator.draft_cost import DraftCost

    costs = {}
    for name, d in drafters.items():
        kind = "whole_proposal" if isinstance(d, LookupDrafter) else "autoregressive"
        costs[name] = DraftCost(kind=kind, profile=_profile(f"{cfg.profile}-{name}", suffix))
    return costs


def simulate_mode(cfg: LiveConfig, mode: LiveMode, bundle, costs, target_profile) -> Any:
    """The simulator's prediction of one live mode: same requests, one client, closed loop, batch 1."""
    from simulator.scenario import inputs_from_traces, make_scenario, simulate
    from simulator.server_config import RunSpec, ServerConfig

    reqs = bundle.requests
    inputs = inputs_from_traces(reqs, bundle.drafter_names, clients=1)
    need = max(r.prompt_len + r.output_len for r in reqs)
    run = RunSpec(name=mode.name, mode="sd" if mode.policy else "ar", policy=mode.policy)
    server = ServerConfig(target_profile=target_profile, max_num_seqs=1,
                          max_num_batched_tokens=need + 64, kv_capacity_tokens=4 * need + 1024)
    return simulate(make_scenario(run, server, costs, cfg.seed), inputs, live=True)


def phase_check(run: LiveRun, costs, target_profile) -> dict[str, float | None]:
    """Measured vs profile-predicted time per phase over the steps that actually ran (where errors come from)."""
    steps = [s for r in run.requests for s in r.steps]
    verify_meas = sum(s.verify_s for s in steps)
    verify_pred = sum(target_profile.step_time(1, s.proposed + 1, s.context_len) for s in steps)
    drafted = [s for s in steps if s.drafter is not None and s.proposed > 0]
    draft_meas = sum(s.draft_s for s in drafted)
    draft_pred = sum(costs[s.drafter].draft_time(1, s.proposed, s.k, s.context_len, 0.0) for s in drafted)
    prefill_meas = sum(r.prefill_s for r in run.requests)
    prefill_pred = sum(target_profile.step_time(1, r.prompt_len, r.prompt_len) for r in run.requests)
    return {"verify_measured_s": verify_meas, "verify_predicted_s": verify_pred,
            "draft_measured_s": draft_meas, "draft_predicted_s": draft_pred,
            "prefill_measured_s": prefill_meas, "prefill_predicted_s": prefill_pred,
            "drafter_prefill_measured_s": sum(r.drafter_prefill_s for r in run.requests),
            "draft_without_proposal_measured_s": sum(s.draft_s for s in steps if s.proposed == 0)}


def run_live(cfg: LiveConfig, *, prompts=None, progress: bool = True) -> dict[str, Any]:
    """Live runs, traces, simulator prediction; returns the report (JSON-ready)."""
    import sys

    import torch

    from calibration.models.hf_backend import encode_prompt
    from calibration.models.loading import load_target
    from calibration.prompts import workload_prompts

    if cfg.num_requests < 1 or cfg.max_new_tokens < 2:
        raise ValueError("live: --requests must be >= 1 and --max-new-tokens >= 2")
    modes, specs = parse_modes(cfg.modes, cfg.policies)
    if not modes:
        raise ValueError("live: nothing to run; give --modes and/or --policy")
    chosen = list(prompts if prompts is not None else workload_prompts(cfg.workload, cfg.seed))
    if len(chosen) < cfg.num_requests:
        raise ValueError(f"workload {cfg.workload!r} has {len(chosen)} prompts, fewer than {cfg.num_requests}")
    chosen = chosen[:cfg.num_requests]
    kinds = {"linear": (_profile(cfg.profile, ""), ""), "table": (_profile(cfg.profile, "-table"), "-table")}
    loaded = load_target(cfg.target, specs + list(cfg.drafters), threads=cfg.threads)
    lm, drafters = loaded.lm, loaded.drafters
    costs = {k: draft_costs(cfg, drafters, suffix) for k, (_, suffix) in kinds.items()}
    live_drafters = dict(drafters)
    if cfg.int8_kernels and "int8" in drafters:  # same weights, real int8 kernels; the trace keeps W8A8 numerics
        from calibration.models.drafters import ModelDrafter, int8_kernel_copy

        live_drafters["int8"] = ModelDrafter("int8", "int8", int8_kernel_copy(lm.model), {"kernels": "fbgemm"})
    eos = loaded.eos
    ids = [(p.id, encode_prompt(lm, p.text)) for p in chosen]

    def say(msg):
        if progress:
            print(f"draftsim live: {msg}", file=sys.stderr, flush=True)

    order = sorted(modes, key=lambda m: m.policy is not None)  # AR first: it is the lossless reference
    if order[0].policy is not None:
        order = [LiveMode("AR", None)] + order
    say(f"{len(ids)} requests x {cfg.max_new_tokens} tokens, modes {[m.name for m in order]}, "
        f"{cfg.threads} thread(s), load/core {machine_load():.2f}")
    runs = []
    for m in order:
        runs += run_live_modes(cfg, [m], ids, lm, live_drafters, eos)
        say(f"{m.name}: done, load/core {runs[-1].load_after:.2f}")
    reference = [r.output_ids for r in runs[0].requests]
    lossless = {}
    for run in runs:
        bad = [r.id for r, want in zip(run.requests, reference) if r.output_ids != want]
        lossless[run.mode.name] = {"lossless": not bad, "differing_requests": bad}
    setting = TraceSetting(cfg.workload, cfg.target, cfg.profile, cfg.max_new_tokens, cfg.seed)
    bundle, mismatches = measure_traces(setting, lm, drafters, ids, reference, [p.category for p in chosen], eos)
    say("traces measured; simulating")
    rows = {}
    for run in runs:
        if run.mode not in modes:
            continue
        meas = live_metrics(run, cfg.max_new_tokens)
        sims = {k: simulate_mode(cfg, run.mode, bundle, costs[k], prof) for k, (prof, _) in kinds.items()}
        pred = {k: sim_metrics(sim) for k, sim in sims.items()}
        walk = trace_walk_steps(bundle, run.mode)
        live_steps = [len(r.steps) for r in run.requests]
        rows[run.mode.name] = {
            "policy": run.mode.policy, "measured": meas, "predicted": pred["linear"],
            "error_percent": {k: rel_err(pred["linear"][k], meas[k]) for k in METRICS},
            "predicted_table_profiles": pred["table"],
            "error_percent_table_profiles": {k: rel_err(pred["table"][k], meas[k]) for k in METRICS},
            "steps_live": live_steps, "steps_simulated": [int(x) for x in sims["linear"].requests.decode_steps],
            "steps_trace_walk": walk,
            "steps_equal_trace_walk": None if walk is None else walk == live_steps,
            "steps_differing_from_trace": step_mismatches(bundle, run),
            "steps_total": int(sum(live_steps)),
            "accepted_per_step_live": float(np.mean([s.accepted for r in run.requests for s in r.steps])),
            "drafter_usage_live": drafter_usage(run),
            "phases": phase_check(run, costs["linear"], kinds["linear"][0]),
            "phases_table_profiles": phase_check(run, costs["table"], kinds["table"][0]),
            "load_per_core": {"before": round(run.load_before, 3), "after": round(run.load_after, 3)},
            **lossless[run.mode.name],
        }
    return {
        "setting": {"workload": cfg.workload, "requests": len(ids), "max_new_tokens": cfg.max_new_tokens,
                    "target": cfg.target, "target_profile": cfg.profile,
                    "profiles": {k: p.name for k, (p, _) in kinds.items()}, "threads": cfg.threads,
                    "int8_live": "fbgemm (torch dynamic int8)" if cfg.int8_kernels else "W8A8 per-token (the trace's)",
                    "clients": 1, "batch": 1, "think_time_s": 0.0, "greedy": True, "eos_forbidden": True,
                    "cpu_count": os.cpu_count(), "torch": str(torch.__version__)},
        "note": ("wall-clock side is noisy: it shares the CPU with other processes (load per core recorded per "
                 "mode); the simulator does not price the drafters' prompt pass (drafter_prefill_measured_s); "
                 "'phases' compares each phase's measured time with the profile's price of the same steps"),
        "target_argmax_mismatches_teacher_forced_vs_live": mismatches,
        "modes": rows,
        "requests": {run.mode.name: [_request_row(r) for r in run.requests] for run in runs if run.mode in modes},
        "_bundle": bundle,
    }


def _request_row(r: LiveRequest) -> dict[str, Any]:
    return {"id": r.id, "prompt_len": r.prompt_len, "tokens": len(r.output_ids), "ttft_s": r.ttft_s, "e2e_s": r.e2e_s,
            "verify_steps": len(r.steps), "accepted_per_step": [s.accepted for s in r.steps],
            "emitted_per_step": [s.emitted for s in r.steps],
            "drafters": [s.drafter for s in r.steps]}
