"""Roofline latency profile: step time from catalog numbers, for hardware nobody has profiled.

Assumptions (all per forward step of one batch on one tensor-parallel group):
- Memory traffic = weights read once per step (an MoE model reads only the experts the step's
  tokens touch, expected over uniform routing) + every KV token in use read once, each split over
  the TP degree (KV heads are split over TP; with fewer KV heads than GPUs they are replicated).
  Activations are ignored.
- Compute = 2 x matmul parameters x batched tokens + attention (4 x layers x heads x head_dim FLOPs
  per (query, context) pair; causal: per sequence, q = batched_tokens / num_seqs new tokens at the end of
  c = kv_tokens / num_seqs context tokens attend q c - q (q - 1) / 2 pairs, so a whole prefill costs about
  half of c^2; sequences assumed equal in length).
- Time = max(compute / (TP x peak x mfu), traffic / (TP x bandwidth x bandwidth_util))
  + tensor-parallel all-reduce (2 per layer, ring: 2 (TP-1)/TP x batched_tokens x hidden x dtype
  bytes sent by each GPU over its link's ONE-WAY bandwidth, half the catalog's bidirectional figure, plus a
  fixed latency per all-reduce), and never less than `floor_s`.
- Defaults (stated, not fitted): mfu 0.6, bandwidth_util 0.8, all-reduce latency 8 us, floor 0.
  Scheduling / sampling overhead per step is a server setting (`step_overhead_s`), not part of this.
- `overlap: op` (default `step`): the GEMMs and attention are separate kernels, each bound by its own roofline,
  so the step costs max(GEMM FLOPs, weight read) + max(attention FLOPs, KV read) instead of one max over the
  whole step (under which a verify step's extra query tokens hide under the weight and KV read, nearly free);
  `host_s` adds fixed seconds per step (host work inside the step). Fitted to the measured Llama-3.1-8B / H100
  fit: docs/accuracy.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from simulator.costs.latency import Provenance
from traces.catalog import GpuSpec, ModelSpec, get_gpu, get_model

if TYPE_CHECKING:
    from simulator.costs.profile_spec import InlineProfile

DEFAULT_MFU = 0.6
DEFAULT_BANDWIDTH_UTIL = 0.8
DEFAULT_ALLREDUCE_LATENCY_S = 8e-6
OVERLAPS = ("step", "op")


class RooflineTerms(NamedTuple):
    """A roofline profile's numbers as its step-time rule reads them (floats: every profile's record has one type)."""

    flops_per_token: float  # 2 x matmul parameters per token
    flops_per_pair: float  # attention FLOPs per (query, context) pair, all layers
    peak_flops: float  # tp x peak x mfu
    kv_bytes_per_token: float  # per GPU (KV heads split over tp, replicated below one per GPU)
    bandwidth: float  # per GPU: bandwidth x bandwidth_util
    tp: float
    allreduce_share: float  # 2 (tp - 1) / tp: the ring's bytes sent per byte of the message
    hidden_size: float
    dtype_bytes: float
    link_bytes_s: float  # one way
    allreduce_latency_s: float
    allreduces: float  # per step: 2 x layers
    floor_s: float
    overlap_op: bool  # `overlap: op`
    host_s: float
    weight_bytes: float = 0.0  # weights one step reads in all, every expert included; an untied input embedding
    # table left out (a step reads only its tokens' rows), a tied one counted once (it is the LM head, read whole)
    expert_weight_bytes: float = 0.0  # an MoE's routed experts' weights, all layers
    expert_share: float = 0.0  # an MoE's experts per token / experts: the share one token's routing touches
    moe: bool = False


def weight_bytes_read(terms, batched_tokens):
    """Weight bytes one step of `batched_tokens` tokens reads in all: every weight of a dense model; of an MoE the
    rest and, of its experts, the share 1 - (1 - p)^n that n independently routed tokens touch (at least one)."""
    if not terms.moe:
        return terms.weight_bytes
    touched = 1.0 - (1.0 - terms.expert_share) ** float(max(batched_tokens, 1))  # float: libm's pow, compiled too
    return terms.weight_bytes - terms.expert_weight_bytes + terms.expert_weight_bytes * touched


def attention_pairs(num_seqs, batched_tokens, kv_tokens):
    """(query, context) pairs of causal attention: per sequence q new tokens at the end of a context of c (kv_tokens
    includes them) attend q c - q (q - 1) / 2 positions (a prefill of c: about half of c^2)."""
    s = max(num_seqs, 1)
    q = batched_tokens / s
    c = kv_tokens / s
    if q > c:
        c = q
    return s * (q * c - q * (q - 1) / 2.0)


def roofline_compute_s(terms, pairs, batched_tokens):
    """Matmul and attention FLOPs of the step over the peak rate."""
    return (terms.flops_per_token * batched_tokens + terms.flops_per_pair * pairs) / terms.peak_flops


def roofline_memory_s(terms, weight_bytes, kv_tokens):
    """Weight bytes per GPU plus every KV token read once, over the bandwidth."""
    return (weight_bytes + kv_tokens * terms.kv_bytes_per_token) / terms.bandwidth


def roofline_per_op_s(terms, weight_bytes, pairs, batched_tokens, kv_tokens):
    """`overlap: op`: max(GEMM FLOPs, weight read) + max(attention FLOPs, KV read), each its own kernel."""
    gemm = terms.flops_per_token * batched_tokens / terms.peak_flops
    attn = terms.flops_per_pair * pairs / terms.peak_flops
    weights = weight_bytes / terms.bandwidth
    kv = kv_tokens * terms.kv_bytes_per_token / terms.bandwidth
    return (weights if weights > gemm else gemm) + (kv if kv > attn else attn)


def roofline_allreduce_s(terms, batched_tokens):
    """Tensor-parallel all-reduces of one step (ring, one-way link bandwidth, a fixed latency each); 0 at tp 1."""
    if terms.tp == 1.0:
        return 0.0
    nbytes = batched_tokens * terms.hidden_size * terms.dtype_bytes
    one = terms.allreduce_share * nbytes / terms.link_bytes_s + terms.allreduce_latency_s
    return terms.allreduces * one


def roofline_step_time(terms, weight_bytes, num_seqs, batched_tokens, kv_tokens):
    """The roofline rule: max(compute, memory) (`overlap: op`: per-op maxima) + all-reduces + host_s, at least
    floor_s; `weight_bytes`: the weight bytes per GPU this step reads. Plain Python; the compiled engine compiles it.
    (x if x > y else y keeps Python's max(y, x) in both.)"""
    if batched_tokens <= 0:
        return 0.0
    pairs = attention_pairs(num_seqs, batched_tokens, kv_tokens)
    if terms.overlap_op:
        t = roofline_per_op_s(terms, weight_bytes, pairs, batched_tokens, kv_tokens)
    else:
        compute = roofline_compute_s(terms, pairs, batched_tokens)
        memory = roofline_memory_s(terms, weight_bytes, kv_tokens)
        t = memory if memory > compute else compute
    t = t + roofline_allreduce_s(terms, batched_tokens) + terms.host_s
    return terms.floor_s if terms.floor_s > t else t


@dataclass
class RooflineProfile:
    """Prices one forward step of `model` on `tp` GPUs of type `gpu` from the roofline model."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    mfu: float = DEFAULT_MFU
    bandwidth_util: float = DEFAULT_BANDWIDTH_UTIL
    allreduce_latency_s: float = DEFAULT_ALLREDUCE_LATENCY_S
    floor_s: float = 0.0
    overlap: str = "step"
    host_s: float = 0.0
    name: str = ""
    kind: str = "roofline"
    provenance: Provenance = field(default_factory=lambda: Provenance("roofline"))

    def __post_init__(self) -> None:
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or not 1 <= self.tp <= 4096:
            raise ValueError(f"roofline profile: tp must be an integer in [1, 4096], got {self.tp!r}")
        if self.overlap not in OVERLAPS:
            raise ValueError(f"roofline profile: overlap must be one of {OVERLAPS}, got {self.overlap!r}")
        for key, lo, hi in (("mfu", 0, 1), ("bandwidth_util", 0, 1), ("allreduce_latency_s", 0, 60),
                            ("floor_s", 0, 3600), ("host_s", 0, 60)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi \
                    or (key in ("mfu", "bandwidth_util") and v == 0):
                interval = f"({lo}, {hi}]" if key in ("mfu", "bandwidth_util") else f"[{lo}, {hi}]"
                raise ValueError(f"roofline profile: {key} must be a number in {interval}, got {v!r}")
        problem = self.model.tp_problem(self.tp)
        if problem:
            raise ValueError(f"roofline profile: tp {problem}")
        if not isinstance(self.name, str):
            raise ValueError(f"roofline profile: name must be a string, got {self.name!r}")
        if not self.name:
            self.name = f"roofline-{self.model.name}-{self.gpu.name}-tp{self.tp}"
        self.provenance = Provenance("roofline", device=f"{self.tp}x {self.gpu.name}", dtype=self.model.dtype,
                                     notes=f"mfu={self.mfu}, bandwidth_util={self.bandwidth_util}, "
                                           f"allreduce_latency_s={self.allreduce_latency_s}, floor_s={self.floor_s}, "
                                           f"overlap={self.overlap}, host_s={self.host_s}")
        m = self.model
        self.terms = RooflineTerms(
            flops_per_token=float(2.0 * m.matmul_params_per_token), flops_per_pair=float(m.attention_flops_per_pair()),
            peak_flops=float(self.tp * self.gpu.flops * self.mfu),
            kv_bytes_per_token=float(m.kv_bytes_per_token_gpu(self.tp)),  # KV heads split (MLA: replicated)
            bandwidth=float(self.gpu.bandwidth_bytes_s * self.bandwidth_util), tp=float(self.tp),
            allreduce_share=2.0 * (self.tp - 1) / self.tp, hidden_size=float(m.hidden_size),
            dtype_bytes=float(m.dtype_bytes), link_bytes_s=float(self.gpu.link_one_way_bytes_s),
            allreduce_latency_s=float(self.allreduce_latency_s), allreduces=float(2 * m.num_layers),
            floor_s=float(self.floor_s), overlap_op=self.overlap == "op", host_s=float(self.host_s),
            weight_bytes=float(m.read_weight_bytes - (0 if m.tie_word_embeddings
                                                      else m.embedding_params * m.weight_dtype_bytes)),
            expert_weight_bytes=float(m.expert_params * m.weight_dtype_bytes) if m.is_moe else 0.0,
            expert_share=m.experts_per_token / m.num_experts if m.is_moe else 0.0, moe=bool(m.is_moe))

    def weight_bytes_read(self, batched_tokens: int) -> float:
        """Weight bytes one step reads in all (MoE: only the experts its tokens are routed to)."""
        return weight_bytes_read(self.terms, batched_tokens)

    attention_pairs = staticmethod(attention_pairs)

    def compute_s(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        return roofline_compute_s(self.terms, attention_pairs(num_seqs, batched_tokens, kv_tokens), batched_tokens)

    def memory_s(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        return roofline_memory_s(self.terms, self.weight_bytes_read(batched_tokens) / self.tp, kv_tokens)

    def per_op_s(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        return roofline_per_op_s(self.terms, self.weight_bytes_read(batched_tokens) / self.tp,
                                 attention_pairs(num_seqs, batched_tokens, kv_tokens), batched_tokens, kv_tokens)

    def allreduce_s(self, batched_tokens: int) -> float:
        return roofline_allreduce_s(self.terms, batched_tokens)

    def step_time(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        return roofline_step_time(self.terms, self.weight_bytes_read(batched_tokens) / self.tp, num_seqs,
                                  batched_tokens, kv_tokens)


def roofline_from_config(doc: dict[str, Any], where: str = "roofline profile") -> RooflineProfile:
    """Build from `{model, gpu, tp?, mfu?, bandwidth_util?, allreduce_latency_s?, floor_s?, overlap?, host_s?}`;
    errors name the key."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a mapping, got {doc!r}")
    allowed = {"kind", "model", "gpu", "tp", "mfu", "bandwidth_util", "allreduce_latency_s", "floor_s", "overlap",
               "host_s", "name"}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(allowed)}")
    for key in ("model", "gpu"):
        if key not in doc:
            raise ValueError(f"{where}.{key}: required (a catalog name)")
    for key in ("model", "gpu"):
        if not isinstance(doc[key], str):
            raise ValueError(f"{where}.{key}: expected a catalog name (string), got {doc[key]!r}")
    try:
        model, gpu = get_model(doc["model"]), get_gpu(doc["gpu"])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e
    kwargs = {k: doc[k] for k in ("tp", "mfu", "bandwidth_util", "allreduce_latency_s", "floor_s", "overlap", "host_s",
                                  "name") if k in doc}
    try:
        return RooflineProfile(model=model, gpu=gpu, **kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from e


def profile_from_ref(ref: "str | dict[str, Any] | InlineProfile", where: str = "profile"):
    """A latency profile from a config reference: a built-in name or file, or an inline profile (a typed spec,
    simulator/costs/profile_spec.py, or its mapping: linear, table, structured or roofline); the one reader of
    `server.target_profile` and a drafter's `profile`."""
    from simulator.costs.latency import profile_from_dict, resolve_profile
    from simulator.costs.profile_spec import InlineProfile

    if isinstance(ref, InlineProfile):
        ref = ref.given()
    if not isinstance(ref, dict):
        return resolve_profile(ref)
    doc = dict(ref)
    doc.setdefault("name", "inline")
    if doc.get("kind") == "roofline":
        return roofline_from_config(doc, where)
    doc.setdefault("provenance", {"source": "config"})
    return profile_from_dict(doc, where)
