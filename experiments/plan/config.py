"""The `draftsim plan` config: traffic, SLOs, the bisection rule and the candidate space, validated up front.

    name: plan_llama8b
    base: default                      # experiment config giving traces, drafters and server defaults
    traffic: {target_rate: 20, arrival: poisson, num_requests: 300}     # or gamma {cv}, replay {file}
    slo: {ttft_s: 2.0, tpot_s: 0.05, e2e_s: null, attainment: 0.99}
    search: {seeds: 3, rel_tol: 0.05, rate_max: null}
    candidates:
      target: llama3.1-8b
      gpus: [h100-80gb, a100-80gb]
      tp: [1, 2]
      replicas: [1, 2]                 # N > 1: N replicas behind a router, simulated as one cluster
      router: {name: least_outstanding}
      modes: [{name: AR, mode: ar}, {name: eagle3-k3, mode: sd, policy: {name: fixed, drafter: eagle3, k: 3}}]
      scheduler: {max_num_seqs: [64, 128]}
    prices: {usd_per_gpu_hour: {h100-80gb: 2.5}}
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SerializeAsAny, ValidationError, create_model, field_serializer, field_validator, \
    model_validator

from experiments.config import check_slo_seconds
from policies.registry import PolicySpec, policy_spec
from simulator.cluster.config import RouterSpec
from simulator.costs.draft_cost import DraftCostConfig
from simulator.costs.deployment_config import DeploymentConfig
from simulator.costs.roofline import OVERLAPS, RooflineProfile
from simulator.server_config import PSDConfig, ServerConfig
from traces.config_base import StrictModel as _Strict
from traces.config_base import ConfigError
from traces.config_given import GivenModel
from traces.limits import MAX_NUM_REQUESTS, MAX_PLAN_CANDIDATES, MAX_REPLICAS
from traces.source import TraceSource

MAX_RATE = 1e9  # req/s: far above any deployment; a typo fails here, not as an overflow in a search
ROOFLINE_KNOBS = {"mfu": (0.0, 1.0, False), "bandwidth_util": (0.0, 1.0, False),  # (low, high, low allowed)
                  "allreduce_latency_s": (0.0, 1.0, True), "floor_s": (0.0, 10.0, True), "host_s": (0.0, 1.0, True)}


class Traffic(_Strict):
    """What the deployment must serve. The search scales the arrival rate; everything else stays fixed."""

    target_rate: float | None = Field(None, gt=0, le=MAX_RATE, description="req/s to provision for (replay: default = the "
                                                                 "recorded trace's mean rate)")
    arrival: Literal["poisson", "gamma", "replay"] = "poisson"
    cv: float | None = Field(None, gt=0, le=1000, description="gamma: coefficient of variation of inter-arrival gaps")
    file: str | None = Field(None, description="replay: recorded arrival times, one per line (s); the search "
                                               "rescales them in time to each rate")
    num_requests: int | None = Field(None, ge=1, le=MAX_NUM_REQUESTS, description="requests per simulation at "
                                     "least (default: the base config's); runs are lengthened to resolve the SLO "
                                     "quantile (search.tail_requests)")
    lengths: dict[str, Any] | None = Field(None, description="workload.lengths (default: the base config's)")
    sample: dict[str, Any] | None = Field(None, description="workload.sample (default: the base config's)")

    @model_validator(mode="after")
    def _kind(self) -> "Traffic":
        if self.arrival == "gamma" and self.cv is None:
            raise ValueError("traffic.cv: required for gamma arrivals")
        if self.arrival != "gamma" and self.cv is not None:
            raise ValueError("traffic.cv: only gamma arrivals take a cv")
        if self.arrival == "replay" and not self.file:
            raise ValueError("traffic.file: replay needs a file of recorded arrival times (the bundle's own times "
                             "cannot be rescaled to other rates)")
        if self.arrival != "replay" and self.file is not None:
            raise ValueError("traffic.file: only replay arrivals take a file")
        if self.arrival != "replay" and self.target_rate is None:
            raise ValueError("traffic.target_rate: required (requests per second to provision for)")
        return self


class PlanSLO(_Strict):
    """Latency bounds (seconds, None = unbounded; an implausibly large one, typed in ms, is refused) and the fraction
    of requests that must meet all of them."""

    ttft_s: float | None = Field(None, gt=0, le=1e6)
    tpot_s: float | None = Field(None, gt=0, le=1e6)
    e2e_s: float | None = Field(None, gt=0, le=1e6)
    attainment: float = Field(0.99, gt=0, le=1, description="fraction of requests within every bound (0.99: p99)")

    @model_validator(mode="after")
    def _detects_overload(self) -> "PlanSLO":
        if self.ttft_s is None and self.e2e_s is None:
            raise ValueError("slo: give ttft_s or e2e_s: under overload queues grow without bound but TPOT does "
                             "not, so a TPOT bound alone cannot tell a sustainable rate from an unsustainable one")
        check_slo_seconds(self.model_dump(), "")  # a bound typed in ms (ttft_s: 250) is refused, as in run configs
        return self

    def bounds(self) -> dict[str, float | None]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}


class Search(_Strict):
    """The rate search (experiments/plan/search.py): per rate, `seeds` runs sized from the SLO's quantile."""

    seeds: int = Field(3, ge=1, le=100, description="runs per tested rate (attainment batch means are pooled "
                                                    "over them)")
    max_seeds: int = Field(48, ge=1, le=400, description="a rate still undecided after `seeds` runs gets its seeds "
                           "doubled up to this many (default: 48, or `seeds` when more; experiments/plan/search.py "
                           "SeedSchedule): runs spent near the answer; the stated confidence is checked with the "
                           "default")
    rel_tol: float = Field(0.02, gt=0, lt=1, description="stop when the highest passing and the lowest failing "
                                                         "rate are within this fraction of the latter")
    max_tests: int = Field(12, ge=1, le=60, description="rates tested per candidate at most")
    rate_max: float | None = Field(None, gt=0, le=MAX_RATE, description="search ceiling, req/s (default: none)")
    rate_start: float | None = Field(None, gt=0, le=MAX_RATE, description="first rate tested (default: the "
                                                                          "target rate)")
    tail_requests: int = Field(50, ge=1, le=MAX_NUM_REQUESTS, description="size: each run holds at least "
                               "tail_requests / (1 - attainment) steady-state requests (50: ~50 expected misses "
                               "at the SLO's quantile)")
    requests_per_replica: int = Field(500, ge=1, le=MAX_NUM_REQUESTS, description="size: at least this many "
                                                                                  "requests per replica")
    first_seed_settles: bool = Field(True, description="a rate's first seed runs alone and settles a clear rate "
                                     "(experiments/plan/search.py FIRST_SEED_RULE); false: every seed at every rate")
    scope: Literal["all", "cheapest"] = Field("all", description="all: every candidate's max rate; cheapest: only "
                                              "what the ranking needs (experiments/plan/search_runs.py SCOPE_RULE), every "
                                              "other candidate listed as not searched with the reason")
    early_stop: bool = Field(True, description="a run ends once its verdict is decided (experiments/plan/early_stop.py "
                             "EARLY_STOP_RULE); false: every run to its last request")
    service_probe: bool = Field(True, description="one saturated run per candidate measures its service rate first "
                                "(experiments/plan/point.py SERVICE_PROBE_RULE): nothing above 0.95 x it is tested")
    crossover: bool = Field(True, description="search each drafting candidate's SD-vs-AR crossover rate "
                            "(experiments/plan/crossover.py CROSSOVER_RULE): both modes on the plan's seeds per rate")
    crossover_max_tests: int = Field(8, ge=2, le=60, description="rates compared per SD-vs-AR crossover at most")
    curve_fractions: list[float] = Field([0.25, 0.5, 0.75], max_length=100, description="after the search, one more simulation "
                                         "(first seed) at each fraction of the max rate, for the latency curves")

    @model_validator(mode="after")
    def _fractions(self) -> "Search":
        if self.max_seeds < self.seeds:
            if "max_seeds" in self.model_fields_set:
                raise ValueError(f"search.max_seeds: expected at least search.seeds ({self.seeds}), got "
                                 f"{self.max_seeds}")
            object.__setattr__(self, "max_seeds", self.seeds)  # the default never asks for fewer seeds than given
        if any(not 0 < f < 1 for f in self.curve_fractions):
            raise ValueError(f"search.curve_fractions: expected fractions in (0, 1), got {self.curve_fractions}")
        return self


