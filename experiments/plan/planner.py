"""`draftsim plan`: per candidate deployment (GPU type x TP x replicas x mode x scheduler setting), the highest
arrival rate at which it is stable and meets the SLO in steady state (experiments/plan/search.py; runs sized from
the SLO's quantile) and what it costs; the cheapest candidate that sustains the target rate answers the question.

Every simulation is a sweep point (experiments/sweep): cached by content hash under OUT/points, run serially,
on a process pool or on Ray, with seeds derived from the plan seed and the replicate index (shared by all
candidates and rates: common random numbers), so plan.json is identical whichever backend ran it.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments.plan.config import Mode, PlanConfig
from experiments.plan.crossover import CROSSOVER_RULE, Crossover, CrossoverSearch, compare, no_crossover
from experiments.plan.deploy import VLLM_RULES, VLLM_VERSION, Deploy, deploy_of, is_mtp_mode, lookup_note
from experiments.plan.draft_gpu import DRAFT_TRANSFER_RULE
from experiments.plan.bounds import SERVICE_BOUND_RULE, TPOT_FLOOR_RULE, service_rate_bound, tpot_floor
from experiments.plan.early_stop import EARLY_STOP_RULE
from experiments.plan.search import (ANSWER_CONFIDENCE_RULE, BATCHES, BELOW_SERVICE, FIRST_SEED_RULE,
                                     MAX_UTILIZATION, RateSearch, SeedSchedule)
from experiments.plan.prices import GpuPrice, price_table
from experiments.sweep.cache import write_json_atomic
from experiments.sweep.experiment import json_ready
from experiments.sweep.hashing import derive_seed
from experiments.sweep.runner import Point, ProgressBar, SweepRunner
from simulator.engine.rules.kv import lookahead_slots
from simulator.measure.metrics import round_sig
from simulator.measure.steady_state import SATURATED_TRIM_FRACTION
from simulator.scenario import check_cluster_size
from traces.catalog import MTP_SUFFIX

EVALUATOR = "plan-point/3"  # bump when what a point returns changes (invalidates caches)
POINT_METRICS = ("steady_throughput_tok_s", "steady_requests_per_s", "steady_ttft_p99_s", "steady_tpot_p99_s",
                 "steady_e2e_p99_s", "steady_slo_attainment", "overloaded", "mean_acceptance_length",
                 "throughput_tok_s")  # throughput_tok_s: whole run (warm-up and drain included), for reference
CURVE_SIZE_FRACTION = 0.25  # curve runs: this share of the search runs' size (TrafficModel.curve_requests_for)
ROOFLINE_NOTE = ("roofline: target step times from catalog datasheet numbers (traces/data/catalog), not "
                 "measured on that GPU; the absolute capacity is a model (see simulator/costs/roofline.py)")


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
    num_requests: int = 0
    curve_requests: int = 0
    max_draft_tokens: int = 0
    kv_lookahead: int = 0  # vLLM V1's KV lookahead slots per running request (simulator/engine/rules/kv.py)
    service_bound: float | None = None  # analytic upper bound on the service rate (experiments/plan/bounds.py)
    mean_output_tokens: float | None = None  # mean output_len of the requests a run draws (first seed)
    probe: dict[str, Any] | None = None  # the saturated service-rate run (SERVICE_PROBE_RULE) and its figure
    scope_note: str = ""  # search.scope cheapest: why this candidate's search stopped at the target rate
    floor_note: str = ""  # TPOT_FLOOR_RULE: why no rate can meet the SLO (no simulation)
    search: RateSearch | None = None
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    deploy: Deploy | None = None  # what vLLM runs for this candidate, or why it cannot (experiments/plan/deploy.py)
    crossover: Crossover | None = None  # SD vs AR on the same GPUs (experiments/plan/crossover.py)

    @property
    def deployable(self) -> bool:
        return self.deploy is not None and self.deploy.deployable


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
        from simulator.costs.latency import resolve_profile

        prov = resolve_profile(measured).provenance
        return measured, f"measured: {measured} ({prov.source}, {prov.device or 'device not recorded'})"
    knobs = plan.candidates.roofline
    doc = {"kind": "roofline", "model": plan.candidates.target, "gpu": gpu, "tp": tp, **knobs}
    return doc, f"roofline (mfu {knobs.get('mfu', 0.6)}, bandwidth {knobs.get('bandwidth_util', 0.8)}; not calibrated)"


def _drafters_on(drafters: dict[str, Any], gpu: str, transfer: str | None, where: str) -> dict[str, Any]:
    """The drafters section for a candidate on `gpu`: a roofline drafter profile that names no GPU is priced on the
    candidate's GPU type (its own device, TP 1 unless given), never scaled with the target's TP; a profile measured
    on another GPU is scaled to this one or refused (experiments/plan/draft_gpu.py DRAFT_TRANSFER_RULE; transfer
    None: left as it is, for modes that do not draft)."""
    from experiments.plan.draft_gpu import drafter_on_gpu

    out = {}
    for name, spec in drafters.items():
        prof = spec.get("profile")
        if isinstance(prof, dict) and prof.get("kind") == "roofline":
            spec = {**spec, "profile": {"gpu": gpu, "tp": 1, **prof}}
        elif transfer is not None:
            spec, _ = drafter_on_gpu(name, spec, gpu, transfer, f"{where}: drafters.{name}")
        out[name] = spec
    return out


def _drafter_notes(config: dict[str, Any], mode: Mode, tp: int) -> list[str]:
    """What each drafter's cost rests on, for modes that draft."""
    if mode.mode == "ar":
        return []
    notes = []
    for name, spec in sorted(config.get("drafters", {}).items()):
        kind = spec.get("kind")
        prof = spec.get("profile")
        if isinstance(prof, dict) and prof.get("kind") == "roofline" and str(prof.get("model")).endswith(MTP_SUFFIX):
            notes.append(f"drafter {name}: the target's MTP head {prof.get('model')}, k forwards of it per step "
                         f"(traces/mtp.py), roofline on the target's {prof.get('tp')}x {prof.get('gpu')} (not "
                         "calibrated)")
        elif isinstance(prof, dict) and prof.get("kind") == "roofline":
            notes.append(f"drafter {name}: {kind}, roofline of {prof.get('model')} on {prof.get('tp')}x "
                         f"{prof.get('gpu')} (its own device; not calibrated)")
        elif isinstance(prof, dict):
            prov = prof.get("provenance") or {}
            notes.append(f"drafter {name}: {kind}, inline {prof.get('kind', 'linear')} profile "
                         f"{prof.get('name', '')} ({prov.get('source', 'source not given')}, on "
                         f"{prov.get('device') or 'device not recorded'})")
        elif kind in ("whole_proposal", "autoregressive", "engine_step"):
            from simulator.costs.latency import resolve_profile

            prov = resolve_profile(prof).provenance
            notes.append(f"drafter {name}: profile {prof} measured on {prov.device or '?'}")
        elif kind == "fraction_of_verify":
            notes.append(f"drafter {name}: {spec.get('fraction')} x the target's verify time"
                         + (f" (the verify time of TP {tp}: this drafter's cost scales with the target's TP)"
                            if tp > 1 else ""))
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


def _drafter_specs(plan: PlanConfig, base: dict[str, Any]) -> dict[str, Any]:
    """The trace bundle's DrafterSpec per drafter (kind, recorded proposer settings), when a mode drafts."""
    if all(m.mode == "ar" for m in plan.candidates.modes):
        return {}
    from experiments.run import resolve_bundle

    return dict(resolve_bundle(base["traces"], plan.seed).meta.drafters)


