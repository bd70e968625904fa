"""Typed configuration of one simulated server: the validated config blocks (`ServerConfig`, `RunSpec`,
`PSDConfig`) and the `Scenario` a `Server` runs (those blocks resolved: profiles, drafter costs, policy object,
KV capacity and random streams)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field, InstanceOf, SerializeAsAny, field_serializer, field_validator, model_validator

from policies.base import Policy
from policies.registry import PolicySpec, policy_spec
from simulator.cluster.config import ClusterSpec
from simulator.costs.deployment_config import DeploymentConfig
from simulator.costs.draft_cost import DraftCost
from simulator.costs.latency import LatencyProfile, LinearProfile, Provenance
from simulator.costs.profile_spec import InlineProfile, ProfileSpec
from simulator.engine.scheduler import DEFAULT_SCHEDULER, SCHEDULERS, describe_schedulers, scheduler_variant
from simulator.seeds import ServerSeeds
from traces.config_base import StrictModel as _Strict
from traces.config_base import validate_model


class PSDConfig(_Strict):
    """MineDraft two-batch settings."""

    sub_batch_max_num_seqs: int | None = Field(None, ge=1, description="m; PSD admits 2m (default: server max_num_seqs)")
    sync_s: float = Field(0.0, ge=0, le=3600, allow_inf_nan=False, description=(
        "seconds of the sync after both phases of a step (MineDraft: rejection sampling on the driver with "
        "full-vocabulary probabilities). Default 0: no published per-step figure; the only one, rejection "
        "sampling under 1.7% of run time (SpecDecode-Bench, vLLM 0.10.1.1, H100), is a share, not seconds"))
    defer_kv: bool = Field(True, description=(
        "True (MineDraft): the sub-batch being drafted reserves its k lookahead KV slots when drafted and the "
        "verify side appends none; False: slots are reserved only when the proposals are verified "
        "(draftsim's rule before engine v2)"))
    split_min_batch: int = Field(0, ge=0, description="below this many decoding requests run plain SD on the draft "
                                                     "GPU instead of splitting (0: always split, as MineDraft)")

    def sub_batch(self, max_num_seqs: int) -> int:
        """Sequences in each of PSD's two sub-batches: sub_batch_max_num_seqs, by default the server's max_num_seqs."""
        return self.sub_batch_max_num_seqs or max_num_seqs

    def concurrency(self, max_num_seqs: int) -> int:
        """Sequences PSD runs at once: its two sub-batches (`sub_batch`). The one home of this rule: the server, the
        planner, the live runner and the PSD study read it."""
        return 2 * self.sub_batch(max_num_seqs)

    @classmethod
    def split(cls, total: int, **settings: Any) -> "PSDConfig":
        """PSD settings that run `total` sequences in all, total // 2 per sub-batch (at least 1 each): PSD compared
        with SD at the same total concurrency."""
        return cls(sub_batch_max_num_seqs=max(1, int(total) // 2), **settings)


class ServerConfig(_Strict):
    """One serving instance: cost profile, batching limits and KV memory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)  # merged with the strict base's

    target_profile: str | ProfileSpec | InstanceOf[LatencyProfile] = Field(description=(
        "built-in profile name, file, inline profile (simulator/costs/profile_spec.py), or (from Python) a profile "
        "object (roofline, measured)"))
    step_overhead_s: float = Field(0.0, ge=0, le=3600, allow_inf_nan=False,
                                   description="fixed scheduler/sampler overhead per step")
    max_num_seqs: int = Field(64, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1)
    block_size: int = Field(16, ge=1)
    kv_capacity_tokens: int | None = Field(None, ge=1, description="KV pool size in tokens; or give deployment")
    deployment: DeploymentConfig | None = Field(None, description="GPU placement; KV capacity from the catalogs "
                                                "(simulator/costs/deployment_config.py)")
    chunked_prefill: bool = False
    prefill: Literal["mixed", "separate"] = Field("mixed", description=(
        "mixed: prefills join decode/verify steps (vLLM V1; V0 with chunked prefill); separate: vLLM V0 without "
        "chunked prefill, as MineDraft runs: a step that schedules prefills schedules no decodes"))
    verification: Literal["greedy", "sampled"] = Field("greedy", description=(
        "greedy: replay acc_len (temperature 0); sampled: accept each drafted token with probability 1 - tv "
        "(needs per-position tv in the traces for every drafter used)"))
    temperature: float | None = Field(None, exclude=True, allow_inf_nan=False, description=(
        "sampling temperature; only as a consistency check: > 0 needs verification: sampled, 0 greedy"))
    scheduler: str = Field(DEFAULT_SCHEDULER, description=(
        f"the scheduler's rules, by name (simulator/engine/scheduler.py SCHEDULERS): {describe_schedulers()}"))
    async_scheduling: bool = Field(False, description=(
        "vLLM's --async-scheduling (needs scheduler: vllm-v1): the next step's host work (step_overhead_s, the "
        "engine-loop gap) overlaps this step's forward, so a step's period is max(forward, host) "
        "(rules/engine_loop.overlapped_gap)"))
    num_target_gpus: int = Field(1, ge=1, description="GPUs of the target (for per-GPU figures)")
    num_draft_gpus: int = Field(0, ge=0, description="dedicated draft GPUs (PSD uses 1)")

    @model_validator(mode="before")
    @classmethod
    def _vllm_v1_preset(cls, doc: Any) -> Any:
        """A scheduler that always chunks (vllm-v1, the default) turns chunked prefill on; an explicit
        `chunked_prefill: false` or `prefill: separate` is refused, naming the schedulers that allow it."""
        if not isinstance(doc, dict):
            return doc
        name = doc.get("scheduler", DEFAULT_SCHEDULER)
        variant = SCHEDULERS.get(name) if isinstance(name, str) else None
        if variant is None or not variant.always_chunked:
            return doc  # an unknown name: the field's own check names it
        which = f"scheduler: {name!r}" + (" (the default)" if "scheduler" not in doc else "")
        others = " or ".join(f"scheduler: {v.name}" for v in SCHEDULERS.values() if not v.always_chunked)
        if doc.get("chunked_prefill") is False:
            raise ValueError(f"chunked_prefill: false needs {others}; {which} always chunks prefills (vLLM V1): "
                             "drop chunked_prefill: false or set " + others)
        if doc.get("prefill", "mixed") != "mixed":
            raise ValueError(f"prefill: {doc['prefill']!r} needs {others}; {which} mixes prefill chunks into decode "
                             "steps (vLLM V1): drop prefill: separate or set " + others)
        return {**doc, "chunked_prefill": True}

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, name: str) -> str:
        """A registered scheduler name (simulator/engine/scheduler.py SCHEDULERS)."""
        return scheduler_variant(name).name

    @model_validator(mode="before")
    @classmethod
    def _gpus_from_deployment(cls, doc: Any) -> Any:
        """A deployment counts the GPUs: num_target_gpus defaults to its num_gpus (else tp), num_draft_gpus to a
        dedicated drafter's GPUs; a count given beside a deployment must agree with it."""
        if not isinstance(doc, dict) or not isinstance(doc.get("deployment"), (dict, DeploymentConfig)):
            return doc
        dep = doc["deployment"]
        if isinstance(dep, DeploymentConfig):
            dep = dep.given()
        counts = {"num_target_gpus": dep.get("num_gpus", dep.get("tp", 1)),
                  "num_draft_gpus": (dep.get("drafter_gpus", 1) if dep.get("drafter")
                                     and dep.get("drafter_placement") == "dedicated" else None)}
        out = dict(doc)
        for key, n in counts.items():
            if n is None:
                continue
            if key in doc and doc[key] != n:
                raise ValueError(f"{key}: {doc[key]!r} but the deployment has {n} (drop {key}; the deployment "
                                 "counts the GPUs)")
            out[key] = n
        return out

    @model_validator(mode="after")
    def _capacity_given(self) -> "ServerConfig":
        if self.kv_capacity_tokens is None and self.deployment is None:
            raise ValueError("give kv_capacity_tokens or deployment (KV capacity from the catalogs)")
        t = self.temperature
        if t is not None and not (0 <= t <= 10):
            raise ValueError(f"temperature: expected a number in [0, 10], got {t!r}")
        if t is not None and (t > 0) != (self.verification == "sampled"):
            raise ValueError(f"temperature: {t!r} no longer selects the verification rule; set verification: "
                             f"{'sampled' if t > 0 else 'greedy'} (sampled accepts each drafted token with "
                             "probability 1 - tv from the traces) and drop temperature")
        if self.prefill == "separate" and self.chunked_prefill:
            raise ValueError("prefill: 'separate' (prefill-only steps, vLLM V0) cannot be combined with "
                             "chunked_prefill: true, which mixes prefill chunks into decode steps; use prefill: mixed")
        if self.async_scheduling and self.scheduler != "vllm-v1":
            raise ValueError(f"async_scheduling: true needs scheduler: vllm-v1 (vLLM V1's engine core overlaps the "
                             f"next step's scheduling with this step's forward), got scheduler: {self.scheduler!r}")
        return self

    @field_serializer("target_profile")
    def _profile_out(self, v: Any, info) -> Any:
        """An inline profile dumps as given; a profile object stays itself in Python dumps (overrides re-validate it)
        and is its name in JSON."""
        if isinstance(v, InlineProfile):
            return v.model_dump(mode=info.mode)
        if isinstance(v, str) or info.mode != "json":
            return v
        return f"<in-memory profile {getattr(v, 'name', type(v).__name__)}>"

    @property
    def max_model_len(self) -> int | None:
        """The deployment's max_model_len when the config sets one (requests longer than it are refused), else
        None: without it draftsim's placement default sizes KV but no request length is bounded."""
        if self.deployment is None or self.deployment.max_model_len is None:
            return None
        return self.deployment.deployment("server.deployment").max_model_len

    def placement_deployment(self, run: "RunSpec") -> DeploymentConfig | None:
        """The deployment as placement reads it for `run` on this server: its max_num_seqs (the sequences whose
        linear-attention state is held) defaults to the sequences the run holds at once (RunSpec.running_sequences:
        PSD holds both sub-batches). The one home of that default."""
        if self.deployment is None:
            return None
        return self.deployment.with_default_seqs(run.running_sequences(self.max_num_seqs))

    def target(self) -> LatencyProfile:
        """Resolve the target's latency profile (a profile object is used as it is)."""
        if not isinstance(self.target_profile, (str, InlineProfile)):
            return self.target_profile
        from simulator.costs.roofline import profile_from_ref  # catalog-based, optional module

        return profile_from_ref(self.target_profile, "server.target_profile")