def _roofline_default(knob: str) -> Any:
    """RooflineProfile's default of `knob` (the one home of the roofline defaults)."""
    return RooflineProfile.__dataclass_fields__[knob].default


class RooflineKnobs(GivenModel):
    """`candidates.roofline`: how every (GPU, TP) without a measured profile is priced; an unset knob is
    RooflineProfile's default. The candidate's profile document carries only the knobs given (`given`)."""

    mfu: float = _roofline_default("mfu")
    bandwidth_util: float = _roofline_default("bandwidth_util")
    allreduce_latency_s: float = _roofline_default("allreduce_latency_s")
    floor_s: float = _roofline_default("floor_s")
    host_s: float = _roofline_default("host_s")
    overlap: Literal[OVERLAPS] = _roofline_default("overlap")

    @model_validator(mode="before")
    @classmethod
    def _knobs_in_range(cls, doc: Any) -> Any:
        """Each knob a number in the plan's range (ROOFLINE_KNOBS), overlap one of OVERLAPS; errors name the knob."""
        if not isinstance(doc, dict):
            return doc
        unknown = set(doc) - set(ROOFLINE_KNOBS) - {"overlap"}
        if unknown:
            raise ValueError(f"candidates.roofline: unknown key(s) {sorted(unknown)}")
        for knob, value in doc.items():
            if knob == "overlap":
                if value not in OVERLAPS:
                    raise ValueError(f"candidates.roofline.overlap: expected one of {OVERLAPS}, got {value!r}")
                continue
            low, high, low_ok = ROOFLINE_KNOBS[knob]
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not (low <= value if low_ok else low < value) or value > high:
                raise ValueError(f"candidates.roofline.{knob}: expected a number in {'[' if low_ok else '('}{low:g}, "
                                 f"{high:g}], got {value!r}")
        return doc

    def given(self) -> dict[str, Any]:
        """The knobs the plan set, in its order (what the candidate's roofline profile document adds; an unset knob
        is the profile's default, never written into a document)."""
        return self.model_dump(mode="json")


