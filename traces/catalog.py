"""Model and GPU catalogs: architecture and datasheet numbers, and the sizes derived from them.

Catalog files are YAML mappings `name -> fields`; the built-in ones are
`traces/data/catalog/models.yaml` and `gpus.yaml`. Loading validates every entry and fails with a
`TraceFormatError` naming the file, the entry and the key. Derived quantities:

- KV bytes per token = 2 (K and V) x layers x KV heads x head dim x dtype bytes (all layers counted as
  full attention; a sliding-window layer would hold at most its window, see `kv_bytes_per_token`).
- Weight bytes = stated parameter count x dtype bytes (all weights, shared embeddings counted once).
- Matmul parameters per token = active parameters minus the input embedding when it is not tied
  to the output head (an embedding lookup does no FLOPs); MoE models count only the routed experts.
- An MTP-capable model (`mtp_layers` = config.json num_nextn_predict_layers) has a head `NAME:mtp`
  (`ModelSpec.mtp_head`): its weights and KV are placed beside the target's, and its forward is priced
  like any model's.
- Multi-head latent attention (MLA, DeepSeek-V3: `kv_lora_rank` > 0) caches one latent of kv_lora_rank +
  qk_rope_head_dim values per token and layer, whatever the heads, replicated on every TP rank (vLLM's MLA cache);
  its projections are counted from the config's low ranks.
- Linear-attention layers (Qwen3-Next's Gated DeltaNet: `linear_attention_layers`) hold no per-token KV but a
  recurrent state per running sequence (`linear_state_bytes_per_seq`: the conv window and the delta-rule state),
  which placement reserves for max_num_seqs sequences.
- `weight_dtype` (default: dtype) is a quantized checkpoint's weight type (DeepSeek-V3 ships fp8 blocks);
  activations and the KV cache stay in `dtype` (vLLM's kv_cache_dtype auto is the model dtype).
"""
from __future__ import annotations

