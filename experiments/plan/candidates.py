"""The candidate space of a plan: every deployment (GPU type x TP x replicas x mode x scheduler setting) with
what is known before any simulation: its experiment config, placement and fit, price, deploy line and bounds."""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from experiments.config import ExperimentConfig
from experiments.plan.config import Mode, PlanConfig
from experiments.plan.crossover import Crossover
from experiments.plan.deploy import Deploy, deploy_of, is_mtp_mode
from experiments.plan.evaluations import Evaluation, ServiceProbe
from experiments.plan.bounds import TPOT_FLOOR_RULE, service_rate_bound, tpot_floor
from experiments.plan.search import RateSearch
from experiments.plan.prices import GpuPrice
from simulator.engine.rules.kv import lookahead_slots
from simulator.measure.metrics import round_sig
from simulator.server_config import RunSpec
from traces.catalog import MTP_SUFFIX
from experiments.plan.point_config import candidate_experiment, point_experiment
from experiments.plan.traffic import TrafficModel


@dataclass(frozen=True)
class SchedulerSetting:
    """One point of the plan's `candidates.scheduler` grid: the server keys it sets and their values, in the plan's
    key order (plan.json `scheduler` is this mapping)."""

    values: tuple[tuple[str, Any], ...] = ()

    def server(self) -> dict[str, Any]:
        """The server keys this setting sets."""
        return dict(self.values)

    def label(self, varied: set[str]) -> str:
        """The candidate id's tail: ` key=value` for each key the grid varies."""
        return "".join(f" {k}={v}" for k, v in self.values if k in varied)

    def key(self) -> str:
        """The setting as a canonical string (the AR sibling's match, experiments/plan/candidates.py ar_siblings)."""
        return json.dumps(self.server(), sort_keys=True)


@dataclass
class Candidate:
    """One deployment to evaluate, with what is known before any simulation: its experiment config as the document
    every point sends (`config`, hashed for the point cache) and as the typed config it validated to (`experiment`,
    experiments/plan/point_config.py)."""

    id: str
    gpu: str
    tp: int
    replicas: int
    mode: Mode
    scheduler: SchedulerSetting
    config: dict[str, Any]  # experiment config document without workload and seed
    experiment: ExperimentConfig  # `config` validated (a placeholder workload): what the planner reads
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
    probe: ServiceProbe | None = None  # the saturated service-rate run (SERVICE_PROBE_RULE) and its figure
    scope_note: str = ""  # search.scope cheapest: why this candidate's search stopped at the target rate
    floor_note: str = ""  # TPOT_FLOOR_RULE: why no rate can meet the SLO (no simulation)
    search: RateSearch | None = None
    evaluations: list[Evaluation] = field(default_factory=list)  # every rate run: search verdicts, curve points
    deploy: Deploy | None = None  # what vLLM runs for this candidate, or why it cannot (experiments/plan/deploy.py)
    crossover: Crossover | None = None  # SD vs AR on the same GPUs (experiments/plan/crossover.py)

    @property
    def deployable(self) -> bool:
        return self.deploy is not None and self.deploy.deployable


def _deployment(plan: PlanConfig, gpu: str, tp: int, mode: Mode) -> dict[str, Any]:
    dep: dict[str, Any] = {"target": plan.candidates.target, "gpu": gpu, "num_gpus": tp, "tp": tp,
                           **plan.candidates.deployment.given()}
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
    doc = {"kind": "roofline", "model": plan.candidates.target, "gpu": gpu, "tp": tp, **knobs.given()}
    return doc, f"roofline (mfu {knobs.mfu}, bandwidth {knobs.bandwidth_util}; not calibrated)"


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


def _candidate_id(gpu: str, tp: int, replicas: int, mode: Mode, sched: SchedulerSetting, varied: set[str]) -> str:
    return f"{gpu} tp{tp} x{replicas} {mode.name}{sched.label(varied)}"


def base_experiment(plan: PlanConfig) -> dict[str, Any]:
    """The base experiment config as a validated doc, with the plan's traces/drafters/SLO applied."""
    from experiments.config import load_config

    cfg = load_config(plan.base, label=f"{plan.name}: base")
    doc = cfg.model_dump(mode="json", exclude={"sweep"})
    if plan.traces is not None:  # the document it was given (traces/source.py dumps a source as given)
        doc["traces"] = plan.traces.model_dump(mode="json")
    if plan.drafters is not None:  # each as the plan gave it (PlanConfig's dump: the keys it set)
        doc["drafters"] = plan.model_dump(mode="json", include={"drafters"})["drafters"]
    slo = {k: v for k, v in (("ttft_s", plan.slo.ttft_s), ("tpot_s", plan.slo.tpot_s)) if v is not None}
    doc.update(name=plan.name, baseline=None, timeline_max_steps=0, slo=slo)
    return doc