# server keys a candidate sets itself (GPU, TP, mode): never a scheduler setting
CANDIDATE_SERVER_KEYS = ("kv_capacity_tokens", "deployment", "target_profile", "num_target_gpus", "num_draft_gpus")


class _GridBase(GivenModel):
    """The base of SchedulerGrid: the keys in the plan's order (the grid's product and candidate ids follow it)."""

    @model_validator(mode="before")
    @classmethod
    def _not_set_by_candidate(cls, doc: Any) -> Any:
        for key in doc if isinstance(doc, dict) else ():
            if key in CANDIDATE_SERVER_KEYS:
                raise ValueError(f"candidates.scheduler.{key}: set by the candidate (GPU, TP, mode), not a "
                                 "scheduler setting")
        return doc

    @model_validator(mode="after")
    def _non_empty(self) -> "_GridBase":
        for key in type(self).model_fields:
            values = getattr(self, key)
            if values is not None and not values:
                raise ValueError(f"candidates.scheduler.{key}: expected a non-empty list of values")
        return self

    def items(self) -> list[tuple[str, list[Any]]]:
        """(server key, its values) for each key the plan set, in the plan's order."""
        return [(key, getattr(self, key)) for key in self.given_keys()]


def _grid_value(name: str) -> Any:
    """A list of values of ServerConfig field `name`, each checked by that field's own type and bounds."""
    info = ServerConfig.model_fields[name]
    return list[Annotated[(info.annotation, *info.metadata)]] if info.metadata else list[info.annotation]


# `candidates.scheduler`: server key -> the values the grid takes, typed by ServerConfig's fields
SchedulerGrid = create_model(
    "SchedulerGrid", __base__=_GridBase, __doc__="`candidates.scheduler`: a grid of ServerConfig settings, each key a "
    "list of that field's values (checked by its type and bounds; the rest when each candidate's server validates).",
    **{name: (_grid_value(name) | None, None) for name in ServerConfig.model_fields
       if name not in CANDIDATE_SERVER_KEYS})