import difflib
import importlib.resources
import math
from dataclasses import MISSING, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from traces.errors import TraceFormatError, shorten
from traces.parsing import load_yaml_file

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "int8": 1, "int4": 0.5}
GIB = 1024 ** 3


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture (from its config.json) and stated parameter counts."""

    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    params: float
    dtype: str
    source: str
    tie_word_embeddings: bool = False
    active_params: float | None = None
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    sliding_window: int = 0
    full_attention_layers: int | None = None
    mtp_layers: int = 0  # config.json num_nextn_predict_layers: the MTP head's layers (vLLM's n_predict)
    shared_params: float = 0.0  # parameters a forward reads but another model holds (an MTP head's LM head)
    weight_dtype: str = ""  # a quantized checkpoint's weight dtype ("": dtype); activations and KV stay in dtype
    attn_output_gate: bool = False  # gated attention output: q_proj also emits the gate (heads x head_dim more)
    first_k_dense_replace: int = 0  # MoE models: leading layers with a dense MLP of dense_intermediate_size
    dense_intermediate_size: int = 0
    q_lora_rank: int = 0  # MLA (config.json names): the query's low rank (0: a full-rank query projection)
    kv_lora_rank: int = 0  # MLA: the cached latent's rank (0: GQA attention)
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    linear_attention_layers: int = 0  # Gated DeltaNet layers (config.json layer_types "linear_attention")
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.weight_dtype or self.dtype]

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_layers(self) -> int:
        """Layers that cache KV per token (all but the linear-attention ones)."""
        return self.num_layers - self.linear_attention_layers

    def _kv_layer_bytes(self, kv_heads: int) -> float:
        """One token's KV in one attention layer holding `kv_heads` KV heads (MLA: the one latent, any heads)."""
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return 2 * kv_heads * self.head_dim * self.dtype_bytes

    def kv_bytes_per_token_gpu(self, shards: int) -> float:
        """KV bytes per token on one GPU of the model sharded `shards` ways: KV heads split (replicated when fewer
        than the shards); an MLA latent is replicated on every shard."""
        if self.is_mla:
            return self.attention_layers * self._kv_layer_bytes(1)
        heads = -(-self.num_kv_heads // shards)
        return 2 * self.attention_layers * heads * self.head_dim * self.dtype_bytes

    @property
    def linear_state_bytes_per_seq(self) -> float:
        """The recurrent state one running sequence holds in the linear-attention layers: per layer the causal conv
        window ((kernel - 1) x (2 x key heads x key dim + value heads x value dim)) and the delta-rule state (value
        heads x key dim x value dim), in dtype (vLLM's mamba cache dtypes auto: the model dtype)."""
        if not self.linear_attention_layers:
            return 0.0
        key, value = self.linear_num_key_heads * self.linear_key_head_dim, \
            self.linear_num_value_heads * self.linear_value_head_dim
        conv = (self.linear_conv_kernel_dim - 1) * (2 * key + value)
        delta = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        return self.linear_attention_layers * (conv + delta) * self.dtype_bytes

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def active(self) -> float:
        """Parameters used per token (= params for dense models)."""
        return self.active_params if self.active_params is not None else self.params

    def kv_bytes_per_token(self, context_len: int | None = None) -> float:
        """KV cache bytes one token occupies; with `context_len`, sliding-window layers hold at most their window."""
        per_layer = self._kv_layer_bytes(self.num_kv_heads)
        if not self.sliding_window or context_len is None or self.full_attention_layers is None:
            return self.attention_layers * per_layer
        sliding_layers = self.num_layers - self.full_attention_layers
        share = min(1.0, self.sliding_window / max(context_len, 1))
        return per_layer * (self.full_attention_layers + sliding_layers * share)

    @property
    def weight_bytes(self) -> float:
        """All weights this model adds to memory (every expert of an MoE model; shared_params excluded)."""
        return (self.params - self.shared_params) * self.weight_dtype_bytes

    @property
    def read_weight_bytes(self) -> float:
        """All weights one forward may read, shared ones included."""
        return self.params * self.weight_dtype_bytes

    def attention_params(self) -> float:
        """One attention layer's projections. GQA: q (x2 with an output gate), k, v, o. MLA: q down (h x q_lora)
        and up (q_lora x heads x (nope + rope)), the joint KV down (h x (kv_lora + rope)) and up (kv_lora x heads x
        (nope + v)), o (heads x v x h)."""
        h, n = self.hidden_size, self.num_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * n * qk) if self.q_lora_rank else h * n * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + \
                self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
            return float(q + kv + n * self.v_head_dim * h)
        q, kv = n * self.head_dim, self.num_kv_heads * self.head_dim
        return float(h * q * (2 if self.attn_output_gate else 1) + 2 * h * kv + q * h)

    def linear_attention_params(self) -> float:
        """One Gated DeltaNet layer: the q/k/v/z and b/a input projections, the causal conv over q, k, v, and the
        output projection (norms ignored)."""
        h = self.hidden_size
        key, value = self.linear_num_key_heads * self.linear_key_head_dim, \
            self.linear_num_value_heads * self.linear_value_head_dim
        return float(h * (2 * key + 2 * value) + h * 2 * self.linear_num_value_heads
                     + (2 * key + value) * self.linear_conv_kernel_dim + value * h)

    def mlp_params(self, dense: bool = False) -> float:
        """One layer's MLP: gated (3 matrices); an MoE layer's shared expert (intermediate_size), every routed expert
        and the router; `dense`: a leading dense layer of an MoE model (dense_intermediate_size)."""
        h = self.hidden_size
        if dense:
            return float(3 * h * self.dense_intermediate_size)
        mlp = 3 * h * self.intermediate_size
        if self.is_moe:
            mlp += self.num_experts * 3 * h * self.moe_intermediate_size + h * self.num_experts
        return float(mlp)

    def layer_params(self) -> float:
        """One (attention, MoE when the model is MoE) decoder layer, every expert counted; norms ignored."""
        return self.attention_params() + self.mlp_params()

    def mtp_head(self) -> "ModelSpec":
        """The model's MTP head as a model of its own (`<name>:mtp`): one decoder layer of the target's shape plus
        the projection of [embedding; hidden] (2h x h), as vLLM's DeepSeek/MiMo/GLM MTP layers are built; it
        reads the target's LM head (vocab x h) every forward, and vLLM's proposer shares that and the embedding
        with the target (vllm/v1/spec_decode/eagle.py load_model), so they are `shared_params`, not memory."""
        if self.mtp_layers != 1:
            raise ValueError(f"{self.name} has {self.mtp_layers} MTP layers; only one-layer MTP heads are modelled "
                             "(every MTP-capable catalog entry has one)")
        h = self.hidden_size
        layer = self.layer_params() + 2 * h * h
        lm_head = float(self.vocab_size * h)
        active = None
        if self.is_moe:
            routed_off = (self.num_experts - self.experts_per_token) * 3 * h * self.moe_intermediate_size
            active = layer - routed_off + lm_head
        return replace(self, name=f"{self.name}:mtp", num_layers=1, params=layer + lm_head, active_params=active,
                       tie_word_embeddings=True, shared_params=lm_head, mtp_layers=0, sliding_window=0,
                       full_attention_layers=None, first_k_dense_replace=0, linear_attention_layers=0,
                       source=f"MTP head of {self.name}: one decoder layer + 2h x h projection, LM head shared "
                              f"({self.source})")

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def matmul_params_per_token(self) -> float:
        """Active parameters that take part in a matmul for each token (the input lookup is free)."""
        return self.active - (0 if self.tie_word_embeddings else self.embedding_params)

    @property
    def expert_params(self) -> float:
        """Parameters in all routed experts (0 for dense models; leading dense layers have none)."""
        return float((self.num_layers - self.first_k_dense_replace) * self.num_experts * 3 * self.hidden_size
                     * self.moe_intermediate_size)

    def attention_flops_per_pair(self) -> float:
        """FLOPs for one (query token, context token) pair over the attention layers: QK^T and AV, 2 FLOPs per MAC
        (MLA: the absorbed form vLLM decodes with, each head's query against the kv_lora + rope latent and the value
        read from the kv_lora latent; linear-attention layers pair with no context)."""
        if self.is_mla:
            per_head = 2 * (self.kv_lora_rank + self.qk_rope_head_dim) + 2 * self.kv_lora_rank
            return float(self.attention_layers * self.num_heads * per_head)
        return 4.0 * self.attention_layers * self.num_heads * self.head_dim

    def tp_problem(self, tp: int) -> str | None:
        """Why this model cannot be sharded `tp` ways (vLLM needs tp to divide the attention heads), or None."""
        if self.num_heads % tp:
            return f"{tp} does not divide the {self.num_heads} attention heads of {self.name} (vLLM requires it)"
        return None

    def derived_params(self) -> float:
        """Parameter count re-derived from the architecture (gated MLP, GQA or MLA attention, linear-attention
        layers, leading dense layers; norms ignored)."""
        emb = self.embedding_params * (1 if self.tie_word_embeddings else 2)
        if not (self.linear_attention_layers or self.first_k_dense_replace):
            return float(self.num_layers * self.layer_params() + emb)
        attn = self.attention_layers * self.attention_params() + \
            self.linear_attention_layers * self.linear_attention_params()
        mlp = (self.first_k_dense_replace * self.mlp_params(dense=True)
               + (self.num_layers - self.first_k_dense_replace) * self.mlp_params())
        return float(attn + mlp + emb)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type's datasheet numbers."""

    name: str
    memory_gb: float
    bandwidth_gbps: float
    bf16_tflops: float
    link_gbps: float
    link: str
    source: str

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def flops(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def link_bytes_s(self) -> float:
        """The datasheet's per-GPU link figure: both directions together (NVLink4 900 GB/s = 450 each way)."""
        return self.link_gbps * 1e9

    @property
    def link_one_way_bytes_s(self) -> float:
        """What one GPU can send at once: half the bidirectional figure (a ring all-reduce sends and receives)."""
        return self.link_gbps * 1e9 / 2.0


# ------------------------------------------------------------------ loading


def _schema(cls: type) -> dict[str, tuple[type, bool]]:
    """key -> (python type, required) for a catalog dataclass, `name` excluded."""
    types = {"int": int, "float": float, "str": str, "bool": bool, "float | None": float,
             "int | None": int}
    out = {}
    for f in fields(cls):
        if f.name == "name":
            continue
        required = f.default is MISSING and f.default_factory is MISSING
        out[f.name] = (types[str(f.type)], required)
    return out


def _check_entry(cls: type, name: str, doc: Any, path: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise TraceFormatError(path, f"expected a mapping of fields, got {type(doc).__name__}", field=name)
    schema = _schema(cls)
    unknown = sorted(set(doc) - set(schema))
    if unknown:
        raise TraceFormatError(path, f"unknown key; expected some of {sorted(schema)}", field=f"{name}.{unknown[0]}")
    missing = sorted(k for k, (_, req) in schema.items() if req and k not in doc)
    if missing:
        raise TraceFormatError(path, "required key is missing", field=f"{name}.{missing[0]}")
    out: dict[str, Any] = {"name": name}
    for key, value in doc.items():
        typ, _ = schema[key]
        where = f"{name}.{key}"
        if value is None and not schema[key][1]:
            continue
        if typ is bool:
            if not isinstance(value, bool):
                raise TraceFormatError(path, f"expected true or false, got {shorten(value)}", field=where)
        elif typ is str:
            if not isinstance(value, str) or not value:
                raise TraceFormatError(path, f"expected a non-empty string, got {shorten(value)}", field=where)
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TraceFormatError(path, f"expected a finite number, got {shorten(value)}", field=where)
            if typ is int and not isinstance(value, int):
                raise TraceFormatError(path, f"expected an integer, got {shorten(value)}", field=where)
            if not 0 <= value <= MAX_CATALOG_NUMBER:
                raise TraceFormatError(path, f"expected a number in [0, {MAX_CATALOG_NUMBER:.0e}], got {shorten(value)}",
                                       field=where)
            value = typ(value)
        out[key] = value
    return out


MAX_CATALOG_NUMBER = 1e15  # above any parameter count, FLOP/s in TFLOP/s, or memory in GB


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise TraceFormatError(str(path), "catalog file not found")
    doc = load_yaml_file(path)
    if not isinstance(doc, dict) or not doc:
        raise TraceFormatError(str(path), "expected a non-empty mapping of name -> fields at the top level")
    return doc


def load_models(path: str | Path) -> dict[str, ModelSpec]:
    """Read and validate a model catalog file."""
    path = Path(path)
    out: dict[str, ModelSpec] = {}
    for name, doc in _read_yaml(path).items():
        name = str(name)
        entry = _check_entry(ModelSpec, name, doc, str(path))
        if entry["dtype"] not in DTYPE_BYTES:
            raise TraceFormatError(str(path), f"expected one of {sorted(DTYPE_BYTES)}, got {shorten(entry['dtype'])}",
                                   field=f"{name}.dtype")
        for key in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "params"):
            if entry[key] <= 0:
                raise TraceFormatError(str(path), "expected a number > 0", field=f"{name}.{key}")
        if entry["num_heads"] % entry["num_kv_heads"]:
            raise TraceFormatError(str(path), f"num_heads {entry['num_heads']} is not a multiple of num_kv_heads",
                                   field=f"{name}.num_kv_heads")
        experts = entry.get("num_experts", 0)
        if experts and not (0 < entry.get("experts_per_token", 0) <= experts and entry.get("moe_intermediate_size")):
            raise TraceFormatError(str(path), "an MoE model needs 0 < experts_per_token <= num_experts and "
                                   "moe_intermediate_size > 0", field=f"{name}.experts_per_token")
        if entry.get("active_params") is not None and entry["active_params"] > entry["params"]:
            raise TraceFormatError(str(path), "active_params exceeds params", field=f"{name}.active_params")
        _check_architecture(entry, name, str(path))
        out[name] = ModelSpec(**entry)
    return out


def _check_architecture(entry: dict[str, Any], name: str, path: str) -> None:
    """The optional architecture groups are complete and consistent (MLA ranks, linear-attention shapes, dense
    leading layers, the weight dtype)."""
    def need(keys: tuple[str, ...], why: str) -> None:
        for key in keys:
            if not entry.get(key):
                raise TraceFormatError(path, f"expected a number > 0 ({why})", field=f"{name}.{key}")

    if entry.get("weight_dtype") and entry["weight_dtype"] not in DTYPE_BYTES:
        raise TraceFormatError(path, f"expected one of {sorted(DTYPE_BYTES)}, got {shorten(entry['weight_dtype'])}",
                               field=f"{name}.weight_dtype")
    if entry.get("kv_lora_rank"):
        need(("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"), "an MLA model (kv_lora_rank > 0)")
    if entry.get("linear_attention_layers"):
        need(("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim"), "a model with linear-attention layers")
        if entry["linear_attention_layers"] >= entry["num_layers"]:
            raise TraceFormatError(path, f"expected fewer than num_layers ({entry['num_layers']})",
                                   field=f"{name}.linear_attention_layers")
    if entry.get("first_k_dense_replace"):
        need(("dense_intermediate_size", "num_experts"), "an MoE model with leading dense layers")
        if entry["first_k_dense_replace"] >= entry["num_layers"]:
            raise TraceFormatError(path, f"expected fewer than num_layers ({entry['num_layers']})",
                                   field=f"{name}.first_k_dense_replace")


def load_gpus(path: str | Path) -> dict[str, GpuSpec]:
    """Read and validate a GPU catalog file."""
    path = Path(path)
    out: dict[str, GpuSpec] = {}
    for name, doc in _read_yaml(path).items():
        name = str(name)
        entry = _check_entry(GpuSpec, name, doc, str(path))
        for key in ("memory_gb", "bandwidth_gbps", "bf16_tflops", "link_gbps"):
            if entry[key] <= 0:
                raise TraceFormatError(str(path), "expected a number > 0", field=f"{name}.{key}")
        out[name] = GpuSpec(**entry)
    return out


def builtin_catalog_dir() -> Path:
    return Path(str(importlib.resources.files("traces") / "data" / "catalog"))


ALIAS_KEYS = ("same_architecture_as", "hf_id", "source")


def load_aliases(path: str | Path, models: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
    """Read a model alias file (name -> {same_architecture_as, hf_id, source}); each alias is a copy of its
    entry under its own name, hf_id and source."""
    path = Path(path)
    out: dict[str, ModelSpec] = {}
    for name, doc in _read_yaml(path).items():
        name = str(name)
        if not isinstance(doc, dict):
            raise TraceFormatError(str(path), f"expected a mapping with {list(ALIAS_KEYS)}", field=name)
        for key in ALIAS_KEYS:
            if not isinstance(doc.get(key), str) or not doc[key]:
                raise TraceFormatError(str(path), "required non-empty string", field=f"{name}.{key}")
        unknown = sorted(set(doc) - set(ALIAS_KEYS))
        if unknown:
            raise TraceFormatError(str(path), f"unknown key; expected some of {list(ALIAS_KEYS)}",
                                   field=f"{name}.{unknown[0]}")
        if name in models:
            raise TraceFormatError(str(path), "alias repeats a catalog entry's name", field=name)
        base = models.get(doc["same_architecture_as"])
        if base is None:
            raise TraceFormatError(str(path), f"no catalog model {doc['same_architecture_as']!r}",
                                   field=f"{name}.same_architecture_as")
        out[name] = replace(base, name=name, hf_id=doc["hf_id"], source=doc["source"])
    return out


@lru_cache(maxsize=1)
def builtin_models() -> dict[str, ModelSpec]:
    models = load_models(builtin_catalog_dir() / "models.yaml")
    return {**models, **load_aliases(builtin_catalog_dir() / "aliases.yaml", models)}


def _unknown(kind: str, name: str, known: dict[str, Any]) -> ValueError:
    return ValueError(f"unknown {kind} {name!r}{did_you_mean(name, known)}; the catalog has {sorted(known)}")


@lru_cache(maxsize=1)
def builtin_gpus() -> dict[str, GpuSpec]:
    return load_gpus(builtin_catalog_dir() / "gpus.yaml")


def did_you_mean(name: object, known) -> str:
    """' (did you mean 'x' or 'y'?)' for the up to three closest known names, or ''."""
    close = difflib.get_close_matches(str(name).lower(), list(known), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def catalog_name(name: object) -> str | None:
    """The catalog's name of a model given by its name, an alias or its Hugging Face id (any case); None when the
    catalog does not have it."""
    text = str(getattr(name, "name", name) or "")
    if not text:
        return None
    try:
        return get_model(text).name
    except ValueError:
        return next((spec.name for spec in builtin_models().values() if spec.hf_id.lower() == text.lower()), None)


def get_model(name: str) -> ModelSpec:
    """A built-in model by name (case-insensitive); ValueError lists the known names."""
    models = builtin_models()
    base, head = (name[: -len(MTP_SUFFIX)], True) if name.lower().endswith(MTP_SUFFIX) else (name, False)
    spec = models.get(base.lower())
    if spec is None:
        raise _unknown("model", name, models)
    if head:
        if not spec.mtp_layers:
            mtp = sorted(n for n, m in models.items() if m.mtp_layers)
            raise ValueError(f"model {base!r} has no MTP head (num_nextn_predict_layers = 0); the catalog's "
                             f"MTP-capable models are {mtp}")
        return spec.mtp_head()
    return spec


MTP_SUFFIX = ":mtp"  # `mimo-7b:mtp`: the MTP head of a catalog model, as a drafter or a roofline model


def get_gpu(name: str) -> GpuSpec:
    """A built-in GPU by name (case-insensitive); ValueError lists the known names."""
    gpus = builtin_gpus()
    spec = gpus.get(name.lower())
    if spec is None:
        raise _unknown("GPU", name, gpus)
    return spec
