"""The step price from op tables (calibration/op_step.py): its attention, prompt-chunk and TP-communication rules
checked against hand-worked values on a fake table that records what it is asked."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from calibration.op_step import OpStepModel, allreduce_step_s, prefill_pair_share
from simulator.costs.step_model import StepShape
from traces.catalog import get_gpu, get_model


class FakeOps:
    """Closed-form 'tables': GEMM = m n k ns, attention = batch x len x heads ns, all-reduce = elements ns (+1 us
    eager); every call recorded."""

    def __init__(self):
        self.calls = []

    def gemm_s(self, m, n, k):
        self.calls.append(("gemm", m, n, k))
        return m * n * k * 1e-9

    def generation_attention_s(self, batch, kv_len, heads, kv_heads, head_dim):
        self.calls.append(("gen", batch, kv_len, heads, kv_heads, head_dim))
        return batch * kv_len * heads * 1e-9

    def context_attention_s(self, batch, isl, heads, kv_heads, head_dim):
        self.calls.append(("ctx", batch, isl, heads, kv_heads, head_dim))
        return batch * isl * heads * 1e-9

    def allreduce_s(self, elements, gpus, graph=True):
        self.calls.append(("ar", elements, gpus, graph))
        return elements * 1e-9 + (0 if graph else 1e-6)


def _model(tp=1):
    ops = FakeOps()
    return OpStepModel(get_model("llama3.1-8b"), get_gpu("h100-80gb"), ops, tp=tp), ops


def test_verify_attention_is_one_kv_pass_with_k_plus_1_times_the_query_heads():
    step, ops = _model(tp=2)
    # 4 sequences verifying 3 drafts each over 1,000 context tokens apiece: q = 4 queries per sequence
    t = step.decode_attention_s(seqs=4, query_tokens=16, kv_tokens=4000)
    # 32 heads / tp 2 = 16, x q = 4; 8 KV heads / 2 = 4; then the compute side: 4 queries as a chunk on 1,000 tokens
    assert ops.calls == [("gen", 4, 1000.0, 4 * 16, 4, 128), ("ctx", 4, 1000.0, 16, 4, 128)]
    # KV pass 4 x 1000 x 64 ns against 4 x 1000 x 16 ns x (4 x 996 + 10) / 500500 = 0.51 us: the KV pass binds
    assert t == pytest.approx(32 * 4 * 1000 * 64 * 1e-9)  # 32 layers


class BandwidthOps(FakeOps):
    """Generation attention priced by the KV it reads alone (batch x length ns, whatever the heads)."""

    def generation_attention_s(self, batch, kv_len, heads, kv_heads, head_dim):
        self.calls.append(("gen", batch, kv_len, heads, kv_heads, head_dim))
        return batch * kv_len * 1e-9


def test_a_wide_verify_is_priced_by_its_compute_from_the_context_table():
    ops = BandwidthOps()
    step = OpStepModel(get_model("llama3.1-8b"), get_gpu("h100-80gb"), ops)
    # 2 sequences, 64 query tokens each over 100 context tokens: KV pass 2 x 100 ns; compute: the chunk of 64 on
    # 100 tokens, 2 x 100 x 32 ns x (64 x 36 + 64 x 65 / 2) / 5050 = 6400 ns x 4384 / 5050
    t = step.decode_attention_s(seqs=2, query_tokens=128, kv_tokens=200)
    assert t == pytest.approx(32 * 6400e-9 * 4384 / 5050)
    ops.calls.clear()  # a decode (q = 1) reads the generation table alone
    assert step.decode_attention_s(seqs=2, query_tokens=2, kv_tokens=200) == pytest.approx(32 * 200e-9)
    assert [c[0] for c in ops.calls] == ["gen"]


def test_prefill_pair_share_by_hand():
    assert prefill_pair_share(10, 10) == pytest.approx(1.0)
    assert prefill_pair_share(1, 9) == pytest.approx(9 / 45)  # the last token sees all 9 of 45 pairs
    assert prefill_pair_share(0, 9) == 0.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=8))
def test_chunk_shares_of_a_prompt_add_up_to_the_whole(chunks):
    total, ctx = 0.0, 0
    for q in chunks:
        ctx += q
        total += prefill_pair_share(q, ctx) * ctx * (ctx + 1) / 2
    assert total == pytest.approx(ctx * (ctx + 1) / 2)


def test_prefill_chunk_priced_as_whole_context_times_its_pair_share():
    step, ops = _model()
    t = step.prefill_attention_s(chunks=1, tokens=100, context=300)
    assert ops.calls == [("ctx", 1, 300.0, 32, 8, 128)]
    assert t == pytest.approx(32 * 300 * 32 * 1e-9 * prefill_pair_share(100, 300))


def test_tp_communication_rule():
    ops = FakeOps()
    assert allreduce_step_s(ops, 100, 4096, 32, 1) == 0.0 and ops.calls == []
    assert allreduce_step_s(ops, 100, 4096, 32, 4) == pytest.approx(65 * 100 * 4096 * 1e-9)
    assert ops.calls == [("ar", 409600, 4, True)]
    assert allreduce_step_s(ops, 1000, 4096, 32, 4, graph_max_tokens=512) == pytest.approx(
        65 * (1000 * 4096 * 1e-9 + 1e-6))  # above the CUDA-graph sizes: the eager kernel


def test_gemms_of_a_verify_step_by_hand():
    step, ops = _model(tp=1)
    shape = StepShape(decode_seqs=2, draft_tokens=6, decode_kv=2000)
    parts = step.parts(shape)
    T, h, i, v = 8, 4096, 14336, 128256  # 2 + 6 tokens; every one needs logits (verify)
    per_layer = T * ((32 + 16) * 128) * h + T * h * (32 * 128) + T * (2 * i) * h + T * h * i
    assert parts.gemm == pytest.approx((32 * per_layer + T * v * h) * 1e-9)
    assert parts.allreduce == 0.0 and parts.prefill_attention == 0.0
    assert step.shape_time(shape) == pytest.approx(sum(parts))


def test_logits_once_per_prompt_chunk_and_per_decode_and_draft_token():
    step, ops = _model()
    step.parts(StepShape(decode_seqs=3, draft_tokens=0, decode_kv=30, prefill_seqs=2, prefill_tokens=50,
                         prefill_kv=50, prefill_attn=1250))
    lm = [c for c in ops.calls if c[0] == "gemm" and c[2] == 128256]
    assert lm == [("gemm", 5, 128256, 4096)]


def test_rejects_moe_and_bad_tp():
    with pytest.raises(ValueError, match="mixture of experts"):
        OpStepModel(get_model("qwen3-235b-a22b"), get_gpu("h100-80gb"), FakeOps())
    with pytest.raises(ValueError, match="tp 3 does not divide"):
        OpStepModel(get_model("llama3.1-8b"), get_gpu("h100-80gb"), FakeOps(), tp=3)