class Mode(_Strict):
    """One serving mode: a run of the experiment model (AR / SD / PSD with a policy) and where the drafter lives."""

    name: str = Field(min_length=1)
    mode: Literal["ar", "sd", "psd"]
    policy: SerializeAsAny[PolicySpec] | None = Field(None, description=(
        "{name: ..., **params}, parsed once into the policy's PolicySpec record (policies/registry.py)"))
    psd: PSDConfig | None = None
    switch_cost_s: float = Field(0.0, ge=0, le=3600)
    drafter_model: str | None = Field(None, description="catalog model of the drafter, for its memory (None: "
                                                        "not counted, e.g. an n-gram or a head too small to matter); "
                                                        "`TARGET:mtp`: the target's own MTP head (an MTP mode: placed "
                                                        "beside the target, priced by traces/mtp.py, deployed as "
                                                        "vLLM method mtp)")
    placement: Literal["colocated", "dedicated"] | None = Field(None, description="default: colocated for sd, "
                                                                                  "dedicated for psd")
    drafter_gpus: int = Field(1, ge=1, le=1024, description="GPUs of a dedicated drafter")
    vllm_speculative_config: dict[str, Any] | None = Field(None, description="what `vllm serve "
                                                          "--speculative-config` takes for this mode (printed for "
                                                          "the chosen candidate; checked against vLLM's rules and the "
                                                          "simulated policy: experiments/plan/deploy.py)")

    @field_validator("policy", mode="before")
    @classmethod
    def _policy_spec(cls, v: Any) -> Any:
        """A policy mapping becomes its PolicySpec record, as a run's does (errors name the key below `policy`)."""
        return v if v is None or isinstance(v, PolicySpec) else policy_spec(v, "policy")

    @model_validator(mode="after")
    def _placement(self) -> "Mode":
        if self.mode == "psd" and self.placement == "colocated":
            raise ValueError(f"modes[{self.name}].placement: PSD drafts on a dedicated GPU")
        if self.mode == "ar" and (self.drafter_model or self.placement):
            raise ValueError(f"modes[{self.name}]: an AR mode has no drafter")
        if self.psd is not None and self.psd.sub_batch_max_num_seqs is not None:
            raise ValueError(f"modes[{self.name}].psd.sub_batch_max_num_seqs: set by the plan: a PSD candidate runs "
                             "its max_num_seqs sequences in all, split over its two sub-batches (PSDConfig.split)")
        from experiments.plan.deploy import check_mode

        check_mode(self, f"modes[{self.name}]")
        return self

    @property
    def where(self) -> str:
        return self.placement or ("dedicated" if self.mode == "psd" else "colocated")

    @property
    def draft_gpus(self) -> int:
        return self.drafter_gpus if self.mode != "ar" and self.where == "dedicated" else 0

    def run_spec(self, max_num_seqs: int) -> dict[str, Any]:
        """The run of a candidate at `max_num_seqs` per target replica (PSD: that many in all, split over its two
        sub-batches: PSDConfig.split)."""
        doc: dict[str, Any] = {"name": self.name, "mode": self.mode, "switch_cost_s": self.switch_cost_s}
        if self.policy is not None:
            doc["policy"] = self.policy.model_dump(mode="json")
        if self.mode == "psd":
            doc["psd"] = PSDConfig.split(max_num_seqs, **(self.psd.model_dump(exclude={"sub_batch_max_num_seqs"})
                                                        if self.psd else {})).model_dump(mode="json")
        return doc