def _mtp_drafters(plan: PlanConfig, mode: Mode, config: dict[str, Any], drafter_specs: dict[str, Any], gpu: str,
                  tp: int) -> None:
    """An MTP mode's drafters: acceptance of kind mtp from the plan's traces, and (unless the base config prices
    them) k forwards of the target's head per step on the candidate's own GPUs and TP (traces/mtp.py)."""
    import oracle.registry  # noqa: F401  (registers the ground-truth policies)
    from policies.registry import make_policy
    from traces.mtp import mtp_draft_cost

    where = f"{plan.name}: candidates.modes[{mode.name}].policy"
    for name in make_policy(mode.policy, where=where).drafters_used():
        kind = getattr(drafter_specs.get(name), "kind", None)
        if kind != "mtp":
            raise ValueError(f"{where}: drafter {name!r} replays acceptance of kind {kind!r} from the plan's traces; "
                             "an MTP mode replays an MTP head's acceptance (a drafter of kind mtp, e.g. vLLM's "
                             "per-position rates: traces: {acceptance: {drafters: {NAME: {per_position: [...], "
                             "kind: mtp, cost_model: TARGET:mtp}}}})")
        if name not in config["drafters"]:
            config["drafters"][name] = mtp_draft_cost(plan.candidates.target, gpu, tp)


