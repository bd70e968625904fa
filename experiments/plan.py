"""`draftsim plan`: per candidate deployment (GPU type x TP x replicas x mode x scheduler setting), the highest
arrival rate it sustains under the SLO (bisection with repeated seeds, see experiments/plan_search.py) and what
it costs; the cheapest candidate that sustains the target rate answers the question.

Every simulation is a sweep point (experiments/sweep): cached by content hash under OUT/points, run serially,
on a process pool or on Ray, with seeds derived from the plan seed and the replicate index (shared by all
candidates and rates: common random numbers), so plan.json is identical whichever backend ran it.
"""
from __future__ import annotations

import hashlib
import itertools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments.plan_config import Mode, PlanConfig
from experiments.plan_search import Bisection, false_accept_probability, sustainable
from experiments.prices import GpuPrice, price_table
from experiments.sweep.cache import write_json_atomic
from experiments.sweep.experiment import json_ready
from experiments.sweep.hashing import derive_seed
from experiments.sweep.runner import Point, ProgressBar, SweepRunner
from simulator.metrics import round_sig

EVALUATOR = "plan-point/1"  # bump when what a point returns changes (invalidates caches)
POINT_METRICS = ("throughput_tok_s", "requests_per_s", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "output_tokens",
                 "num_finished", "mean_acceptance_length")
ROOFLINE_NOTE = ("roofline: target step times from catalog datasheet numbers (traces/data/catalog), not "
                 "measured on that GPU; the absolute capacity is a model (see simulator/roofline.py)")


# ---------------------------------------------------------------- candidates


@dataclass
class Candidate:
    """One deployment to evaluate, with what is known before any simulation."""

    id: str
    gpu: str
    tp: int
    replicas: int
    mode: Mode
    scheduler: dict[str, Any]
    config: dict[str, Any]  # experiment config doc without workload and seed
    status: str = "ok"  # ok | does_not_fit
    reason: str = ""
    target_costs: str = ""
    cost_notes: list[str] = field(default_factory=list)
    num_gpus: int = 0
    usd_per_hour: float | None = None
    placement: dict[str, Any] | None = None
    capacity_req_s: float | None = None
    search: Bisection | None = None
    evaluations: list[dict[str, Any]] = field(default_factory=list)


def _deployment(plan: PlanConfig, gpu: str, tp: int, mode: Mode) -> dict[str, Any]:
    dep: dict[str, Any] = {"target": plan.candidates.target, "gpu": gpu, "num_gpus": tp, "tp": tp,
                           **plan.candidates.deployment}
    if mode.drafter_model:
        dep.update(drafter=mode.drafter_model, drafter_placement=mode.where)
        if mode.where == "dedicated":
            dep["drafter_gpus"] = mode.drafter_gpus
    return dep


def _target_profile(plan: PlanConfig, gpu: str, tp: int) -> tuple[Any, str]:
    """The candidate's target profile and a line saying where its costs come from."""
    measured = plan.candidates.profiles.get(gpu, {}).get(tp)
    if measured:
        from simulator.latency import resolve_profile

        prov = resolve_profile(measured).provenance
        return measured, f"measured: {measured} ({prov.source}, {prov.device or 'device not recorded'})"
    knobs = plan.candidates.roofline
    doc = {"kind": "roofline", "model": plan.candidates.target, "gpu": gpu, "tp": tp, **knobs}
    return doc, f"roofline (mfu {knobs.get('mfu', 0.6)}, bandwidth {knobs.get('bandwidth_util', 0.8)}; not calibrated)"