class Candidates(_Strict):
    """The space searched: every GPU x TP x replicas x mode x scheduler setting."""

    target: str = Field(description="catalog model served")
    gpus: list[str] = Field(min_length=1, max_length=MAX_PLAN_CANDIDATES)
    tp: list[Annotated[int, Field(ge=1, le=1024)]] = Field([1], min_length=1, max_length=MAX_PLAN_CANDIDATES)
    replicas: list[Annotated[int, Field(ge=1, le=MAX_REPLICAS)]] = Field([1], min_length=1,
                                                                         max_length=MAX_PLAN_CANDIDATES, description="replicas per deployment; N > 1 is simulated as one "
                                                               "cluster of N replicas behind `router`")
    router: RouterSpec = Field(RouterSpec(), description="the router of candidates with replicas > 1 "
                                                         "(simulator/cluster/config.py; default least_outstanding)")
    modes: list[Mode] = Field(min_length=1, max_length=MAX_PLAN_CANDIDATES)
    scheduler: SchedulerGrid = Field(SchedulerGrid(), description="server key -> values (a grid), typed by "
                                     "ServerConfig's fields")
    profiles: dict[str, dict[int, str]] = Field(default_factory=dict, description="measured target profiles: "
                                                "gpu -> {tp: profile}; every other (gpu, tp) is priced by roofline")
    roofline: RooflineKnobs = Field(RooflineKnobs(), description="roofline knobs: mfu, bandwidth_util, "
                                    "allreduce_latency_s, floor_s, host_s, overlap (step or op)")
    deployment: DeploymentConfig = Field(DeploymentConfig(), description="placement knobs: gpu_memory_utilization, "
                                         "reserve_gib, max_model_len, ... (a DeploymentConfig without the keys each "
                                         "candidate sets)")
    draft_transfer: Literal["roofline", "refuse"] = Field("roofline", description="a drafter profile measured on "
                                                          "another GPU than the candidate's: roofline = scaled by "
                                                          "the two GPUs' datasheet ratio (experiments/plan/draft_gpu.py"
                                                          "), refuse = an error")

    @model_validator(mode="after")
    def _unique(self) -> "Candidates":
        names = [m.name for m in self.modes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"candidates.modes: names must be unique, repeated: {dup}")
        for key, seq in (("tp", self.tp), ("replicas", self.replicas)):
            if any(v < 1 for v in seq) or len(set(seq)) != len(seq):
                raise ValueError(f"candidates.{key}: expected distinct integers >= 1, got {seq}")
        fixed = {"target", "gpu", "num_gpus", "tp", "drafter", "drafter_placement", "drafter_gpus", "max_num_seqs"}
        if set(self.deployment.given()) & fixed:
            raise ValueError(f"candidates.deployment: {sorted(set(self.deployment.given()) & fixed)} are set per "
                             "candidate")
        self._check_size()
        self._check_catalog()
        from experiments.plan.deploy import check_mtp, is_mtp_mode

        for mode in self.modes:
            if is_mtp_mode(mode):  # the target's own MTP head: vLLM's n_predict rule and the head's placement
                check_mtp(mode, self.target, f"candidates.modes[{mode.name}]")
        return self

    def _check_size(self) -> None:
        """The space is counted before it is expanded: a typo'd grid fails here, not after minutes."""
        size = len(self.gpus) * len(self.tp) * len(self.replicas) * len(self.modes)
        for _, values in self.scheduler.items():
            size *= len(values)
        if size > MAX_PLAN_CANDIDATES:
            raise ValueError(f"candidates: {size:,} candidates (gpus x tp x replicas x modes x scheduler values); "
                             f"a plan searches at most {MAX_PLAN_CANDIDATES:,}")

    def _check_catalog(self) -> None:
        """GPUs and the target exist in the catalog, no GPU twice (names are case-insensitive), and measured
        profiles belong to a (GPU, TP) of the space and to the target model."""
        from traces.catalog import get_gpu, get_model

        for key, fn, names in (("target", get_model, [self.target]), ("gpus", get_gpu, self.gpus)):
            for i, name in enumerate(names):
                try:
                    fn(name)
                except ValueError as e:
                    raise ValueError(f"candidates.{key}{'' if key == 'target' else f'[{i}]'}: {e}") from None
        lowered = [g.lower() for g in self.gpus]
        dup = sorted({g for g in lowered if lowered.count(g) > 1})
        if dup:
            raise ValueError(f"candidates.gpus: each GPU once (names are case-insensitive), repeated: {dup}")
        seen: dict[str, str] = {}
        for gpu, by_tp in self.profiles.items():
            if gpu.lower() in seen:
                raise ValueError(f"candidates.profiles: {seen[gpu.lower()]!r} and {gpu!r} name the same GPU")
            seen[gpu.lower()] = gpu
            if gpu != gpu.lower() or gpu not in lowered:
                raise ValueError(f"candidates.profiles.{gpu}: not one of candidates.gpus {lowered} (write GPU names "
                                 "in lower case, as the catalog does)")
            for tp, ref in by_tp.items():
                if tp not in self.tp:
                    raise ValueError(f"candidates.profiles.{gpu}.{tp}: tp {tp} is not one of candidates.tp {self.tp}")
                _check_profile_model(ref, self.target, f"candidates.profiles.{gpu}.{tp}")