def build_candidates(plan: PlanConfig, base: dict[str, Any], prices: dict[str, GpuPrice]) -> list[Candidate]:
    """Every candidate of the space, checked for fit and validated as an experiment before anything runs."""
    from experiments.config import load_config
    from simulator.costs.placement import kv_capacity_tokens

    cands = plan.candidates
    missing = sorted({g.lower() for g in cands.gpus} - set(prices))
    if missing:
        raise ValueError(f"prices: no price for GPU(s) {missing}; add them to the price file or to "
                         "prices.usd_per_gpu_hour")
    keys = list(cands.scheduler)
    settings = [dict(zip(keys, combo)) for combo in itertools.product(*(cands.scheduler[k] for k in keys))]
    drafter_specs = _drafter_specs(plan, base)
    out = []
    for gpu, tp, replicas, mode, sched in itertools.product(cands.gpus, cands.tp, cands.replicas, cands.modes,
                                                            settings):
        gpu = gpu.lower()
        cid = _candidate_id(gpu, tp, replicas, mode, sched, {k for k in keys if len(cands.scheduler[k]) > 1})
        profile, source = _target_profile(plan, gpu, tp)
        dep = _deployment(plan, gpu, tp, mode)
        server = {**base["server"], **sched, "target_profile": profile, "deployment": dep, "kv_capacity_tokens": None,
                  "num_target_gpus": tp, "num_draft_gpus": mode.draft_gpus}
        seqs = int(server["max_num_seqs"])
        dep.setdefault("max_num_seqs", seqs)  # placement holds each running sequence's linear-attention state
        config = {**base, "server": server, "runs": [mode.run_spec(seqs)],
                  "drafters": _drafters_on(base.get("drafters", {}), gpu,
                                           cands.draft_transfer if mode.mode != "ar" else None,
                                           f"{plan.name}: candidate {cid!r}")}
        if is_mtp_mode(mode):
            _mtp_drafters(plan, mode, config, drafter_specs, gpu, tp)
        if replicas > 1:  # one simulation of the whole cluster (simulator/cluster/simulation.py)
            config["cluster"] = {"replicas": replicas, "router": cands.router.model_dump(mode="json", exclude_none=True)}
        num_gpus = (tp + mode.draft_gpus) * replicas
        c = Candidate(cid, gpu, tp, replicas, mode, sched, config, target_costs=source,
                      cost_notes=_drafter_notes(config, mode, tp), num_gpus=num_gpus,
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

            policy = make_policy(mode.policy, where=f"{where}: modes[{mode.name}].policy")
            c.max_draft_tokens = policy.max_draft_tokens()
            if mode.mode == "sd":  # as the simulated server reserves them (Server._lookahead)
                kinds = [getattr(drafter_specs.get(d), "kind", "") for d in policy.drafters_used()]
                c.kv_lookahead = lookahead_slots(kinds, c.max_draft_tokens, server.get("scheduler", "draftsim"))
        c.deploy = deploy_of(mode, drafter_specs, tp, seqs, f"{plan.name}: candidates.modes[{mode.name}]",
                             target=cands.target)
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
            m = times.shape[0]
            if m < 2 or not times[m - 1] > times[0]:
                raise ValueError(f"traffic.file: {path}: need at least two distinct arrival times to define a rate")
            self.replay_times = times  # every run replays the first N of them (N sized per candidate)
            self.replay_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
            self.recorded_rate = (m - 1) / float(times[m - 1] - times[0])
        if not n:
            raise ValueError("traffic.num_requests: required when the base config does not set workload.num_requests")
        self.num_requests = int(n)

    @property
    def target_rate(self) -> float:
        return float(self.plan.traffic.target_rate or self.recorded_rate)

    def requests_for(self, replicas: int) -> int:
        """Requests per simulation: the given number, lengthened so the steady-state window holds
        tail_requests / (1 - attainment) requests and every replica at least requests_per_replica (replay: at most
        the recorded file's length)."""
        from simulator.measure.steady_state import WARMUP_FRACTION

        s, q = self.plan.search, self.plan.slo.attainment
        tail = math.ceil(s.tail_requests / (1.0 - q) / (1.0 - 2 * WARMUP_FRACTION)) if q < 1 else 0
        n = max(self.num_requests, tail, s.requests_per_replica * replicas)
        return min(n, self.replay_times.shape[0]) if self.replay_times is not None else n

    def curve_requests_for(self, replicas: int) -> int:
        """Requests per curve run: the curves read mean latencies, not the SLO's
        quantile, so CURVE_SIZE_FRACTION of the search size (at least the given number and requests_per_replica
        per replica)."""
        n = max(self.num_requests, self.plan.search.requests_per_replica * replicas,
                math.ceil(CURVE_SIZE_FRACTION * self.requests_for(replicas)))
        return min(n, self.requests_for(replicas))

    def workload(self, arrival: dict[str, Any], n: int) -> dict[str, Any]:
        t = self.plan.traffic
        doc = {"num_requests": n, "arrival": arrival}
        for key, given in (("lengths", t.lengths), ("sample", t.sample)):
            value = given if given is not None else self.base_workload.get(key)
            if value is not None:
                doc[key] = value
        return doc

    def at_rate(self, rate: float, n: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(workload doc, replay instruction or None) for `n` open-loop arrivals at `rate` req/s."""
        t = self.plan.traffic
        if t.arrival == "poisson":
            return self.workload({"kind": "poisson", "rate": rate}, n), None
        if t.arrival == "gamma":
            return self.workload({"kind": "gamma", "rate": rate, "cv": t.cv}, n), None
        scale = self.recorded_rate / rate
        return (self.workload({"kind": "replay", "file": "<scaled replay file>"}, n),
                {"file": str(Path(t.file).resolve()), "sha256": self.replay_sha256, "scale": scale,
                 "num_requests": n})


# ---------------------------------------------------------------- one simulation


def evaluate_plan_point(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: simulate one candidate at one rate and seed; its steady-state window counts, SLO
    attainment batch means and figures (simulator/measure/steady_state.py, the one window rule). With `stop` in the payload
    the run ends once its verdict is decided (experiments/plan/early_stop.py) and says so under `stopped`; a
    `probe` payload is the saturated service-rate run (SERVICE_PROBE_RULE)."""
    from traces.workload import load_arrival_times

    doc = payload["config"]
    with tempfile.TemporaryDirectory(prefix="draftsim-plan-") as tmp:
        replay = payload.get("replay")
        if replay:
            times = load_arrival_times(replay["file"])[: replay["num_requests"]] * replay["scale"]
            path = Path(tmp) / "arrivals.txt"
            path.write_text("".join(f"{t!r}\n" for t in times.tolist()), encoding="utf-8")
            doc = {**doc, "workload": {**doc["workload"], "arrival": {"kind": "replay", "file": str(path)}}}
        if payload.get("probe"):
            return _probe_point(doc, payload["probe"])
        if payload.get("stop"):
            return _stopping_point(doc, payload["slo"], payload["stop"])
        from experiments.run import run_experiment

        res = run_experiment(doc)
    (summary,) = res.summary.values()
    if not summary.get("fits", True):
        return {"fits": False, "reason": str(summary.get("does_not_fit"))}
    return _point_figures(res.requests, payload["slo"], summary)


def _point_figures(req, slo: dict[str, Any], summary: dict[str, Any], stopped: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """A point's record from its requests table: window counts, attainment batch means and figures; a stopped run
    (`stopped`) keeps only the figures its stop rule leaves exact (experiments/plan/early_stop.py)."""
    from simulator.measure.metrics import goodput_mask, steady_state_summary
    from simulator.measure.steady_state import batch_means, measure

    ok = goodput_mask(req, slo)
    ss = measure(req["arrival_time"].to_numpy(dtype=float), req["finish_time"].to_numpy(dtype=float),
                 req["output_len"].to_numpy(), ok)
    out: dict[str, Any] = {"fits": True}
    if ss is None:
        out.update(window_arrivals=0, window_departures=0, window_length_s=0.0, attainment_batches=[])
    else:
        order = np.argsort(req["arrival_time"].to_numpy(dtype=float)[ss.in_window], kind="stable")
        win = req[ss.in_window]
        out.update(window_arrivals=ss.arrivals, window_departures=ss.departures,
                   window_length_s=round_sig(ss.length_s),
                   attainment_batches=[round_sig(x) for x in batch_means(ok[ss.in_window][order], BATCHES)],
                   e2e_batches=[round_sig(x) for x in batch_means(win["e2e"].to_numpy(dtype=float)[order], BATCHES)],
                   steady_e2e_mean_s=round_sig(float(np.nanmean(win["e2e"].to_numpy(dtype=float)))),
                   steady_tpot_mean_s=round_sig(float(np.nanmean(win["tpot"].to_numpy(dtype=float)))))
    out.update({m: summary.get(m) for m in POINT_METRICS})
    out.update({k: v for k, v in steady_state_summary(req, slo).items() if k in POINT_METRICS})
    if stopped is None:
        return json_ready(out)
    out["stopped"] = {k: (round_sig(v) if isinstance(v, float) else v) for k, v in stopped.items()}
    rule = stopped["rule"]
    if rule != "window complete":  # the window's latencies and attainment are not all known
        for k in ("steady_e2e_mean_s", "steady_tpot_mean_s", "steady_ttft_p99_s", "steady_tpot_p99_s",
                  "steady_e2e_p99_s", "steady_slo_attainment"):
            out[k] = None
        out["attainment_batches"], out["e2e_batches"] = [], []
    if rule == "strict fail":  # departures not final; the batches of the most favourable completion
        out.update(window_final=False, overloaded=None, steady_throughput_tok_s=None, steady_requests_per_s=None,
                   attainment_batches=stopped["attainment_batches"])
        out["stopped"].pop("attainment_batches")
        out["stopped"]["attainment_batches_are"] = "the most favourable completion of the window (an upper bound)"
    return json_ready(out)


def _prepared(doc: dict[str, Any]):
    """(scenario, inputs) of a one-run point config, as experiments.run.run_experiment prepares them."""
    from experiments.config import load_config
    from experiments.run import experiment_inputs, prepare
    from simulator.scenario import check_inputs

    cfg = load_config(doc)
    (sc,) = prepare(cfg)
    if not sc.fits:
        return cfg, sc, None
    inputs = experiment_inputs(cfg, need_acceptance=sc.mode != "ar")
    check_inputs(sc, inputs)
    return cfg, sc, inputs


def _full_result(sim, sc):
    from simulator.scenario import ClusterScenario

    if isinstance(sc, ClusterScenario):
        res = sim.result()
        res.extras.update(sc.info)
        return res
    return sim.server.result()


def _stopping_point(doc: dict[str, Any], slo: dict[str, Any], stop: dict[str, Any]) -> dict[str, Any]:
    """A search or curve run that ends once its verdict is decided (experiments/plan/early_stop.py)."""
    from experiments.plan.early_stop import PlanStop
    from experiments.run import summarize_run
    from simulator.measure.early_stop import StopMonitor, progress_frame, run_until_decided
    from simulator.scenario import simulation

    cfg, sc, inputs = _prepared(doc)
    if inputs is None:
        return {"fits": False, "reason": str(sc.info.get("does_not_fit"))}
    rule = PlanStop(inputs.workload.arrival, slo, float(stop["target"]), stop["level"], float(stop["rate"]))
    monitor = StopMonitor(None, None, len(inputs.workload), rule, rule.every(), rule.check_from())
    sim = simulation(sc, inputs, on_step=monitor)  # the monitor itself: a compiled run asks it at its checks too
    progress = run_until_decided(sim, monitor.bind(sim))
    if progress is None:
        res = _full_result(sim, sc)
        return _point_figures(res.requests, slo, summarize_run(res, cfg.slo.model_dump()))
    stopped = {**rule.decision, "requests_finished": progress.finished, "of": len(inputs.workload)}
    return _point_figures(progress_frame(progress), slo, {}, stopped)


PROBE_CLIENTS = 1.25  # x the concurrent sequences: a queue always waits (as under overload)
PROBE_REQUESTS_PER_CLIENT = 5
SERVICE_PROBE_RULE = (f"service rate from one saturated run per candidate (first seed, reused by every seed and rate): "
                      f"a closed loop of {PROBE_CLIENTS:g} x the sequences the candidate runs at once (so a queue "
                      f"always waits), at least {PROBE_REQUESTS_PER_CLIENT} requests per client; output tokens per "
                      "second inside the saturated window (simulator/measure/steady_state.py saturated_window: the first and "
                      f"last max({SATURATED_TRIM_FRACTION:.0%}, concurrent sequences) finishes dropped) over the workload's "
                      "mean output length (whatever the size of the search runs: one overloaded small search "
                      "run measures it more noisily); no rate above "
                      f"{MAX_UTILIZATION:g} x it is tested or passes, and the search starts at most at "
                      f"{BELOW_SERVICE:g} x it")


def _probe_point(doc: dict[str, Any], probe: dict[str, Any]) -> dict[str, Any]:
    """The saturated probe run of SERVICE_PROBE_RULE: output tokens/s in its saturated window."""
    from simulator.scenario import simulate
    from simulator.measure.steady_state import saturated_window

    cfg, sc, inputs = _prepared(doc)
    if inputs is None:
        return {"fits": False, "reason": str(sc.info.get("does_not_fit"))}
    res = simulate(sc, inputs)
    got = saturated_window(res.requests, res.steps, int(probe["trim"]))
    if got is None:
        return {"fits": True, "tok_s": None}
    return json_ready({"fits": True, "tok_s": round_sig(got[0]), "e2e_mean_s": round_sig(got[1]),
                       "requests": int(len(res.requests)), "trim": int(probe["trim"])})


def mean_decode_tokens(c: Candidate, traffic: "TrafficModel", seed: int) -> float:
    """Mean output_len - 1 over the requests a run of `c` draws (its first seed): the bound's token count."""
    from experiments.config import load_config
    from experiments.run import experiment_inputs

    doc = {**c.config, "workload": traffic.workload({"kind": "poisson", "rate": 1.0}, c.num_requests), "seed": seed}
    out = experiment_inputs(load_config(doc), need_acceptance=False).workload.output_len
    return float(np.mean(out - 1))


def candidate_service_bound(c: Candidate, decode_tokens: float) -> float | None:
    """The analytic service-rate bound of `c` (experiments/plan/bounds.py) from its target profile."""
    from simulator.costs.roofline import profile_from_ref

    prof = c.config["server"]["target_profile"]
    profile = prof if hasattr(prof, "step_time") else profile_from_ref(prof, f"candidate {c.id!r} target_profile")
    return service_rate_bound(profile, int(c.config["server"]["max_num_seqs"]), c.max_draft_tokens, decode_tokens,
                              c.replicas)


def slo_out_of_reach(c: Candidate, plan: PlanConfig, traffic: "TrafficModel", seeds: list[int]) -> str:
    """TPOT_FLOOR_RULE: why no rate can meet the SLO ('' when the rule does not say so)."""
    from experiments.config import load_config
    from experiments.run import experiment_inputs
    from simulator.costs.roofline import profile_from_ref

    bound = plan.slo.tpot_s
    prof = c.config["server"]["target_profile"]
    if bound is None:
        return ""
    profile = prof if hasattr(prof, "step_time") else profile_from_ref(prof, f"candidate {c.id!r} target_profile")
    floor = tpot_floor(profile, c.max_draft_tokens)
    if floor is None or not floor > bound:
        return ""
    for seed in seeds:  # a one-token request has no TPOT: it could attain
        doc = {**c.config, "workload": traffic.workload({"kind": "poisson", "rate": 1.0}, c.num_requests),
               "seed": seed}
        if int(np.min(experiment_inputs(load_config(doc), need_acceptance=False).workload.output_len)) < 2:
            return ""
    return (f"no rate meets the SLO: every request's TPOT is at least {round_sig(floor)} s > the {bound:g} s bound "
            f"(step_time(1, 1, 0) / (k + 1) = {round_sig(floor)} s; {TPOT_FLOOR_RULE.split(':')[0]}); not simulated")


def _point(c: Candidate, workload: dict[str, Any], seed: int, slo: dict[str, Any],
           replay: dict[str, Any] | None, stop: dict[str, Any] | None = None) -> Point:
    """One simulation; `stop` (experiments/plan/early_stop.py: level, target, rate) lets it end once decided."""
    payload = {"evaluator": EVALUATOR, "config": {**c.config, "workload": workload, "seed": seed},
               "slo": slo, "replay": replay}
    if stop is not None:  # a key only when given: points without it hash as before
        payload["stop"] = stop
    return Point(payload)


def concurrent_sequences(c: Candidate) -> int:
    """Sequences the candidate runs at once over all replicas (PSD: both sub-batches, PSDConfig.concurrency)."""
    from simulator.server_config import PSDConfig

    m = int(c.config["server"]["max_num_seqs"])
    if c.mode.mode == "psd":
        m = PSDConfig.model_validate(c.config["runs"][0]["psd"]).concurrency(m)
    return m * c.replicas


def probe_point(c: Candidate, traffic: "TrafficModel", seed: int, slo: dict[str, Any]) -> Point:
    """The saturated probe of SERVICE_PROBE_RULE: a closed loop of PROBE_CLIENTS x the candidate's concurrent
    sequences, at least PROBE_REQUESTS_PER_CLIENT requests per client (and the curve runs' size)."""
    seqs = concurrent_sequences(c)
    clients = math.ceil(PROBE_CLIENTS * seqs)
    n = max(c.curve_requests, PROBE_REQUESTS_PER_CLIENT * clients)
    trim = max(math.ceil(SATURATED_TRIM_FRACTION * n), seqs)  # the drain: the last seqs finishes
    workload = traffic.workload({"kind": "closed_loop", "clients": clients, "think_time": 0.0}, n)
    return Point({"evaluator": EVALUATOR, "config": {**c.config, "workload": workload, "seed": seed},
                  "slo": slo, "replay": None, "probe": {"trim": trim, "clients": clients}})


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
    all_seeds = [derive_seed(plan.seed, f"replicate-{i}") for i in range(search.max_seeds)]  # SeedSchedule's
    seeds = all_seeds[:search.seeds]
    start = search.rate_start or traffic.target_rate
    decode_tokens: dict[int, float] = {}
    for c in active:  # sizes first, each checked before any candidate is simulated
        c.num_requests = traffic.requests_for(c.replicas)
        c.curve_requests = traffic.curve_requests_for(c.replicas)
        check_cluster_size(c.replicas, c.num_requests, f"candidate {c.id} (search.requests_per_replica, "
                           "search.tail_requests)")
    for c in active:
        if c.num_requests not in decode_tokens:
            decode_tokens[c.num_requests] = mean_decode_tokens(c, traffic, seeds[0])
        c.service_bound = candidate_service_bound(c, decode_tokens[c.num_requests])
        c.mean_output_tokens = decode_tokens[c.num_requests] + 1.0
        if traffic.plan.traffic.arrival != "replay":  # (replay: the same lengths; the rule needs a draw per seed)
            c.floor_note = slo_out_of_reach(c, plan, traffic, all_seeds)
    # the total is known only as an upper bound: it shrinks as searches end early and as first seeds settle rates
    total = len(active) * (search.max_tests * search.seeds + len(search.curve_fractions) + search.service_probe)
    schedules = {c.id: SeedSchedule(search.seeds, search.max_seeds, search.first_seed_settles) for c in active}
    target = plan.slo.attainment

    def stop(level: str, rate: float) -> dict[str, Any] | None:
        return {"level": level, "target": target, "rate": rate} if search.early_stop else None

    with ProgressBar(f"plan {plan.name}", total, console, progress) as bar, \
            SweepRunner(evaluate_plan_point, out / "points", backend, workers, address, bar) as runner:
        # one executor for every round: the pool's workers start once per plan (keeping their kernel and bundles)

        def prepare_searches(group: list[Candidate]) -> None:
            if search.service_probe:
                _service_probes([c for c in group if not c.floor_note], traffic, seeds[0], slo, runner)
            for c in group:
                probe = (c.probe or {}).get("service_req_s")
                c.search = RateSearch(start, search.rate_max, search.rel_tol, search.max_tests, c.service_bound,
                                      probe_service=probe)
                if c.floor_note:  # TPOT_FLOOR_RULE: nothing to simulate (its curve points: _curve_points)
                    c.search.stop()
                    bar.add_total(-(search.max_tests * search.seeds + search.service_probe))

        def run_searches(group: list[Candidate], target_only: bool = False) -> None:
            """Every search of `group` to its end (`target_only`: a search ends at its first rate unless it passes)."""
            while True:
                todo = [c for c in group if c.status == "ok" and not c.search.done]
                if not todo:
                    return
                batch, wanted = [], []
                for c in todo:  # FIRST_SEED_RULE (SeedSchedule): a new rate's first seed alone, then the others
                    rate = c.search.next_rate()
                    workload, replay = traffic.at_rate(rate, c.num_requests)
                    sched = schedules[c.id]
                    these = [all_seeds[j] for j in sched.wanted()]
                    if these and len(sched.runs) >= search.seeds:  # doubled seeds: beyond the bar's estimate
                        bar.add_total(len(these))
                    level = "settling" if sched.settling else "pooled"
                    batch += [_point(c, workload, s, slo, replay, stop(level, rate)) for s in these]
                    wanted.append(len(these))
                results = runner.run(batch)
                i = 0
                for c, k in zip(todo, wanted):
                    rate = c.search.next_rate()
                    sched = schedules[c.id]
                    got = results[i:i + k]
                    i += k
                    if not all(r["fits"] for r in got):
                        runs = sched.runs + got
                        sched.runs = []
                        c.status, c.reason = "does_not_fit", next(r["reason"] for r in got if not r["fits"])
                        bar.add_total(-(search.max_tests - len(c.search.verdicts)) * search.seeds + len(runs)
                                      - len(search.curve_fractions))
                        continue
                    settled = sched.give(rate, got, plan.slo.attainment)
                    if settled is None:
                        continue
                    verdict, runs = settled
                    if len(runs) < search.seeds:
                        bar.add_total(-(search.seeds - len(runs)))
                    c.evaluations.append({"rate": rate, "sustainable": verdict.passed, "decided": verdict.decided,
                                          "overloaded": verdict.overloaded, "why": verdict.why,
                                          "attainment": verdict.attainment,
                                          "attainment_interval": [verdict.attainment_low, verdict.attainment_high],
                                          "seeds": [{"seed": s, **r} for s, r in zip(all_seeds, runs)]})
                    c.search.record(verdict)
                    if target_only and len(c.search.verdicts) == 1 and not verdict.passed:
                        c.search.stop()
                        c.scope_note = (f"fails at the target rate {round_sig(rate)} req/s ({verdict.why}); lower "
                                        f"rates not searched ({SCOPE_RULE})")
                    if c.search.done:
                        bar.add_total(-(search.max_tests - len(c.search.verdicts)) * search.seeds)

        if search.scope == "all":
            prepare_searches(active)
            run_searches(active)
        else:
            _cheapest_scope(active, traffic.target_rate, prepare_searches, run_searches, bar, search)
        searched = [c for c in active if c.status == "ok"]
        if search.crossover:
            _crossovers(plan, searched, traffic, seeds, slo, runner, bar)
        _curve_points(plan, searched, traffic, seeds[0], slo, runner, bar, search.early_stop)
    doc = plan_document(plan, cands, prices, traffic, seeds, base)
    from experiments.plan.report import write_plots

    # plan.json last, the previous one removed first: a folder with plan.json is complete (plots included),
    # one that ran out of disk while plotting holds no plan.json that could be taken for this run's result
    (out / "plan.json").unlink(missing_ok=True)
    write_plots(doc, out)
    write_json_atomic(out / "plan.json", doc, indent=1)
    return {**doc, "_stats": {"computed": runner.stats.computed, "cached": runner.stats.cached}}


SCOPE_RULE = ("search.scope: cheapest: price levels in increasing $/h; at each, every candidate is probed and tested "
              "at the target rate, and those that pass are searched in full (their max rate breaks ties of price); "
              "the first level with a candidate sustaining the target ends the plan: every dearer candidate is not "
              "searched")


def _cheapest_scope(active: list[Candidate], target_rate: float, prepare, run, bar: ProgressBar, search) -> None:
    """SCOPE_RULE: only what the ranking needs; every candidate left out says why (status not_searched)."""
    per_candidate = search.max_tests * search.seeds + len(search.curve_fractions) + search.service_probe
    levels = sorted({c.usd_per_hour for c in active})
    for k, price in enumerate(levels):
        group = [c for c in active if c.usd_per_hour == price]
        prepare(group)
        tried = []
        for c in group:
            if c.floor_note:  # TPOT_FLOOR_RULE: out of reach, not simulated
                continue
            start = c.search.next_rate()
            if start < target_rate:  # its start is capped below the target: it cannot sustain it
                c.search.stop()
                cap = ("0.95 x its probed service rate" if c.probe and c.probe.get("service_req_s") else
                       "0.95 x its analytic service bound")
                c.status, c.reason = "not_searched", (f"cannot sustain the target: {cap} is {round_sig(start)} "
                                                      f"req/s < {round_sig(target_rate)} ({SCOPE_RULE})")
                bar.add_total(-(per_candidate - search.service_probe))
            else:
                tried.append(c)
        run(tried, target_only=True)  # first rate = the target: a pass is searched on to its max rate
        # the answer is the cheapest deployable candidate: a research row sustaining the target does not end the plan
        winners = [c for c in tried if c.status == "ok" and c.search.lo >= target_rate and c.deployable]
        if winners:
            best = min(winners, key=lambda c: c.id)
            for c in active:
                if c.usd_per_hour > price:
                    c.status, c.reason = "not_searched", (
                        f"not searched: ${c.usd_per_hour:g}/h > ${price:g}/h of {best.id!r}, which sustains the "
                        f"target ({SCOPE_RULE})")
                    bar.add_total(-per_candidate)
            return


def _service_probes(active: list[Candidate], traffic: "TrafficModel", seed: int, slo: dict[str, Any],
                    runner: SweepRunner) -> None:
    """SERVICE_PROBE_RULE: one saturated run per candidate, whatever the size of its search runs; its service rate
    in req/s on the candidate."""
    points = [probe_point(c, traffic, seed, slo) for c in active]
    for c, p, r in zip(active, points, runner.run(points)):
        if not r["fits"]:
            continue  # the search's first run reports the reason
        tok_s = r.get("tok_s")
        c.probe = {"requests": r.get("requests"), "clients": p.payload["probe"]["clients"], "tok_s": tok_s,
                   "service_req_s": tok_s / c.mean_output_tokens if tok_s and c.mean_output_tokens else None}


def ar_siblings(cands: list[Candidate]) -> dict[str, Candidate]:
    """Drafting candidate id -> the AR candidate on the same GPUs (GPU, TP, replicas, scheduler setting)."""
    def key(c: Candidate) -> tuple:
        return c.gpu, c.tp, c.replicas, json.dumps(c.scheduler, sort_keys=True)

    ar = {key(c): c for c in cands if c.mode.mode == "ar"}
    return {c.id: ar[key(c)] for c in cands if c.mode.mode != "ar" and key(c) in ar}


def _crossovers(plan: PlanConfig, active: list[Candidate], traffic: "TrafficModel", seeds: list[int],
                slo: dict[str, Any], runner: SweepRunner, bar: ProgressBar) -> None:
    """CROSSOVER_RULE (experiments/plan/crossover.py) for every searched drafting candidate with a searched AR
    sibling: its own search, both modes at each rate on the plan's seeds, runs of the SLO search's size."""
    s = plan.search
    sibling = ar_siblings(active)
    todo: dict[str, tuple[Candidate, Candidate, CrossoverSearch]] = {}
    for c in active:
        ar = sibling.get(c.id)
        if ar is None or c.search is None or ar.search is None:
            continue
        measured = [x.search.service_rate for x in (c, ar) if x.search.service_rate]
        if measured:
            top = MAX_UTILIZATION * min(measured)
        else:  # neither service rate measured (probe off, never overloaded): up to the higher max rate
            top = max(c.search.lo, ar.search.lo)
        if not top > 0:
            c.crossover = no_crossover("no rate range: neither mode sustains a rate or measured a service rate")
            continue
        todo[c.id] = (c, ar, CrossoverSearch(top, s.rel_tol, s.crossover_max_tests))
    while True:
        live = [v for v in todo.values() if not v[2].done]
        if not live:
            break
        batch = []
        for c, ar, cs in live:
            rate = cs.next_rate()
            workload, replay = traffic.at_rate(rate, c.num_requests)
            stop = {"level": "curve", "target": plan.slo.attainment, "rate": rate} if s.early_stop else None
            batch += [_point(x, workload, seed, slo, replay, stop) for x in (c, ar) for seed in seeds]
        bar.add_total(len(batch))
        results = runner.run(batch)
        k = len(seeds)
        for i, (c, ar, cs) in enumerate(live):
            got = results[2 * k * i: 2 * k * (i + 1)]
            cs.record(compare(cs.next_rate(), got[:k], got[k:]))
    for c, _, cs in todo.values():
        c.crossover = cs.result()


def _curve_points(plan: PlanConfig, active: list[Candidate], traffic: "TrafficModel", seed: int,
                  slo: dict[str, Any], runner: SweepRunner, bar: ProgressBar, early_stop: bool = False) -> None:
    """One simulation (first seed) at each curve fraction of every candidate's max rate: the latency curves."""
    batch, owners = [], []
    for c in active:
        fractions = plan.search.curve_fractions
        if c.status != "ok" or not c.search.lo > 0:
            bar.add_total(-len(fractions))
            continue
        for f in fractions:
            workload, replay = traffic.at_rate(f * c.search.lo, c.curve_requests)
            stop = {"level": "curve", "target": plan.slo.attainment, "rate": f * c.search.lo} if early_stop else None
            batch.append(_point(c, workload, seed, slo, replay, stop))
            owners.append((c, f * c.search.lo))
    for (c, rate), r in zip(owners, runner.run(batch)):
        if r["fits"]:
            c.evaluations.append({"rate": rate, "sustainable": None, "curve_only": True,
                                  "overloaded": bool(r.get("overloaded")), "seeds": [{"seed": seed, **r}]})


# ---------------------------------------------------------------- results


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return round_sig(sum(vals) / len(vals)) if vals else None


def _curve(c: Candidate) -> list[dict[str, Any]]:
    rows = []
    for e in sorted(c.evaluations, key=lambda e: e["rate"]):
        row = {"rate": round_sig(e["rate"]), "sustainable": e["sustainable"], "decided": e.get("decided"),
               "overloaded": e.get("overloaded"), "seeds": len(e["seeds"]),
               "attainment": e.get("attainment", _mean([s.get("steady_slo_attainment") for s in e["seeds"]])),
               "attainment_interval": e.get("attainment_interval"), "why": e.get("why")}
        stopped = [x["stopped"]["rule"] for x in e["seeds"] if x.get("stopped")]
        if stopped:  # the figures of a stopped run are those its rule leaves exact; the rest are None
            row["stopped_early"] = stopped
            if "strict fail" in stopped:  # the attainment of the most favourable completion: an upper bound
                row["attainment_at_most"], row["attainment"], row["attainment_interval"] = row["attainment"], None, None
        row.update({f"{m}_mean": _mean([s.get(m) for s in e["seeds"]]) for m in
                    ("steady_throughput_tok_s", "steady_ttft_p99_s", "steady_tpot_p99_s", "steady_e2e_p99_s",
                     "steady_e2e_mean_s", "steady_tpot_mean_s")})
        rows.append(row)
    return rows


def _vllm_serve(plan: PlanConfig, c: Candidate) -> dict[str, Any] | None:
    """The `vllm serve` command line of a deployable candidate (per replica); None for a research row."""
    from traces.catalog import get_model

    if not c.deployable:
        return None
    server = c.config["server"]
    args = [f"vllm serve {get_model(plan.candidates.target).hf_id}", f"--tensor-parallel-size {c.tp}",
            f"--max-num-seqs {server.get('max_num_seqs')}"]
    if server.get("max_num_batched_tokens"):
        args.append(f"--max-num-batched-tokens {server['max_num_batched_tokens']}")
    if plan.candidates.deployment.get("max_model_len"):
        args.append(f"--max-model-len {plan.candidates.deployment['max_model_len']}")
    if plan.candidates.deployment.get("gpu_memory_utilization"):
        args.append(f"--gpu-memory-utilization {plan.candidates.deployment['gpu_memory_utilization']}")
    # vLLM VLLM_VERSION schedules asynchronously unless told not to: the line states what was simulated
    args.append("--async-scheduling" if server.get("async_scheduling") else "--no-async-scheduling")
    if c.deploy.cli_arg():
        args.append(c.deploy.cli_arg())
    return {"replicas": c.replicas, "vllm_version": VLLM_VERSION, "runs": c.deploy.why, "command": " ".join(args)}


def candidate_result(c: Candidate, target_rate: float, plan: PlanConfig) -> dict[str, Any]:
    """One candidate's entry of plan.json."""
    doc: dict[str, Any] = {
        "id": c.id, "gpu": c.gpu, "tp": c.tp, "replicas": c.replicas, "mode": c.mode.name,
        "scheduler": c.scheduler, "status": c.status, "reason": c.reason or None, "num_gpus": c.num_gpus,
        "draft_gpus": c.mode.draft_gpus * c.replicas, "usd_per_hour": c.usd_per_hour, "target_costs": c.target_costs,
        "cost_notes": c.cost_notes, "placement": c.placement, "comparison": _comparison(c),
        "deploy": c.deploy.to_json() if c.deploy else None,
    }
    if c.status != "ok" or c.search is None:
        return doc
    s = c.search
    final = {v.rate: v for v in s.verdicts}  # verdicts as the search left them (some passes re-judged)
    for e in c.evaluations:
        v = final.get(e["rate"])
        if v is not None and not e.get("curve_only"):
            e.update(sustainable=v.passed, decided=v.decided, why=v.why)
    lo, hi = s.lo, s.hi
    i_lo, i_hi = s.interval
    at_lo = next((e for e in c.evaluations if e["rate"] == lo and not e.get("curve_only")), None)
    tok_s = _mean([x.get("steady_throughput_tok_s") for x in at_lo["seeds"]]) if at_lo else None
    # at the target rate every candidate serves the same requests: one output-token count per request for all (the
    # workload's mean), so candidates at one price tie exactly and the higher max rate ranks first
    out_per_req = c.mean_output_tokens or (
        _mean([x["steady_throughput_tok_s"] / x["steady_requests_per_s"] for x in at_lo["seeds"]
               if x.get("steady_requests_per_s") and x.get("steady_throughput_tok_s")]) if at_lo else None)
    meets = lo >= target_rate and lo > 0
    hourly = c.usd_per_hour
    doc.update({
        "num_requests_per_run": c.num_requests, "num_requests_per_curve_run": c.curve_requests,
        "service_bound_req_s": round_sig(c.service_bound) if c.service_bound else None,
        "simulations": sum(len(e["seeds"]) for e in c.evaluations) + (1 if c.probe and "tok_s" in c.probe else 0),
        "max_rate_req_s": round_sig(lo), "bracket_req_s": [round_sig(lo), round_sig(hi) if hi else None],
        "interval_req_s": [round_sig(i_lo), round_sig(i_hi) if i_hi else None],
        "at_search_ceiling": s.at_ceiling, "rates_tested": len(s.verdicts),
        "service_rate_req_s": round_sig(s.service_rate) if s.service_rate else None,
        "service_probe": ({k: round_sig(v) if isinstance(v, float) else v for k, v in c.probe.items()}
                          if c.probe else None),
        "throughput_tok_s_at_max_rate": tok_s,
        "usd_per_mtok_at_max_rate": round_sig(hourly / (tok_s * 3600) * 1e6) if tok_s else None,
        "meets_target_rate": meets,
        "usd_per_mtok_at_target_rate": (round_sig(hourly / (target_rate * out_per_req * 3600) * 1e6)
                                        if meets and out_per_req else None),
        "sd_vs_ar": c.crossover.to_json() if c.crossover else None,
        "vllm_serve": _vllm_serve(plan, c),
        "curve": _curve(c),
    })
    if c.floor_note:  # TPOT_FLOOR_RULE: out of reach at every rate, not simulated
        doc.update(max_rate_req_s=0.0, bracket_req_s=[0.0, 0.0], interval_req_s=[0.0, 0.0], reason=c.floor_note)
        return doc
    if c.scope_note:  # search.scope cheapest: tested at the target only
        doc.update(max_rate_req_s=None, bracket_req_s=[None, round_sig(hi) if hi else None],
                   interval_req_s=[None, round_sig(i_hi) if i_hi else None], reason=c.scope_note,
                   usd_per_mtok_at_max_rate=None, throughput_tok_s_at_max_rate=None)
        return doc
    if s.at_ceiling:
        doc["reason"] = "sustains the search ceiling (search.rate_max)"
    elif hi is None:
        doc["reason"] = f"every tested rate passed (search.max_tests reached at {round_sig(lo)} req/s)"
    if lo == 0:
        doc["reason"] = f"no tested rate met the SLO (the lowest tested, {round_sig(hi)} req/s, failed)"
    elif not meets:
        doc["reason"] = f"sustains {round_sig(lo)} req/s < target {round_sig(target_rate)}"
    return doc


def _comparison(c: Candidate) -> str:
    """The rule this candidate is compared at (concurrency per target replica, GPUs), from what it runs."""
    seqs = concurrent_sequences(c) // c.replicas
    if c.mode.mode == "psd":
        sub = c.config["runs"][0]["psd"]["sub_batch_max_num_seqs"]
        return (f"PSD: {seqs} sequences per target replica in all, split over its two sub-batches of {sub}; "
                f"{c.num_gpus} GPUs ({c.mode.draft_gpus * c.replicas} for drafting)")
    return f"{seqs} sequences per target replica; {c.num_gpus} GPUs"


def _assumptions(plan: PlanConfig, cands: list[Candidate], base: dict[str, Any] | None, notes: list[str]
                 ) -> dict[str, list[str]]:
    """What the answer rests on, in short lines: measured, borrowed, modelled (details: notes, rules)."""
    measured, borrowed, modelled = [], [], []
    for gpu, by_tp in sorted(plan.candidates.profiles.items()):
        for tp, ref in sorted(by_tp.items()):
            measured.append(f"target step times on {gpu} TP {tp}: {ref}")
    drafting = [c for c in cands if c.mode.mode != "ar"]
    for line in sorted({n for c in drafting for n in c.cost_notes if "measured on" in n}):
        measured.append(line)
    if base is not None and drafting:
        traces = base["traces"] if isinstance(base["traces"], str) else "generated traces"
        said = " ".join(n for n in notes if n.startswith("acceptance "))
        borrowed.append(f"acceptance replayed from {traces}"
                        + (", recorded for another target (notes)" if "acceptance borrowed" in said else "")
                        + (", some of it without a recorded target (notes)" if "without a target" in said else ""))
    scaled = sorted({n.split(":")[0] for c in drafting for n in c.cost_notes if "roofline-scaled" in n})
    if scaled:
        borrowed.append(f"{', '.join(scaled)}: a profile measured on one GPU, priced on the others by the datasheet "
                        "roofline ratio (rule draft_transfer)")
    if any("host CPU" in n for c in drafting for n in c.cost_notes):
        borrowed.append("n-gram drafting: a published host-side cost, the same on every GPU")
    roof = sorted({(c.gpu, c.tp) for c in cands if c.target_costs.startswith("roofline")})
    if roof:
        modelled.append(f"target step times of {len(roof)} of {len({(c.gpu, c.tp) for c in cands})} (GPU, TP) pairs: "
                        "roofline model from datasheets, not measured")
    modelled += _scheduling(cands)
    if any(c.mode.mode == "psd" for c in cands):
        modelled.append("PSD: max_num_seqs sequences in all per target replica, split over its two sub-batches")
    modelled += _engine_lines(cands)
    mtp = sorted({c.mode.name for c in drafting if is_mtp_mode(c.mode)})
    if mtp:
        modelled.append(f"MTP ({', '.join(mtp)}): the target's own head drafts k tokens per step, each a forward of "
                        "its layer (reused in turn past n_predict, as vLLM does), its weights and KV placed beside "
                        "the target's; unless the base config prices it, its forward is a roofline (traces/mtp.py)")
    if any(c.deployable and c.deploy.speculative_config
           and "num_speculative_tokens_per_batch_size" in c.deploy.speculative_config for c in cands):
        modelled.append("k by batch size: draftsim's batch is a step's decoding requests; vLLM's every scheduled "
                        "request (prefill chunks included)")
    modelled += [n for n in notes if n.startswith("n-gram acceptance replayed")]
    return {k: v for k, v in (("measured", measured), ("borrowed", borrowed), ("modelled", modelled)) if v}


def _engine_lines(cands: list[Candidate]) -> list[str]:
    """vLLM V1's KV lookahead slots and async scheduling as the simulated servers ran them (one line each)."""
    from simulator.engine.scheduler import DEFAULT_SCHEDULER

    servers = [c.config["server"] for c in cands]
    if not any(s.get("scheduler", DEFAULT_SCHEDULER) == "vllm-v1" for s in servers):
        return []
    slots = sorted({(c.mode.name, c.kv_lookahead) for c in cands if c.mode.mode == "sd"})
    held = [f"{name} {n}" for name, n in slots if n]
    lines = ["KV lookahead slots per running request (vLLM V1 reserves k for EAGLE/MTP/draft-model proposers, none "
             "for n-gram/suffix): " + (", ".join(held) if held else "none")]
    on = sorted({bool(s.get("async_scheduling")) for s in servers})
    if on == [True]:
        lines.append("async scheduling: on (--async-scheduling): each step's host work overlaps the forward before "
                     "it; a step's period is max(forward, host)")
    elif on == [False]:
        lines.append(f"async scheduling: off (--no-async-scheduling; vLLM {VLLM_VERSION} turns it on by default): "
                     "host work between steps adds to each step")
    else:
        lines.append("async scheduling: on for some candidates, off for others (each deploy line says which)")
    return lines


def _scheduling(cands: list[Candidate]) -> list[str]:
    """Which scheduler rules the candidates were simulated under (simulator/engine/scheduler.py SCHEDULERS), one
    line per scheduler; any other than vLLM V1's is flagged, since every deploy line runs vLLM V1."""
    from simulator.engine.scheduler import DEFAULT_SCHEDULER, scheduler_variant

    by: dict[str, list[Candidate]] = {}
    for c in cands:
        by.setdefault(c.config["server"].get("scheduler", DEFAULT_SCHEDULER), []).append(c)
    lines = []
    for name, group in sorted(by.items()):
        variant = scheduler_variant(name)
        some = "" if len(group) == len(cands) else f" ({len(group)} of {len(cands)} candidates)"
        chunked = sorted({bool(c.config["server"].get("chunked_prefill")) or variant.always_chunked for c in group})
        line = (f"scheduling simulated: server.scheduler {name}{some}, chunked prefill "
                f"{'/'.join('on' if x else 'off' for x in chunked)}: {variant.description}")
        if name != "vllm-v1":
            line += "; not vLLM V1's rules, which the deploy line runs"
        lines.append(line)
    return lines


def _best_research(meets: list[dict[str, Any]], answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first-ranked research row meeting the target, with what it would gain over the deployable answer."""
    row = next((d for d in meets if not d["deploy"]["deployable"]), None)
    if row is None:
        return None
    doc = {"id": row["id"], "why_not_deployable": row["deploy"]["why"], "usd_per_hour": row["usd_per_hour"],
           "max_rate_req_s": row["max_rate_req_s"]}
    if answer is None:
        doc["gain"] = "meets the target where no deployable candidate does"
    elif row["usd_per_hour"] < answer["usd_per_hour"]:
        saved = answer["usd_per_hour"] - row["usd_per_hour"]
        doc["gain"] = f"${round_sig(saved, 3):g}/h less ({saved / answer['usd_per_hour']:.0%} of the answer's cost)"
    elif row["usd_per_hour"] == answer["usd_per_hour"] and row["max_rate_req_s"] > answer["max_rate_req_s"]:
        doc["gain"] = (f"same $/h, max rate {row['max_rate_req_s'] / answer['max_rate_req_s'] - 1:+.0%} "
                       f"({round_sig(row['max_rate_req_s'], 3):g} vs {round_sig(answer['max_rate_req_s'], 3):g} req/s)")
    else:
        doc["gain"] = "none: the deployable answer is no dearer"
    return doc


def _rank_key(d: dict[str, Any]) -> tuple:
    if d["status"] == "ok" and d.get("meets_target_rate"):
        return (0, d["usd_per_hour"], d.get("usd_per_mtok_at_target_rate") or 0.0, -d["max_rate_req_s"], d["id"])
    if d["status"] == "ok":
        return (1, 0.0, 0.0, -(d.get("max_rate_req_s") or 0.0), d["id"])
    if d["status"] == "not_searched":  # search.scope cheapest
        return (2, d["usd_per_hour"], 0.0, 0.0, d["id"])
    return (3, 0.0, 0.0, 0.0, d["id"])  # does not fit


def _acceptance_note(plan: PlanConfig, base: dict[str, Any]) -> str | None:
    """Names acceptance traces recorded for another target than the one planned for (the rule of
    experiments/provenance.py, as `draftsim run` states it)."""
    from experiments.provenance import acceptance_provenance
    from experiments.run import resolve_bundle

    try:
        meta = resolve_bundle(base["traces"], plan.seed).meta
    except Exception:  # noqa: BLE001  (a bundle that cannot be read fails later with its own error)
        return None
    origins = [acceptance_provenance(meta, plan.candidates.target, d) for d in sorted(meta.drafters)]
    borrowed = [a for a in origins if a.origin == "borrowed"]
    unattributed = [a.drafter for a in origins if a.origin == "unattributed"]
    parts = []
    if borrowed:
        traces = base["traces"] if isinstance(base["traces"], str) else "generated"
        parts.append(f"acceptance borrowed: the traces ({traces}) were recorded for target "
                     f"{borrowed[0].recorded_target}, not {plan.candidates.target}; drafters "
                     f"{[a.drafter for a in borrowed]} keep that acceptance here")
    if unattributed:
        parts.append(f"acceptance given without a target: drafters {unattributed} replay levels that record no "
                     f"target (inline rates), so nothing says they were measured on {plan.candidates.target}")
    return "; ".join(parts) or None


def plan_document(plan: PlanConfig, cands: list[Candidate], prices: dict[str, GpuPrice], traffic: TrafficModel,
                  seeds: list[int], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """plan.json: the question, the rule, the prices and every candidate ranked (deterministic: no times)."""
    from simulator.measure.steady_state import OVERLOAD_RULE, WINDOW_RULE

    target = traffic.target_rate
    ranked = sorted((candidate_result(c, target, plan) for c in cands), key=_rank_key)
    meets = [d for d in ranked if d["status"] == "ok" and d.get("meets_target_rate")]
    cheapest = next((d["id"] for d in meets if d["deploy"]["deployable"]), None)
    research = _best_research(meets, next((d for d in meets if d["id"] == cheapest), None))
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
    if base is not None:
        borrowed = _acceptance_note(plan, base)
        if borrowed:
            notes.append(borrowed)
        lookup = lookup_note([(c.id, c.deploy) for c in cands if c.deploy], _drafter_specs(plan, base))
        if lookup:
            notes.append(lookup)
    sized = sorted({c.num_requests for c in cands if c.num_requests})
    q = plan.slo.attainment
    doc = {
        "name": plan.name, "description": plan.description,
        "question": {"target": plan.candidates.target, "target_rate_req_s": round_sig(target),
                     "traffic": plan.traffic.model_dump(mode="json"), "num_requests": sized,
                     "recorded_rate_req_s": round_sig(traffic.recorded_rate) if traffic.recorded_rate else None,
                     "slo": plan.slo.model_dump(mode="json")},
        "rule": {
            "window": WINDOW_RULE,
            "overload": OVERLOAD_RULE + "; an overloaded rate is never sustainable",
            "sustainable": (f"stable (not overloaded, seeds pooled) and the SLO attainment of the window "
                            f"requests reaches {q:g} at the low end of its 99.99% interval (a request attains when it "
                            "finishes within every bound); the answer is the highest sustainable rate tested, a lower "
                            "confidence bound on the rate where attainment falls to the target"),
            "interval": (f"attainment: Student-t intervals of {BATCHES} batch means per seed pooled over the "
                         f"seeds; a rate fails decidedly when the high end of the 95% interval is below {q:g}. Rate "
                         "interval: the answer to the lowest decided fail (or the measured service rate) among the "
                         "tested rates"),
            "scope": SCOPE_RULE if s.scope == "cheapest" else "all: every candidate searched to its max rate",
            "crossover": CROSSOVER_RULE if s.crossover else "off",
            "seeds_per_rate_rule": (FIRST_SEED_RULE if s.first_seed_settles else
                                    "every seed at every rate; while undecided the seeds are doubled, up to "
                                    "search.max_seeds"),
            "confidence": ANSWER_CONFIDENCE_RULE,
            "early_stop": EARLY_STOP_RULE if s.early_stop else "off: every run to its last request",
            "service_probe": SERVICE_PROBE_RULE if s.service_probe else "off",
            "size": (f"each run holds at least {s.tail_requests}/(1 - {q:g}) window requests and "
                     f"{s.requests_per_replica} requests per replica (given: {traffic.num_requests})"),
            "service_bound": SERVICE_BOUND_RULE,
            "tpot_floor": TPOT_FLOOR_RULE,
            "search": (f"start at {round_sig(s.rate_start or target)} req/s (or {BELOW_SERVICE:g} x the candidate's "
                       "service bound, or x its probed service rate, when lower), double while passing (never past "
                       f"{MAX_UTILIZATION:g} x a measured service rate)"
                       + (f" (up to {s.rate_max:g})" if s.rate_max else "")
                       + f"; after an overloaded run try {BELOW_SERVICE:g} x its measured service rate (no rate "
                       f"above {MAX_UTILIZATION:g} x it passes); bisect until the "
                       f"bracket is within {s.rel_tol:g} of its top, at most {s.max_tests} rates; then, for the "
                       f"curves only, one run (first seed, {CURVE_SIZE_FRACTION:g} x the search runs' size: the "
                       f"curves read means) at {', '.join(f'{f:g}' for f in s.curve_fractions)} x the max rate"),
            "comparison": ("modes compared at the same max_num_seqs per target replica (PSD: that many in all, "
                           "split over its two sub-batches: simulator/server_config.py PSDConfig.split) and priced "
                           "per GPU, draft GPUs included"),
            "draft_transfer": (DRAFT_TRANSFER_RULE if plan.candidates.draft_transfer == "roofline" else
                               "refuse: a drafter profile measured on another GPU than the candidate's is an error"),
            "deploy": (f"the answer is the cheapest candidate that meets the target and that vLLM can run as simulated "
                       f"({VLLM_RULES}): AR, fixed k (--speculative-config with the simulated method, k and proposer "
                       "settings; MTP: method mtp, the target's own head, k within vLLM's n_predict rule) or k by "
                       "batch size (num_speculative_tokens_per_batch_size); acceptance-driven k, bandits, "
                       "per-request drafter choice and PSD are research rows, never the deploy line"),
            "seeds": seeds, "seeds_per_rate": s.seeds, "max_seeds_per_rate": s.max_seeds,
        },
        "prices": {g: {"usd_per_gpu_hour": prices[g].usd_per_hour, "source": prices[g].source} for g in used},
        "cheapest": cheapest,
        "deploy": next((d["vllm_serve"] for d in ranked if d["id"] == cheapest), None),
        "best_research": research,
        "assumptions": _assumptions(plan, cands, base, notes),
        "notes": notes,
        "candidates": ranked,
    }
    return json_ready(doc)