class RunSpec(_Strict):
    """One simulated configuration to compare: mode, policy, and server overrides."""

    name: str = Field(min_length=1)
    mode: Literal["ar", "sd", "psd"]
    policy: SerializeAsAny[PolicySpec] | None = Field(None, description=(
        "{name: ..., **params} (policies/registry.py), parsed once into the policy's PolicySpec record"))
    switch_cost_s: float = Field(0.0, ge=0, le=3600, allow_inf_nan=False,
                                 description="drafter catch-up cost when a request changes drafter")
    psd: PSDConfig | None = None
    server: dict[str, Any] = Field(default_factory=dict, description="overrides of the experiment's server")
    cluster: ClusterSpec | None = Field(None, description="replaces the experiment's cluster block for this run "
                                                          "({replicas: 1} runs one replica through the cluster path)")

    @field_validator("policy", mode="before")
    @classmethod
    def _policy_spec(cls, v: Any) -> Any:
        """A policy mapping becomes its PolicySpec record (errors name the key below `policy`)."""
        return v if v is None or isinstance(v, PolicySpec) else policy_spec(v, "policy")

    @model_validator(mode="after")
    def _mode_rules(self) -> "RunSpec":
        check_replica_overrides(self.cluster, "cluster.")
        if self.mode in ("sd", "psd") and not self.policy:
            raise ValueError(f"run {self.name!r}: mode {self.mode!r} needs a policy, "
                             "e.g. {name: fixed, drafter: eagle3, k: 3}")
        if self.mode != "psd" and self.psd is not None:
            raise ValueError(f"run {self.name!r}: 'psd' settings only apply to mode psd")
        return self

    def running_sequences(self, max_num_seqs: int) -> int:
        """Sequences this run holds at once on a server of `max_num_seqs`: PSD's two sub-batches
        (PSDConfig.concurrency, its default settings unless given), every other mode max_num_seqs."""
        return (self.psd or PSDConfig()).concurrency(max_num_seqs) if self.mode == "psd" else max_num_seqs