def _check_profile_model(ref: str, target: str, where: str) -> None:
    """A measured profile must exist and be of the target model (a profile of another model is a mistake)."""
    from simulator.costs.latency import resolve_profile

    try:
        profile = resolve_profile(ref)
    except (ValueError, OSError) as e:
        raise ValueError(f"{where}: {e}") from None
    model = getattr(profile, "model", "") or ""
    if model and model.lower() != target.lower():
        raise ValueError(f"{where}: profile {ref!r} is of model {model!r}, not the target {target!r}")


class Prices(_Strict):
    file: str | None = Field(None, description="a price file like traces/data/catalog/gpu_prices.yaml")
    usd_per_gpu_hour: dict[str, Annotated[float, Field(gt=0, le=1e6)]] = Field(
        default_factory=dict, description="per-GPU overrides ($ per GPU-hour)")

    @model_validator(mode="after")
    def _known_gpus(self) -> "Prices":
        from traces.catalog import get_gpu

        seen: dict[str, str] = {}
        for gpu in self.usd_per_gpu_hour:
            try:
                get_gpu(gpu)
            except ValueError as e:
                raise ValueError(f"prices.usd_per_gpu_hour.{gpu}: {e}") from None
            if gpu.lower() in seen:
                raise ValueError(f"prices.usd_per_gpu_hour: {seen[gpu.lower()]!r} and {gpu!r} name the same GPU "
                                 "(names are case-insensitive)")
            seen[gpu.lower()] = gpu
        return self


class PlanConfig(_Strict):
    """A capacity-planning question: serve this traffic within these SLOs, which candidate is cheapest?"""

    kind: Literal["plan"] = "plan"
    name: str = Field(min_length=1)
    description: str = ""
    seed: int = Field(0, ge=0, le=2**63 - 1)
    base: str | dict[str, Any] = Field("default", description="experiment config (file, built-in name or inline) "
                                                              "giving traces, drafters and server defaults")
    traces: TraceSource | None = Field(None, description="overrides the base config's traces: a source as an "
                                       "experiment's `traces:` takes it, parsed once into a typed source "
                                       "(traces/source.py)")
    drafters: dict[str, DraftCostConfig] | None = Field(None, description="overrides the base config's draft costs, "
                                                       "each a DraftCostConfig (simulator/costs/draft_cost.py)")
    traffic: Traffic
    slo: PlanSLO
    search: Search = Search()
    candidates: Candidates
    prices: Prices = Prices()

    @field_serializer("drafters")
    def _drafters_as_given(self, drafters: dict[str, DraftCostConfig] | None) -> dict[str, Any] | None:
        """Each drafter's cost as the plan gave it (the keys it set): the document the base config receives."""
        if drafters is None:
            return None
        return {name: spec.model_dump(mode="json", exclude_unset=True) for name, spec in drafters.items()}


def load_plan_config(source: str | Path | dict[str, Any], overrides=(), where: str | None = None) -> PlanConfig:
    """Validate a plan config file (or built-in name, or dict); `--set` overrides apply first."""
    from experiments.config import apply_overrides, read_config_doc, validation_message

    if isinstance(source, dict):
        doc, where = source, where or "<dict plan config>"
    else:
        doc, where = read_config_doc(source)
    doc = apply_overrides(doc, list(overrides))
    try:
        return PlanConfig.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(validation_message(e, where, "plan config", PlanConfig, doc, list(overrides))) from None
