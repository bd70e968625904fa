"""GPU placement and memory: where target and drafter live, how much KV fits, and what it costs in GPUs.

A deployment names the target's GPU type, count and tensor-parallel (TP) degree, and where the
drafter lives: `colocated` (on the target's GPUs, sharded over `drafter_tp` of them, as standard
SD) or `dedicated` (its own `drafter_gpus` GPUs, as MineDraft's PSD). An MTP head is the drafter
`TARGET:mtp` (traces/catalog.py `ModelSpec.mtp_head`: its layer's weights and KV, the LM head shared),
colocated with its own target. Per GPU:

    usable   = memory x gpu_memory_utilization            (vLLM's knob)
    weights  = target weights / TP (+ colocated drafter weights / drafter_tp on the GPUs holding it)
    KV room  = usable - weights - reserve_gib             (activations, CUDA graphs, allocator slack)
    tokens   = KV room / KV bytes per token on that GPU   (target KV / TP, + the colocated drafter's KV)

The server's KV capacity is the smallest over its GPUs (and, when the drafter is dedicated, over
the drafter's GPUs too: every admitted token needs KV in both models). A deployment that cannot hold
its weights, reserve and `min_kv_tokens` (default: one max_model_len sequence, vLLM's start-up rule)
is a result with `fits=False` and "does not fit: needs X GiB, has Y GiB", never an exception. Bad
configs (unknown key, unknown model, TP not dividing the GPU count) are ValueErrors naming the key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from traces.catalog import GIB, MTP_SUFFIX, GpuSpec, ModelSpec, get_gpu, get_model
from traces.limits import MAX_TOKENS_PER_REQUEST

MAX_GPUS = 4096  # GPUs in one deployment

PLACEMENTS = ("colocated", "dedicated")


@dataclass(frozen=True)
class Deployment:
    """What runs where: target model on `num_gpus` x `gpu` with TP `tp`; optional drafter and its placement."""

    target: str
    gpu: str
    num_gpus: int = 1
    tp: int = 1
    drafter: str | None = None
    drafter_placement: str = "colocated"
    drafter_tp: int | None = None  # colocated: defaults to tp; dedicated: defaults to drafter_gpus
    drafter_gpu: str | None = None  # dedicated only; defaults to `gpu`
    drafter_gpus: int = 1
    gpu_memory_utilization: float = 0.9
    reserve_gib: float = 2.0
    max_model_len: int = 2048
    min_kv_tokens: int | None = None
    max_num_seqs: int | None = None  # sequences whose linear-attention state is held (the server's max_num_seqs)

    @property
    def total_gpus(self) -> int:
        """GPUs the deployment occupies (a dedicated drafter's GPUs included)."""
        extra = self.drafter_gpus if self.drafter and self.drafter_placement == "dedicated" else 0
        return self.num_gpus + extra


@dataclass
class GpuMemory:
    """One GPU's memory budget, in GiB."""

    role: str  # "target", "target+drafter", "drafter"
    usable_gib: float
    weights_gib: float
    reserve_gib: float
    kv_bytes_per_token: float
    kv_room_gib: float
    kv_tokens: int
    state_gib: float = 0.0  # linear-attention state of max_num_seqs sequences (held whatever their lengths)


@dataclass
class Placement:
    """The outcome of placing a deployment: fits or not, KV capacity, and the per-GPU breakdown."""

    deployment: Deployment
    fits: bool
    kv_capacity_tokens: int
    needs_gib: float  # on the tightest GPU: weights + reserve + min_kv_tokens of KV
    has_gib: float  # usable memory on that GPU
    message: str
    gpus: list[GpuMemory] = field(default_factory=list)
    binding: str = ""  # role of the GPU that limits KV capacity

    @property
    def total_gpus(self) -> int:
        return self.deployment.total_gpus

    def per_gpu(self, value: float) -> float:
        """A total (e.g. throughput) divided by the GPUs this deployment uses."""
        return value / self.total_gpus

    def summary(self) -> dict[str, Any]:
        return {"fits": self.fits, "message": self.message, "kv_capacity_tokens": self.kv_capacity_tokens,
                "needs_gib": round(self.needs_gib, 3), "has_gib": round(self.has_gib, 3),
                "total_gpus": self.total_gpus, "binding": self.binding}


def _kv_per_gpu(model: ModelSpec, shards: int) -> float:
    """KV bytes per token on one GPU of a model sharded `shards` ways (traces/catalog.py kv_bytes_per_token_gpu)."""
    return model.kv_bytes_per_token_gpu(shards)


def _state_per_gpu(model: ModelSpec, shards: int, seqs: int | None) -> float:
    """Linear-attention state bytes on one GPU: every running sequence's, its heads split over the shards."""
    return model.linear_state_bytes_per_seq * (seqs or 0) / shards


def plan(dep: Deployment) -> Placement:
    """Place `dep` and compute its KV capacity; never raises for a deployment that does not fit."""
    validate(dep)
    target, gpu = get_model(dep.target), get_gpu(dep.gpu)
    drafter = get_model(dep.drafter) if dep.drafter else None
    min_kv = dep.min_kv_tokens if dep.min_kv_tokens is not None else dep.max_model_len
    reserve = dep.reserve_gib * GIB
    budgets: list[GpuMemory] = []

    def budget(role: str, g: GpuSpec, weights: float, kv_per_token: float, state: float = 0.0) -> GpuMemory:
        usable = g.memory_bytes * dep.gpu_memory_utilization
        room = usable - weights - reserve - state
        tokens = int(max(room, 0.0) // kv_per_token) if kv_per_token > 0 else 0
        return GpuMemory(role, usable / GIB, weights / GIB, dep.reserve_gib, kv_per_token, room / GIB, tokens,
                         state / GIB)

    seqs = dep.max_num_seqs
    t_weights = target.weight_bytes / dep.tp
    t_kv, t_state = _kv_per_gpu(target, dep.tp), _state_per_gpu(target, dep.tp, seqs)
    if drafter is not None and dep.drafter_placement == "colocated":
        dtp = dep.drafter_tp or dep.tp
        d_w, d_kv = drafter.weight_bytes / dtp, _kv_per_gpu(drafter, dtp)
        budgets.append(budget("target+drafter", gpu, t_weights + d_w, t_kv + d_kv,
                              t_state + _state_per_gpu(drafter, dtp, seqs)))
        if dtp < dep.tp:  # the other target GPUs hold no drafter shard
            budgets.append(budget("target", gpu, t_weights, t_kv, t_state))
    else:
        budgets.append(budget("target", gpu, t_weights, t_kv, t_state))
        if drafter is not None:
            dgpu = get_gpu(dep.drafter_gpu or dep.gpu)
            dtp = dep.drafter_tp or dep.drafter_gpus
            budgets.append(budget("drafter", dgpu, drafter.weight_bytes / dtp, _kv_per_gpu(drafter, dtp),
                                  _state_per_gpu(drafter, dtp, seqs)))

    def need(b: GpuMemory) -> float:
        return b.weights_gib + b.reserve_gib + b.state_gib + min_kv * b.kv_bytes_per_token / GIB

    tightest = max(budgets, key=lambda b: need(b) - b.usable_gib)
    binding = min(budgets, key=lambda b: b.kv_tokens)
    fits = all(need(b) <= b.usable_gib for b in budgets)
    capacity = binding.kv_tokens if fits else 0
    needs, has = need(tightest), tightest.usable_gib
    if fits:
        msg = (f"fits: KV capacity {capacity} tokens (limited by the {binding.role} GPU: needs {needs:.1f} GiB "
               f"of {has:.1f} GiB for weights, reserve"
               + (f", linear-attention state of {dep.max_num_seqs} sequences" if tightest.state_gib else "")
               + f" and {min_kv} KV tokens)")
    else:
        msg = (f"does not fit: needs {needs:.1f} GiB, has {has:.1f} GiB on the {tightest.role} GPU "
               f"(weights {tightest.weights_gib:.1f} GiB + reserve {tightest.reserve_gib:.1f} GiB"
               + (f" + linear-attention state of {dep.max_num_seqs} sequences {tightest.state_gib:.1f} GiB"
                  if tightest.state_gib else "") + f" + KV for {min_kv} "
               f"tokens {min_kv * tightest.kv_bytes_per_token / GIB:.2f} GiB; usable = {gpu.memory_gb} GB x "
               f"{dep.gpu_memory_utilization})")
    return Placement(dep, fits, capacity, needs, has, msg, budgets, binding.role)


def validate(dep: Deployment) -> None:
    """Raise ValueError naming the key for a deployment that is malformed (as opposed to one that does not fit)."""
    for key, value in (("target", dep.target), ("gpu", dep.gpu)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"deployment.{key}: expected a catalog name, got {value!r}")
    for key, fn, value in (("target", get_model, dep.target), ("gpu", get_gpu, dep.gpu),
                           ("drafter", get_model, dep.drafter), ("drafter_gpu", get_gpu, dep.drafter_gpu)):
        if value is not None:
            try:
                fn(value)
            except ValueError as e:
                raise ValueError(f"deployment.{key}: {e}") from e
    for key in ("drafter_placement",):
        if not isinstance(getattr(dep, key), str):
            raise ValueError(f"deployment.{key}: expected one of {PLACEMENTS}, got {getattr(dep, key)!r}")
    for key, hi in (("num_gpus", MAX_GPUS), ("tp", MAX_GPUS), ("drafter_gpus", MAX_GPUS),
                    ("max_model_len", MAX_TOKENS_PER_REQUEST)):
        v = getattr(dep, key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise ValueError(f"deployment.{key}: expected an integer in [1, {hi}], got {v!r}")
    for key in ("gpu_memory_utilization", "reserve_gib"):
        v = getattr(dep, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"deployment.{key}: expected a finite number, got {v!r}")
    if dep.num_gpus % dep.tp:
        raise ValueError(f"deployment.tp: {dep.tp} does not divide num_gpus {dep.num_gpus}")
    if dep.num_gpus != dep.tp:
        raise ValueError(f"deployment.num_gpus: one simulated server is one TP group; expected num_gpus == tp "
                         f"({dep.tp}), got {dep.num_gpus} (simulate data-parallel replicas as separate servers)")
    problem = get_model(dep.target).tp_problem(dep.tp)
    if problem:
        raise ValueError(f"deployment.tp: {problem}")
    if dep.drafter_placement not in PLACEMENTS:
        raise ValueError(f"deployment.drafter_placement: expected one of {PLACEMENTS}, got {dep.drafter_placement!r}")
    if dep.drafter_tp is not None:
        limit = dep.tp if dep.drafter_placement == "colocated" else dep.drafter_gpus
        if isinstance(dep.drafter_tp, bool) or not isinstance(dep.drafter_tp, int) or not 1 <= dep.drafter_tp <= limit:
            raise ValueError(f"deployment.drafter_tp: expected an integer in 1..{limit} for a "
                             f"{dep.drafter_placement} drafter, got {dep.drafter_tp!r}")
    if dep.drafter is not None:
        dtp = dep.drafter_tp or (dep.tp if dep.drafter_placement == "colocated" else dep.drafter_gpus)
        problem = get_model(dep.drafter).tp_problem(dtp)
        if problem:
            raise ValueError(f"deployment.drafter_tp: the drafter is sharded {dtp} ways: {problem}; set drafter_tp")
    if dep.drafter is not None and dep.drafter.lower().endswith(MTP_SUFFIX):
        if get_model(dep.drafter).name != get_model(dep.target).name + MTP_SUFFIX:
            raise ValueError(f"deployment.drafter: the MTP head {dep.drafter!r} drafts only for its own model, "
                             f"not {dep.target!r}")
        if dep.drafter_placement != "colocated":
            raise ValueError("deployment.drafter_placement: an MTP head runs inside the target's model: colocated")
    if dep.drafter_gpu is not None and dep.drafter_placement != "dedicated":
        raise ValueError("deployment.drafter_gpu: only a dedicated drafter has its own GPU type")
    if not 0 < dep.gpu_memory_utilization <= 1:
        raise ValueError(f"deployment.gpu_memory_utilization: expected a number in (0, 1], "
                         f"got {dep.gpu_memory_utilization!r}")
    if dep.reserve_gib < 0:
        raise ValueError(f"deployment.reserve_gib: expected a number >= 0, got {dep.reserve_gib!r}")
    if dep.max_num_seqs is not None and (isinstance(dep.max_num_seqs, bool) or not isinstance(dep.max_num_seqs, int)
                                         or not 1 <= dep.max_num_seqs <= MAX_TOKENS_PER_REQUEST):
        raise ValueError(f"deployment.max_num_seqs: expected an integer in [1, {MAX_TOKENS_PER_REQUEST}], "
                         f"got {dep.max_num_seqs!r}")
    for key in ("target", "drafter"):
        name = getattr(dep, key)
        spec = get_model(name) if name else None
        if spec is not None and spec.linear_attention_layers and dep.max_num_seqs is None:
            raise ValueError(f"deployment.max_num_seqs: required for {key} {name!r}: its "
                             f"{spec.linear_attention_layers} linear-attention layers hold a recurrent state of "
                             f"{spec.linear_state_bytes_per_seq / 2**20:.1f} MiB per running sequence; give the "
                             "server's max_num_seqs (vLLM holds a state for each)")
    if dep.min_kv_tokens is not None and (isinstance(dep.min_kv_tokens, bool) or not isinstance(dep.min_kv_tokens, int)
                                          or not 0 <= dep.min_kv_tokens <= MAX_TOKENS_PER_REQUEST):
        raise ValueError(f"deployment.min_kv_tokens: expected an integer in [0, {MAX_TOKENS_PER_REQUEST}], "
                         f"got {dep.min_kv_tokens!r}")


def deployment_from_config(doc: Any, where: str = "deployment") -> Deployment:
    """Build a Deployment from a config mapping; unknown keys and bad values name the key."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a mapping with target, gpu, ..., got {doc!r}")
    allowed = {f for f in Deployment.__dataclass_fields__}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key; expected some of {sorted(allowed)}")
    for key in ("target", "gpu"):
        if key not in doc:
            raise ValueError(f"{where}.{key}: required")
    dep = Deployment(**doc)
    try:
        validate(dep)
    except ValueError as e:
        raise ValueError(str(e).replace("deployment", where, 1)) from e
    return dep


def kv_capacity_tokens(doc: Any, where: str = "server.deployment") -> Placement:
    """For the engine: the Placement of a `server.deployment` mapping (check `.fits` before using `.kv_capacity_tokens`)."""
    return plan(deployment_from_config(doc, where))