def _drafter_notes(config: dict[str, Any], mode: Mode) -> list[str]:
    """What each drafter's cost rests on, for modes that draft."""
    if mode.mode == "ar":
        return []
    notes = []
    for name, spec in sorted(config.get("drafters", {}).items()):
        kind = spec.get("kind")
        if kind in ("whole_proposal", "autoregressive"):
            from simulator.latency import resolve_profile

            prov = resolve_profile(spec["profile"]).provenance
            notes.append(f"drafter {name}: profile {spec['profile']} measured on {prov.device or '?'}, "
                         "used unchanged on this GPU")
        elif kind == "fraction_of_verify":
            notes.append(f"drafter {name}: {spec.get('fraction')} x the target's verify time")
        elif kind == "constant":
            notes.append(f"drafter {name}: constant {spec.get('seconds')} s per drafting phase")
    return notes


def _candidate_id(gpu: str, tp: int, replicas: int, mode: Mode, sched: dict[str, Any], varied: set[str]) -> str:
    tail = "".join(f" {k}={v}" for k, v in sched.items() if k in varied)
    return f"{gpu} tp{tp} x{replicas} {mode.name}{tail}"


def base_experiment(plan: PlanConfig) -> dict[str, Any]:
    """The base experiment config as a validated doc, with the plan's traces/drafters/SLO applied."""
    from experiments.config import load_config

    cfg = load_config(plan.base, label=f"{plan.name}: base")
    doc = cfg.model_dump(mode="json", exclude={"sweep"})
    if plan.traces is not None:
        doc["traces"] = plan.traces
    if plan.drafters is not None:
        doc["drafters"] = plan.drafters
    slo = {k: v for k, v in (("ttft_s", plan.slo.ttft_s), ("tpot_s", plan.slo.tpot_s)) if v is not None}
    doc.update(name=plan.name, baseline=None, timeline_max_steps=0, slo=slo)
    return doc