def bundle_drafter_specs(plan: PlanConfig, base: dict[str, Any]) -> dict[str, Any]:
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
    from simulator.costs.placement import kv_capacity_tokens

    cands = plan.candidates
    missing = sorted({g.lower() for g in cands.gpus} - set(prices))
    if missing:
        raise ValueError(f"prices: no price for GPU(s) {missing}; add them to the price file or to "
                         "prices.usd_per_gpu_hour")
    grid = cands.scheduler.items()
    keys = [key for key, _ in grid]
    settings = [SchedulerSetting(tuple(zip(keys, combo))) for combo in itertools.product(*(v for _, v in grid))]
    drafter_specs = bundle_drafter_specs(plan, base)
    out = []
    for gpu, tp, replicas, mode, sched in itertools.product(cands.gpus, cands.tp, cands.replicas, cands.modes,
                                                            settings):
        gpu = gpu.lower()
        cid = _candidate_id(gpu, tp, replicas, mode, sched, {k for k, v in grid if len(v) > 1})
        profile, source = _target_profile(plan, gpu, tp)
        dep = _deployment(plan, gpu, tp, mode)
        server = {**base["server"], **sched.server(), "target_profile": profile, "deployment": dep,
                  "kv_capacity_tokens": None, "num_target_gpus": tp, "num_draft_gpus": mode.draft_gpus}
        seqs = int(server["max_num_seqs"])
        run = mode.run_spec(seqs)
        # the linear-attention state placement holds: every sequence the run holds at once (PSD: both sub-batches),
        # ServerConfig.placement_deployment's default, written into the document the points send
        dep["max_num_seqs"] = RunSpec.model_validate(run).running_sequences(seqs)
        config = {**base, "server": server, "runs": [run],
                  "drafters": _drafters_on(base.get("drafters", {}), gpu,
                                           cands.draft_transfer if mode.mode != "ar" else None,
                                           f"{plan.name}: candidate {cid!r}")}
        if is_mtp_mode(mode):
            _mtp_drafters(plan, mode, config, drafter_specs, gpu, tp)
        if replicas > 1:  # one simulation of the whole cluster (simulator/cluster/simulation.py)
            config["cluster"] = {"replicas": replicas, "router": cands.router.model_dump(mode="json", exclude_none=True)}
        num_gpus = (tp + mode.draft_gpus) * replicas
        where = f"{plan.name}: candidate {cid!r}"
        # a bad scheduler value or policy fails here, before any simulation; typed once, every point derives from it
        experiment = candidate_experiment(config, label=where)
        c = Candidate(cid, gpu, tp, replicas, mode, sched, config, experiment, target_costs=source,
                      cost_notes=_drafter_notes(config, mode, tp), num_gpus=num_gpus,
                      usd_per_hour=round_sig(num_gpus * prices[gpu].usd_per_hour))
        try:
            placement = kv_capacity_tokens(dep, where=f"{where} deployment")
        except ValueError as e:
            raise ValueError(str(e)) from None
        c.placement = placement.summary()
        if not placement.fits:
            c.status, c.reason = "does_not_fit", placement.message
        if mode.mode != "ar":
            import oracle.registry  # noqa: F401  (registers the ground-truth policies)
            from policies.registry import make_policy

            policy = make_policy(mode.policy, where=f"{where}: modes[{mode.name}].policy")
            c.max_draft_tokens = policy.max_draft_tokens()
            if mode.mode == "sd":  # as the simulated server reserves them (Server._lookahead)
                kinds = [getattr(drafter_specs.get(d), "kind", "") for d in policy.drafters_used()]
                c.kv_lookahead = lookahead_slots(kinds, c.max_draft_tokens, experiment.server.scheduler)
        c.deploy = deploy_of(mode, drafter_specs, tp, seqs, f"{plan.name}: candidates.modes[{mode.name}]",
                             target=cands.target)
        out.append(c)
    return out