def server_for(server: ServerConfig, run: RunSpec, where: str | None = None) -> ServerConfig:
    """The experiment's server with the run's overrides applied, validated (errors name `where`, by default
    `runs[<name>].server`, and the key)."""
    if not run.server:
        return server
    return validate_model(ServerConfig, {**server.model_dump(), **run.server}, where or f"runs[{run.name}].server")


def check_replica_overrides(cluster: ClusterSpec | None, where: str = "") -> None:
    """Every per-replica override of a cluster block names ServerConfig keys (else ValueError naming the replica)."""
    if cluster is None or isinstance(cluster.replicas, int):
        return
    fields = set(ServerConfig.model_fields)
    for j, over in enumerate(cluster.replicas):
        unknown = sorted(set(over) - fields)
        if unknown:
            raise ValueError(f"{where}replicas[{j}]: unknown server key(s) {unknown}; expected some of {sorted(fields)}")


@dataclass
class Scenario:
    """One server run resolved: what a `Server` runs. `server` is read like vLLM's scheduler reads its
    `scheduler_config` (`scenario.server.max_num_seqs`); `policy` is the one policy object of the run."""

    name: str
    mode: Literal["ar", "sd", "psd"]
    server: ServerConfig
    target: LatencyProfile
    draft_costs: dict[str, DraftCost]
    policy: Policy | None
    seeds: ServerSeeds
    kv_capacity_tokens: int  # 0: the deployment does not fit (see info)
    psd: PSDConfig = field(default_factory=PSDConfig)
    switch_cost_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.kv_capacity_tokens > 0

    @property
    def num_target_gpus(self) -> int:
        return self.server.num_target_gpus

    @property
    def num_draft_gpus(self) -> int:
        return self.server.num_draft_gpus if self.mode != "psd" else max(1, self.server.num_draft_gpus)


def constant_profile(seconds: float, name: str = "constant") -> LinearProfile:
    """A profile whose every step costs `seconds` (bounds experiments, tests)."""
    return LinearProfile(name=name, coefficients={"const": seconds}, provenance=Provenance("config"))