def build_candidates(plan: PlanConfig, base: dict[str, Any], prices: dict[str, GpuPrice]) -> list[Candidate]:
    """Every candidate of the space, checked for fit and validated as an experiment before anything runs."""
    from experiments.config import load_config
    from simulator.placement import kv_capacity_tokens

    cands = plan.candidates
    missing = sorted({g.lower() for g in cands.gpus} - set(prices))
    if missing:
        raise ValueError(f"prices: no price for GPU(s) {missing}; add them to the price file or to "
                         "prices.usd_per_gpu_hour")
    keys = list(cands.scheduler)
    settings = [dict(zip(keys, combo)) for combo in itertools.product(*(cands.scheduler[k] for k in keys))]
    out = []
    for gpu, tp, replicas, mode, sched in itertools.product(cands.gpus, cands.tp, cands.replicas, cands.modes,
                                                            settings):
        gpu = gpu.lower()
        cid = _candidate_id(gpu, tp, replicas, mode, sched, {k for k in keys if len(cands.scheduler[k]) > 1})
        profile, source = _target_profile(plan, gpu, tp)
        dep = _deployment(plan, gpu, tp, mode)
        server = {**base["server"], **sched, "target_profile": profile, "deployment": dep, "kv_capacity_tokens": None,
                  "num_target_gpus": tp, "num_draft_gpus": mode.draft_gpus}
        config = {**base, "server": server, "runs": [mode.run_spec()]}
        if replicas > 1:  # one simulation of the whole cluster (simulator/cluster.py)
            config["cluster"] = {"replicas": replicas, "router": cands.router.model_dump(mode="json", exclude_none=True)}
        num_gpus = (tp + mode.draft_gpus) * replicas
        c = Candidate(cid, gpu, tp, replicas, mode, sched, config, target_costs=source,
                      cost_notes=_drafter_notes(config, mode), num_gpus=num_gpus,
                      usd_per_hour=round_sig(num_gpus * prices[gpu].usd_per_hour))
        where = f"{plan.name}: candidate {cid!r}"
        try:
            placement = kv_capacity_tokens(dep, where=f"{where} deployment")
        except ValueError as e:
            raise ValueError(str(e)) from None
        c.placement = placement.summary()
        if not placement.fits:
            c.status, c.reason = "does_not_fit", placement.message
        # a bad scheduler value or policy fails here, before any simulation
        load_config({**config, "workload": {"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0}}},
                    label=where)
        if mode.mode != "ar":
            import oracle.registry  # noqa: F401  (registers the ground-truth policies)
            from policies.registry import make_policy

            make_policy(mode.policy, where=f"{where}: modes[{mode.name}].policy")
        out.append(c)
    return out


# ---------------------------------------------------------------- traffic


@dataclass
class TrafficModel:
    """Turns a rate into the workload section of a point (and replay files into time-scaled copies)."""

    plan: PlanConfig
    base_workload: dict[str, Any]
    num_requests: int = 0
    replay_times: np.ndarray | None = None
    replay_sha256: str = ""
    recorded_rate: float | None = None

    def __post_init__(self) -> None:
        t = self.plan.traffic
        n = t.num_requests or self.base_workload.get("num_requests")
        if t.arrival == "replay":
            from traces.workload import load_arrival_times

            path = Path(t.file)
            times = load_arrival_times(path)
            n = n or times.shape[0]
            if n > times.shape[0]:
                raise ValueError(f"traffic.num_requests: {n} but {path} has {times.shape[0]} arrival times")
            if n < 2 or not times[n - 1] > times[0]:
                raise ValueError(f"traffic.file: {path}: need at least two distinct arrival times to define a rate")
            self.replay_times = times[:n]
            self.replay_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
            self.recorded_rate = (n - 1) / float(times[n - 1] - times[0])
        if not n:
            raise ValueError("traffic.num_requests: required when the base config does not set workload.num_requests")
        self.num_requests = int(n)

    @property
    def target_rate(self) -> float:
        return float(self.plan.traffic.target_rate or self.recorded_rate)

    def workload(self, arrival: dict[str, Any]) -> dict[str, Any]:
        t = self.plan.traffic
        doc = {"num_requests": self.num_requests, "arrival": arrival}
        for key, given in (("lengths", t.lengths), ("sample", t.sample)):
            value = given if given is not None else self.base_workload.get(key)
            if value is not None:
                doc[key] = value
        return doc

    def at_rate(self, rate: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(workload doc, replay instruction or None) for open-loop arrivals at `rate` req/s."""
        t = self.plan.traffic
        if t.arrival == "poisson":
            return self.workload({"kind": "poisson", "rate": rate}), None
        if t.arrival == "gamma":
            return self.workload({"kind": "gamma", "rate": rate, "cv": t.cv}), None
        scale = self.recorded_rate / rate
        return (self.workload({"kind": "replay", "file": "<scaled replay file>"}),
                {"file": str(Path(t.file).resolve()), "sha256": self.replay_sha256, "scale": scale,
                 "num_requests": self.num_requests})

    def offline_batch(self) -> dict[str, Any]:
        """Every request at t = 0 (a closed loop with one client per request): the capacity probe."""
        return self.workload({"kind": "closed_loop", "clients": self.num_requests, "think_time": 0.0})


# ---------------------------------------------------------------- one simulation


def evaluate_plan_point(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: simulate one candidate at one rate and seed; SLO attainment from the request table."""
    from experiments.run import run_experiment
    from simulator.metrics import goodput_mask
    from traces.workload import load_arrival_times

    doc = payload["config"]
    with tempfile.TemporaryDirectory(prefix="draftsim-plan-") as tmp:
        replay = payload.get("replay")
        if replay:
            times = load_arrival_times(replay["file"])[: replay["num_requests"]] * replay["scale"]
            path = Path(tmp) / "arrivals.txt"
            path.write_text("".join(f"{t!r}\n" for t in times.tolist()), encoding="utf-8")
            doc = {**doc, "workload": {**doc["workload"], "arrival": {"kind": "replay", "file": str(path)}}}
        res = run_experiment(doc)
    (summary,) = res.summary.values()
    if not summary.get("fits", True):
        return {"fits": False, "reason": str(summary.get("does_not_fit"))}
    ok = goodput_mask(res.requests, payload["slo"])
    out = {"fits": True, "attainment": round_sig(float(ok.mean())) if len(ok) else None}
    out.update({m: summary.get(m) for m in POINT_METRICS})
    return json_ready(out)


def _point(c: Candidate, workload: dict[str, Any], seed: int, slo: dict[str, Any],
           replay: dict[str, Any] | None) -> Point:
    return Point({"evaluator": EVALUATOR, "config": {**c.config, "workload": workload, "seed": seed},
                  "slo": slo, "replay": replay})


# ---------------------------------------------------------------- the search


def run_plan(plan: PlanConfig, out: str | Path, backend: str = "pool", workers: int | None = None,
             address: str | None = None, progress: bool = True, console=None,
             price_file: str | None = None) -> dict[str, Any]:
    """Search every candidate, write plan.json (and plots), return plan.json's doc plus run statistics."""
    out = Path(out)
    base = base_experiment(plan)
    prices = price_table(price_file or plan.prices.file, plan.prices.usd_per_gpu_hour)
    traffic = TrafficModel(plan, base["workload"])
    cands = build_candidates(plan, base, prices)
    active = [c for c in cands if c.status == "ok"]
    search, slo = plan.search, plan.slo.bounds()
    seeds = [derive_seed(plan.seed, f"replicate-{i}") for i in range(search.seeds)]
    per_search = (1 + search.steps) * search.seeds
    probe = search.rate_max is None or search.cap_at_capacity
    total = len(active) * (int(probe) + per_search)
    with ProgressBar(f"plan {plan.name}", total, console, progress) as bar:
        runner = SweepRunner(evaluate_plan_point, out / "points", backend, workers, address, bar)
        if probe:  # capacity: one offline batch per candidate
            probes = runner.run([_point(c, traffic.offline_batch(), seeds[0], slo, None) for c in active])
            for c, r in zip(active, probes):
                if not r["fits"]:
                    c.status, c.reason = "does_not_fit", r["reason"]
                    bar.add_total(-per_search - len(search.curve_fractions))
                    continue
                c.capacity_req_s = r["requests_per_s"]
        for c in active:
            if c.status == "ok":
                ceiling = search.rate_max or c.capacity_req_s
                c.search = Bisection(float(ceiling), search.steps)
        while True:
            todo = [c for c in active if c.status == "ok" and not c.search.done]
            if not todo:
                break
            batch = []
            for c in todo:
                workload, replay = traffic.at_rate(c.search.next_rate())
                batch += [_point(c, workload, s, slo, replay) for s in seeds]
            results = runner.run(batch)
            for j, c in enumerate(todo):
                rate = c.search.next_rate()
                runs = results[j * len(seeds):(j + 1) * len(seeds)]
                if not all(r["fits"] for r in runs):
                    c.status, c.reason = "does_not_fit", next(r["reason"] for r in runs if not r["fits"])
                    continue
                passed = [r["attainment"] is not None and r["attainment"] >= plan.slo.attainment for r in runs]
                ok = sustainable(passed, search.required) and not (
                    search.cap_at_capacity and rate > c.capacity_req_s)
                c.evaluations.append({"rate": rate, "sustainable": ok, "seeds_passed": sum(passed),
                                      "seeds": [{"seed": s, **r} for s, r in zip(seeds, runs)]})
                c.search.record(rate, ok)
                if c.search.at_ceiling:
                    bar.add_total(-search.steps * search.seeds)
        _curve_points(plan, active, traffic, seeds[0], slo, runner, bar)
    doc = plan_document(plan, cands, prices, traffic, seeds)
    write_json_atomic(out / "plan.json", doc, indent=1)
    from experiments.plan_report import write_plots

    write_plots(doc, out)
    return {**doc, "_stats": {"computed": runner.stats.computed, "cached": runner.stats.cached}}


def _curve_points(plan: PlanConfig, active: list[Candidate], traffic: "TrafficModel", seed: int,
                  slo: dict[str, Any], runner: SweepRunner, bar: ProgressBar) -> None:
    """One simulation (first seed) at each curve fraction of every candidate's max rate: the latency curves."""
    batch, owners = [], []
    for c in active:
        fractions = plan.search.curve_fractions
        if c.status != "ok" or not c.search.lo > 0:
            bar.add_total(-len(fractions))
            continue
        for f in fractions:
            workload, replay = traffic.at_rate(f * c.search.lo)
            batch.append(_point(c, workload, seed, slo, replay))
            owners.append((c, f * c.search.lo))
    for (c, rate), r in zip(owners, runner.run(batch)):
        if r["fits"]:
            c.evaluations.append({"rate": rate, "sustainable": None, "seeds_passed": None, "curve_only": True,
                                  "seeds": [{"seed": seed, **r}]})


# ---------------------------------------------------------------- results


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return round_sig(sum(vals) / len(vals)) if vals else None


def _curve(c: Candidate) -> list[dict[str, Any]]:
    rows = []
    for e in sorted(c.evaluations, key=lambda e: e["rate"]):
        row = {"rate": round_sig(e["rate"]), "sustainable": e["sustainable"], "seeds_passed": e["seeds_passed"],
               "seeds": len(e["seeds"]), "attainment_mean": _mean([s["attainment"] for s in e["seeds"]])}
        row.update({f"{m}_mean": _mean([s[m] for s in e["seeds"]]) for m in
                    ("throughput_tok_s", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s")})
        rows.append(row)
    return rows


def candidate_result(c: Candidate, target_rate: float) -> dict[str, Any]:
    """One candidate's entry of plan.json."""
    doc: dict[str, Any] = {
        "id": c.id, "gpu": c.gpu, "tp": c.tp, "replicas": c.replicas, "mode": c.mode.name,
        "scheduler": c.scheduler, "status": c.status, "reason": c.reason or None, "num_gpus": c.num_gpus,
        "draft_gpus": c.mode.draft_gpus * c.replicas, "usd_per_hour": c.usd_per_hour, "target_costs": c.target_costs,
        "cost_notes": c.cost_notes, "placement": c.placement,
    }
    if c.status != "ok" or c.search is None:
        return doc
    s = c.search
    at_lo = next((e for e in c.evaluations if e["rate"] == s.lo and not e.get("curve_only")), None)
    tok_s = _mean([x["throughput_tok_s"] for x in at_lo["seeds"]]) if at_lo else None
    out_per_req = (_mean([x["output_tokens"] / x["num_finished"] for x in at_lo["seeds"] if x["num_finished"]])
                   if at_lo else None)
    meets = s.lo >= target_rate and s.lo > 0
    hourly = c.usd_per_hour
    doc.update({
        "capacity_req_s": c.capacity_req_s, "search_ceiling_req_s": round_sig(s.ceiling),
        "max_rate_req_s": round_sig(s.lo), "bracket_req_s": [round_sig(s.lo), round_sig(s.hi)],
        "at_search_ceiling": s.at_ceiling, "tolerance_req_s": round_sig(s.tolerance),
        "throughput_tok_s_at_max_rate": tok_s,
        "usd_per_mtok_at_max_rate": round_sig(hourly / (tok_s * 3600) * 1e6) if tok_s else None,
        "meets_target_rate": meets,
        "usd_per_mtok_at_target_rate": (round_sig(hourly / (target_rate * out_per_req * 3600) * 1e6)
                                        if meets and out_per_req else None),
        "curve": _curve(c),
    })
    if s.at_ceiling:
        doc["reason"] = ("sustains the search ceiling" + (" (its capacity: throughput-bound, not latency-bound)"
                                                         if s.ceiling == c.capacity_req_s else ""))
    if s.lo == 0:
        doc["reason"] = f"no tested rate met the SLO (the lowest tested, {round_sig(s.hi)} req/s, failed)"
    elif not meets:
        doc["reason"] = f"sustains {round_sig(s.lo)} req/s < target {round_sig(target_rate)}"
    return doc


def _rank_key(d: dict[str, Any]) -> tuple:
    if d["status"] == "ok" and d.get("meets_target_rate"):
        return (0, d["usd_per_hour"], d.get("usd_per_mtok_at_target_rate") or 0.0, -d["max_rate_req_s"], d["id"])
    if d["status"] == "ok":
        return (1, 0.0, 0.0, -(d.get("max_rate_req_s") or 0.0), d["id"])
    return (2, 0.0, 0.0, 0.0, d["id"])  # does not fit


def plan_document(plan: PlanConfig, cands: list[Candidate], prices: dict[str, GpuPrice], traffic: TrafficModel,
                  seeds: list[int]) -> dict[str, Any]:
    """plan.json: the question, the rule, the prices and every candidate ranked (deterministic: no times)."""
    target = traffic.target_rate
    ranked = sorted((candidate_result(c, target) for c in cands), key=_rank_key)
    cheapest = next((d["id"] for d in ranked if d["status"] == "ok" and d.get("meets_target_rate")), None)
    s = plan.search
    used = sorted({c.gpu for c in cands})
    notes = []
    if any(c.target_costs.startswith("roofline") for c in cands):
        notes.append(ROOFLINE_NOTE)
    if any(c.replicas != 1 for c in cands):
        router = plan.candidates.router.model_dump(mode="json", exclude_none=True)
        notes.append(f"replicas > 1: the whole cluster is simulated (one Environment, each replica with its own "
                     f"scheduler, KV and drafter placement) behind router {router}; GPUs and cost are summed "
                     f"over the replicas")
    doc = {
        "name": plan.name, "description": plan.description,
        "question": {"target": plan.candidates.target, "target_rate_req_s": round_sig(target),
                     "traffic": plan.traffic.model_dump(mode="json"), "num_requests": traffic.num_requests,
                     "recorded_rate_req_s": round_sig(traffic.recorded_rate) if traffic.recorded_rate else None,
                     "slo": plan.slo.model_dump(mode="json")},
        "rule": {
            "sustainable": (f"a rate is sustainable when at least {s.required} of {s.seeds} seeds meet the SLO; a "
                            f"seed meets it when at least {plan.slo.attainment:g} of its requests finish within "
                            "every bound"),
            "capacity": ("the throughput (req/s) of the workload served as one offline batch (seed "
                         f"{seeds[0]}); " + ("rates above it are never sustainable" if s.cap_at_capacity else
                                             "not a limit (search.cap_at_capacity: false)")),
            "search": (f"test the ceiling ({'search.rate_max' if s.rate_max else 'the capacity'}), then "
                       f"{s.steps} bisection steps on [0, ceiling]; max rate = highest "
                       "sustainable rate tested, within tolerance = ceiling / 2^steps (sustainability assumed "
                       "monotone in the rate); then, for the curves only, one simulation (first seed) at "
                       f"{', '.join(f'{f:g}' for f in s.curve_fractions)} x the max rate"),
            "seeds": seeds, "seeds_per_rate": s.seeds, "min_passing": s.required, "steps": s.steps,
            "false_accept_probability_at_p50": round_sig(false_accept_probability(s.seeds, s.required, 0.5)),
            "confidence": (f"a rate whose workloads meet the SLO only half the time is accepted with probability "
                           f"{false_accept_probability(s.seeds, s.required, 0.5):.3g}"),
        },
        "prices": {g: {"usd_per_gpu_hour": prices[g].usd_per_hour, "source": prices[g].source} for g in used},
        "cheapest": cheapest,
        "notes": notes,
        "candidates": ranked,
    }
    return json_ready(doc)