def concurrent_sequences(c: Candidate) -> int:
    """Sequences the candidate runs at once over all replicas (PSD: both sub-batches, RunSpec.running_sequences)."""
    return c.experiment.runs[0].running_sequences(c.experiment.server.max_num_seqs) * c.replicas


def ar_siblings(cands: list[Candidate]) -> dict[str, Candidate]:
    """Drafting candidate id -> the AR candidate on the same GPUs (GPU, TP, replicas, scheduler setting)."""
    def key(c: Candidate) -> tuple:
        return c.gpu, c.tp, c.replicas, c.scheduler.key()

    ar = {key(c): c for c in cands if c.mode.mode == "ar"}
    return {c.id: ar[key(c)] for c in cands if c.mode.mode != "ar" and key(c) in ar}


def _draw(c: Candidate, traffic: "TrafficModel", seed: int) -> np.ndarray:
    """The output lengths of the requests a run of `c` draws with `seed` (whatever the rate)."""
    from experiments.run import experiment_inputs

    doc = {**c.config, "workload": traffic.workload({"kind": "poisson", "rate": 1.0}, c.num_requests), "seed": seed}
    return experiment_inputs(point_experiment(doc, f"candidate {c.id!r}"), need_acceptance=False).workload.output_len


def mean_decode_tokens(c: Candidate, traffic: "TrafficModel", seed: int) -> float:
    """Mean output_len - 1 over the requests a run of `c` draws (its first seed): the bound's token count."""
    return float(np.mean(_draw(c, traffic, seed) - 1))


def _step_profile(c: Candidate) -> Any:
    """The candidate's target latency profile (a reference resolved, an object as given)."""
    from simulator.costs.roofline import profile_from_ref

    prof = c.experiment.server.target_profile
    return prof if hasattr(prof, "step_time") else profile_from_ref(prof, f"candidate {c.id!r} target_profile")


def candidate_service_bound(c: Candidate, decode_tokens: float) -> float | None:
    """The analytic service-rate bound of `c` (experiments/plan/bounds.py) from its target profile."""
    return service_rate_bound(_step_profile(c), c.experiment.server.max_num_seqs, c.max_draft_tokens, decode_tokens,
                              c.replicas)


def slo_out_of_reach(c: Candidate, plan: PlanConfig, traffic: "TrafficModel", seeds: list[int]) -> str:
    """TPOT_FLOOR_RULE: why no rate can meet the SLO ('' when the rule does not say so)."""
    bound = plan.slo.tpot_s
    if bound is None:
        return ""
    floor = tpot_floor(_step_profile(c), c.max_draft_tokens)
    if floor is None or not floor > bound:
        return ""
    for seed in seeds:  # a one-token request has no TPOT: it could attain
        if int(np.min(_draw(c, traffic, seed))) < 2:
            return ""
    return (f"no rate meets the SLO: every request's TPOT is at least {round_sig(floor)} s > the {bound:g} s bound "
            f"(step_time(1, 1, 0) / (k + 1) = {round_sig(floor)} s; {TPOT_FLOOR_RULE.split(':')[0]}); not simulated")


def size_candidates(active: list[Candidate], plan: PlanConfig, traffic: "TrafficModel", seeds: list[int]) -> None:
    """Before any simulation: every candidate's run sizes (each checked against its replicas first), then its
    analytic service bound, mean output length and TPOT floor (`seeds`: every seed a rate may run)."""
    from simulator.scenario import check_cluster_size

    for c in active:  # sizes first, each checked before any candidate is simulated
        c.num_requests = traffic.requests_for(c.replicas)
        c.curve_requests = traffic.curve_requests_for(c.replicas)
        check_cluster_size(c.replicas, c.num_requests, f"candidate {c.id} (search.requests_per_replica, "
                           "search.tail_requests)")
    decode_tokens: dict[int, float] = {}
    for c in active:
        if c.num_requests not in decode_tokens:
            decode_tokens[c.num_requests] = mean_decode_tokens(c, traffic, seeds[0])
        c.service_bound = candidate_service_bound(c, decode_tokens[c.num_requests])
        c.mean_output_tokens = decode_tokens[c.num_requests] + 1.0
        if traffic.plan.traffic.arrival != "replay":  # (replay: the same lengths; the rule needs a draw per seed)
            c.floor_note = slo_out_of_reach(c, plan, traffic, seeds)
