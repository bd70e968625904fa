"""One serving step of a dense catalog model priced from measured per-op tables (calibration/op_tables.py).

A step of T = decode sequences + verified draft tokens + prompt-chunk tokens, per layer on `tp` GPUs, as vLLM runs
a Llama/Qwen-style decoder (the op list AIConfigurator uses for these models):
- GEMMs at m = T: QKV (n = (heads + 2 x KV heads per GPU) x head_dim, k = hidden), output projection
  (n = hidden, k = heads x head_dim / tp), gated FFN up (n = 2 x intermediate / tp, k = hidden), FFN down
  (n = hidden, k = intermediate / tp); once per step the LM head at m = tokens that need logits (every decode and
  draft token, one per prompt chunk), n = vocab / tp.
- Decode / verify attention (the stated rule for k + 1 queries per sequence; the generation table is measured at
  one query per sequence only): the larger of two measured sides. Its KV pass: the q = 1 + drafts/sequence query
  tokens of a sequence read its KV once, so a step of B decoding sequences with mean context c is priced as
  generation attention of batch B over c cached tokens with q x (query heads per GPU) query heads on the same KV
  heads (FlashAttention's packed-GQA decode treats the query positions as more heads of one KV pass; the causal
  mask among the q new tokens ignored). Its compute: the q tokens as a prompt chunk of q on context c (the
  prompt-chunk rule below, from the context-attention table), which binds once q is wide (draft trees).
- Prompt-chunk attention: P chunks of mean length q on mean context L (cached + chunk) are priced as context
  attention of batch P over L tokens, scaled by the chunk's share of the causal pairs of a whole prompt of L:
  (q (L - q) + q (q + 1) / 2) / (L (L + 1) / 2).
- TP communication: 2 all-reduces per layer and one after the embedding, each of T x hidden bf16 elements,
  from the measured custom all-reduce at `tp` GPUs (the CUDA-graph kernel up to `graph_max_tokens` tokens, as
  vLLM captures decode batches; the eager one above). tp = 1: none.
- Not in the tables, priced from the catalog (stated): the per-layer elementwise ops (two add+RMSNorm of
  2 x hidden in and out, the SiLU-gate of 2 x intermediate / tp in and intermediate / tp out) and the embedding
  read, as bytes moved over 0.8 x the GPU's datasheet bandwidth; sampling, rejection and the host's scheduling
  are not priced here (the step overhead is the server's `step_overhead_s`).
- A drafter's forward is priced by the same rules at its own shapes (calibration/op_drafter.py): a draft model as
  the model it is; an EAGLE / EAGLE-3 head as one decoder layer of the target's shape (`fusion_in`: the fusion of
  the target's hidden states, m = T, n = hidden, k = fusion_in, before the layer; `qkv_in`: the QKV projection's
  input width, EAGLE-3's embedding + hidden = 2 x hidden) and the LM head over its own vocabulary.
MoE models are not priced (the MoE tables are not read).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

from simulator.costs.step_model import StepShape
from traces.catalog import GpuSpec, ModelSpec

ELEMENTWISE_BANDWIDTH_UTIL = 0.8  # AIConfigurator's stated efficiency for memory-bound elementwise ops
GRAPH_MAX_TOKENS = 512  # vLLM's largest CUDA-graph capture size by default


class OpLookup(Protocol):
    """What the step price reads from the tables (calibration/op_tables.py OpTables, or a hand-made table)."""

    def gemm_s(self, m: float, n: float, k: float) -> float: ...

    def generation_attention_s(self, batch: float, kv_len: float, heads: float, kv_heads: int,
                               head_dim: int) -> float: ...

    def context_attention_s(self, batch: float, isl: float, heads: float, kv_heads: int, head_dim: int) -> float: ...

    def allreduce_s(self, elements: float, gpus: int, graph: bool = True) -> float: ...


class StepParts(NamedTuple):
    """Seconds of one step by op family (their sum is the step's price)."""

    gemm: float
    decode_attention: float
    prefill_attention: float
    allreduce: float
    elementwise: float

    @property
    def total(self) -> float:
        return sum(self)


def prefill_pair_share(chunk: float, context: float) -> float:
    """Share of a whole prompt of `context` tokens' causal (query, key) pairs that its last `chunk` tokens hold."""
    if chunk <= 0 or context <= 0:
        return 0.0
    chunk = min(chunk, context)
    return (chunk * (context - chunk) + chunk * (chunk + 1) / 2.0) / (context * (context + 1) / 2.0)


def allreduce_step_s(ops: OpLookup, tokens: int, hidden: int, layers: int, tp: int,
                     graph_max_tokens: int = GRAPH_MAX_TOKENS) -> float:
    """The TP-communication rule: 2 all-reduces per layer + 1 after the embedding, tokens x hidden elements each."""
    if tp == 1 or tokens <= 0:
        return 0.0
    return (2 * layers + 1) * ops.allreduce_s(tokens * hidden, tp, graph=tokens <= graph_max_tokens)


@dataclass
class OpStepModel:
    """Prices a StepShape of `model` on `tp` x `gpu` from measured op tables (see the module doc)."""

    model: ModelSpec
    gpu: GpuSpec
    ops: OpLookup
    tp: int = 1
    graph_max_tokens: int = GRAPH_MAX_TOKENS
    fusion_in: int = 0  # an EAGLE head's fusion GEMM input width (0: none; module doc)
    qkv_in: int = 0  # the QKV projection's input width (0: hidden)

    def __post_init__(self) -> None:
        m = self.model
        if m.is_moe:
            raise ValueError(f"measured-ops profile: {m.name} is a mixture of experts; only dense models are priced")
        if m.dtype != "bf16":
            raise ValueError(f"measured-ops profile: {m.name} is {m.dtype}; the tables read are bf16")
        problem = m.tp_problem(self.tp)
        if problem:
            raise ValueError(f"measured-ops profile: tp {problem}")
        self.heads = m.num_heads // self.tp
        self.kv_heads = -(-m.num_kv_heads // self.tp)  # replicated when fewer KV heads than GPUs

    def gemm_s(self, tokens: int, logit_tokens: int) -> float:
        """The step's GEMMs at m = `tokens` over all layers, plus the LM head at m = `logit_tokens`."""
        m, tp = self.model, self.tp
        h, d = m.hidden_size, m.head_dim
        per_layer = (self.ops.gemm_s(tokens, (self.heads + 2 * self.kv_heads) * d, self.qkv_in or h)
                     + self.ops.gemm_s(tokens, h, self.heads * d)
                     + self.ops.gemm_s(tokens, 2 * m.intermediate_size // tp, h)
                     + self.ops.gemm_s(tokens, h, m.intermediate_size // tp))
        head = self.ops.gemm_s(logit_tokens, m.vocab_size // tp, h) if logit_tokens > 0 else 0.0
        fusion = self.ops.gemm_s(tokens, h, self.fusion_in) if self.fusion_in else 0.0
        return m.num_layers * per_layer + head + fusion

    def decode_attention_s(self, seqs: int, query_tokens: int, kv_tokens: int) -> float:
        """Decode (q = 1) or verify (q = query_tokens / seqs) attention over all layers: the larger of one KV pass
        and the q queries' compute as a prompt chunk (module doc)."""
        if seqs <= 0:
            return 0.0
        q = query_tokens / seqs
        ctx = max(kv_tokens / seqs, q)
        d = self.model.head_dim
        per_layer = self.ops.generation_attention_s(seqs, ctx, q * self.heads, self.kv_heads, d)
        if q > 1:
            chunk = self.ops.context_attention_s(seqs, ctx, self.heads, self.kv_heads, d) * prefill_pair_share(q, ctx)
            per_layer = max(per_layer, chunk)
        return self.model.num_layers * per_layer

    def prefill_attention_s(self, chunks: int, tokens: int, context: int) -> float:
        """Prompt chunks' attention over all layers (module doc)."""
        if chunks <= 0 or tokens <= 0:
            return 0.0
        q, L = tokens / chunks, max(context / chunks, tokens / chunks)
        whole = self.ops.context_attention_s(chunks, L, self.heads, self.kv_heads, self.model.head_dim)
        return self.model.num_layers * whole * prefill_pair_share(q, L)

    def elementwise_s(self, tokens: int) -> float:
        m = self.model
        inter = m.intermediate_size // self.tp
        per_token_layer = 2 * (2 * m.hidden_size + 2 * m.hidden_size) + (2 * inter + inter)
        nbytes = tokens * (m.num_layers * per_token_layer + m.hidden_size) * m.dtype_bytes
        return nbytes / (self.gpu.bandwidth_bytes_s * ELEMENTWISE_BANDWIDTH_UTIL)

    def parts(self, shape: StepShape) -> StepParts:
        tokens = shape.decode_seqs + shape.draft_tokens + shape.prefill_tokens
        if tokens <= 0:
            return StepParts(0.0, 0.0, 0.0, 0.0, 0.0)
        logits = shape.decode_seqs + shape.draft_tokens + shape.prefill_seqs
        return StepParts(
            gemm=self.gemm_s(tokens, logits),
            decode_attention=self.decode_attention_s(shape.decode_seqs, shape.decode_seqs + shape.draft_tokens,
                                                     shape.decode_kv),
            prefill_attention=self.prefill_attention_s(shape.prefill_seqs, shape.prefill_tokens, shape.prefill_kv),
            allreduce=allreduce_step_s(self.ops, tokens, self.model.hidden_size, self.model.num_layers, self.tp,
                                       self.graph_max_tokens),
            elementwise=self.elementwise_s(tokens))

    def shape_time(self, shape: StepShape) -> float:
        return self.parts(shape).total

    def step_time(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        """A plain batch read as all decoding (StepShape.uniform), as the engine's three-number callers ask."""
        return self.shape_time(StepShape.uniform(num_seqs, batched_tokens, kv_tokens))
