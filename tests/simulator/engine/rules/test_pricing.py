"""The pricing rules (simulator/engine/rules/pricing.py) against hand-worked prices, each as plain Python (as the
kernels run with numba's JIT off, and as profiles price in Python) and as compiled_kernel compiles it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.costs.roofline import RooflineTerms
from simulator.engine.rules import pricing
from simulator.engine.rules.pricing import (DRAFT_AUTOREGRESSIVE, DRAFT_CONSTANT, DRAFT_ENGINE_STEP, DRAFT_FRACTION,
                                            DRAFT_WHOLE, PROFILE_LINEAR, PROFILE_ROOFLINE, PROFILE_STRUCTURED,
                                            DraftTerms, ProfileTerms)

NO_ROOFLINE = RooflineTerms(*(0.0,) * 13, False, 0.0)
# 1e-3 x kv + 1e-2 x batched tokens + 0.1 x seqs + 1.0
LINEAR = ProfileTerms(PROFILE_LINEAR, (1e-3, 1e-2, 0.1, 1.0), NO_ROOFLINE)
# a roofline whose every number is easy by hand: see test_terms_step_time_roofline_reads_weights_by_batched_tokens;
# an MoE of 200 weight bytes, 100 of them experts, each token routed to half of them
ROOF = RooflineTerms(flops_per_token=2.0, flops_per_pair=4.0, peak_flops=10.0, kv_bytes_per_token=10.0,
                     bandwidth=25.0, tp=2.0, allreduce_share=1.0, hidden_size=3.0, dtype_bytes=2.0, link_bytes_s=6.0,
                     allreduce_latency_s=0.5, allreduces=4.0, floor_s=0.0, overlap_op=False, host_s=0.25,
                     weight_bytes=200.0, expert_weight_bytes=100.0, expert_share=0.5, moe=True)
ROOFLINE = ProfileTerms(PROFILE_ROOFLINE, (0.0, 0.0, 0.0, 0.0), ROOF)


def _rules(which: str):
    """The rules as plain Python or as the kernel compiled them."""
    if which == "plain":
        return (pricing.draft_time, pricing.drafters_prefill_time, pricing.sd_step_time, pricing.terms_step_time,
                pricing.step_estimate)
    import simulator.engine.compiled_kernel as ker

    return ker._draft_time, ker._drafters_prefill_time, ker._sd_step_time, ker._price, ker._step_estimate


PATHS = ["plain", "compiled"]


@pytest.mark.parametrize("which", PATHS)
def test_draft_time_each_kind_by_hand(which):
    draft_time = _rules(which)[0]
    # 3 sequences propose 6 tokens (k_max 2) over 50 KV tokens; the step's verify took 2.0 s
    args = (3, 6, 2, 50, 2.0)
    assert draft_time(DraftTerms(DRAFT_CONSTANT, 0.25, 0.0, False), LINEAR, *args) == 0.25
    assert draft_time(DraftTerms(DRAFT_FRACTION, 0.0, 0.5, False), LINEAR, *args) == 1.0
    # whole proposal: one pass at (3 seqs, 6 tokens, 50 KV): 0.05 + 0.06 + 0.3 + 1 = 1.41
    assert draft_time(DraftTerms(DRAFT_WHOLE, 0.0, 0.0, True), LINEAR, *args) == pytest.approx(1.41, rel=1e-15)
    # autoregressive: k_max one-token passes, KV + 3 per pass: (0.05 + 0.03 + 0.3 + 1) + (0.053 + 0.03 + 0.3 + 1)
    assert draft_time(DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True), LINEAR, *args) == pytest.approx(
        2.763, rel=1e-15)
    # an engine-step proposer is priced per engine step, not per drafting phase
    assert draft_time(DraftTerms(DRAFT_ENGINE_STEP, 0.25, 0.5, False), LINEAR, *args) == 0.0


@pytest.mark.parametrize("which", PATHS)
@pytest.mark.parametrize("kind", [DRAFT_CONSTANT, DRAFT_FRACTION, DRAFT_WHOLE, DRAFT_AUTOREGRESSIVE])
def test_nothing_proposed_costs_nothing(which, kind):
    draft_time = _rules(which)[0]
    cost = DraftTerms(kind, 0.25, 0.5, True)
    assert draft_time(cost, LINEAR, 0, 0, 2, 50, 2.0) == 0.0
    assert draft_time(cost, LINEAR, 3, 0, 2, 50, 2.0) == 0.0


@pytest.mark.parametrize("which", PATHS)
def test_host_seconds_once_per_drafting_phase_that_proposes(which):
    draft_time = _rules(which)[0]
    args = (3, 6, 2, 50, 2.0)  # as test_draft_time_each_kind_by_hand: the same GPU prices plus 0.125 s, once
    assert draft_time(DraftTerms(DRAFT_CONSTANT, 0.25, 0.0, False, 0.125), LINEAR, *args) == 0.375
    assert draft_time(DraftTerms(DRAFT_FRACTION, 0.0, 0.5, False, 0.125), LINEAR, *args) == 1.125
    assert draft_time(DraftTerms(DRAFT_WHOLE, 0.0, 0.0, True, 0.125), LINEAR, *args) == pytest.approx(1.535,
                                                                                                     rel=1e-15)
    # autoregressive: 2 passes (2.763 s), the host term once per phase, not per pass
    assert draft_time(DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True, 0.125), LINEAR, *args) == pytest.approx(
        2.888, rel=1e-15)
    for kind in (DRAFT_CONSTANT, DRAFT_WHOLE, DRAFT_AUTOREGRESSIVE):  # nothing proposed: no host work either
        assert draft_time(DraftTerms(kind, 0.25, 0.5, True, 0.125), LINEAR, 3, 0, 2, 50, 2.0) == 0.0


@pytest.mark.parametrize("which", PATHS)
def test_step_estimate_carries_the_host_term_of_the_drafter(which):
    estimate = _rules(which)[4]
    whole, order = DraftTerms(DRAFT_WHOLE, 0.0, 0.0, True), np.array([0])
    # constant 0.25 s drafting + forward 1.0 + overhead 0.5 = 1.75; with 0.125 s of host work per phase 1.875
    for cost, want in ((DraftTerms(DRAFT_CONSTANT, 0.25, 0.0, False), 1.75),
                       (DraftTerms(DRAFT_CONSTANT, 0.25, 0.0, False, 0.125), 1.875)):
        assert estimate(1.0, cost, LINEAR, (whole,), (LINEAR,), order, 0.5, 0.0, False, 3, 50, 2, 0, 0, 0) == \
            pytest.approx(want, rel=1e-15)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 64), k=st.integers(1, 12), kv=st.integers(0, 100_000))
def test_autoregressive_is_the_closed_form_sum_of_its_passes(n, k, kv):
    # pass i prices (n seqs, n tokens, kv + i n KV): sum = k (s n + b n + d) + a (k kv + n k (k - 1) / 2)
    a, b, s, d = LINEAR.linear
    want = k * (s * n + b * n + d) + a * (k * kv + n * k * (k - 1) / 2)
    got = pricing.draft_time(DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True), LINEAR, n, n * k, k, kv, 0.0)
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("which", PATHS)
def test_drafters_prefill_time_sums_each_drafters_own_pass_in_order(which):
    prefill = _rules(which)[1]
    other = ProfileTerms(PROFILE_LINEAR, (2e-3, 3e-2, 0.2, 0.05), NO_ROOFLINE)
    costs = (DraftTerms(DRAFT_WHOLE, 0.0, 0.0, True), DraftTerms(DRAFT_FRACTION, 0.0, 0.5, False),
             DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True))
    profiles = (LINEAR, LINEAR, other)
    # 2 prompt chunks of 40 tokens in all over 40 KV: LINEAR 0.04 + 0.4 + 0.2 + 1 = 1.64; other 0.08 + 1.2 + 0.4
    # + 0.05 = 1.73; the fraction-of-verify drafter (no profile) runs no prompt pass
    order = np.array([2, 1, 0])
    assert prefill(costs, profiles, order, 2, 40, 40) == pytest.approx(1.73 + 1.64, rel=1e-15)
    assert prefill(costs, profiles, np.array([1]), 2, 40, 40) == 0.0
    assert prefill(costs, profiles, order, 0, 0, 0) == 0.0


@pytest.mark.parametrize("which", PATHS)
def test_sd_step_time_adds_draft_verify_overhead_then_prompt_pass(which):
    sd_step_time = _rules(which)[2]
    assert sd_step_time(0.25, 1.5, 0.01, 0.125) == 0.25 + 1.5 + 0.01 + 0.125
    # left to right, in that order: the 1.0 is lost in 1e16 before the -1e16 cancels it
    assert sd_step_time(1e16, 1.0, -1e16, 1.0) == 1.0


@pytest.mark.parametrize("which", PATHS)
def test_terms_step_time_linear_by_hand(which):
    price = _rules(which)[3]
    # 2 seqs, 6 tokens, 10 KV: 0.01 + 0.06 + 0.2 + 1 = 1.27
    assert price(LINEAR, 2, 6, 10) == pytest.approx(1.27, rel=1e-15)


@pytest.mark.parametrize("which", PATHS)
def test_terms_step_time_roofline_reads_weights_by_batched_tokens(which):
    price = _rules(which)[3]
    # 2 seqs, 4 tokens, 4 KV: q = c = 2, pairs = 2 (2 x 2 - 2 x 1 / 2) = 6; compute (2 x 4 + 4 x 6) / 10 = 3.2;
    # 4 tokens touch 1 - 0.5^4 = 15/16 of the experts: 100 + 93.75 bytes, 96.875 per GPU: memory
    # (96.875 + 4 x 10) / 25 = 5.475; all-reduce 4 x (24 / 6 + 0.5) = 18; + host 0.25
    assert price(ROOFLINE, 2, 4, 4) == pytest.approx(5.475 + 18 + 0.25, rel=1e-15)
    # 5 tokens over 5 KV for 5 seqs: pairs 5, compute (10 + 20) / 10 = 3; 31/32 of the experts: 98.4375 per GPU,
    # memory (98.4375 + 50) / 25 = 5.9375; all-reduce 4 x (30 / 6 + 0.5) = 22
    assert price(ROOFLINE, 5, 5, 5) == pytest.approx(5.9375 + 22 + 0.25, rel=1e-15)
    assert price(ROOFLINE, 2, 0, 4) == 0.0
    # a dense model reads every weight: 100 per GPU, memory (100 + 40) / 25 = 5.6
    dense = ROOFLINE._replace(roofline=ROOF._replace(moe=False))
    assert price(dense, 2, 4, 4) == pytest.approx(5.6 + 18 + 0.25, rel=1e-15)


@pytest.mark.parametrize("model", ["qwen3-235b-a22b", "deepseek-v3", "llama3.1-8b"])
def test_the_compiled_weight_read_is_the_profiles_bit_for_bit(model):
    """RooflineProfile.weight_bytes_read (plain) and the kernel's compiled rule give the same float at every batched
    token count up to where an MoE's experts are all touched, and far past it (libm's pow both ways)."""
    import simulator.engine.compiled_kernel as ker  # noqa: F401 (compiles the rules)
    from numba import njit

    from simulator.costs.roofline import RooflineProfile, weight_bytes_read
    from traces.catalog import get_gpu, get_model

    prof = RooflineProfile(get_model(model), get_gpu("h100-80gb"), tp=8)
    compiled = njit(weight_bytes_read)
    ns = [*range(0, 4096), 10**5, 10**7, 2**40]
    assert [compiled(prof.terms, n) for n in ns] == [prof.weight_bytes_read(n) for n in ns]
    if prof.terms.moe:  # touched grows to all experts, the read to the model's whole weights
        reads = np.array([prof.weight_bytes_read(n) for n in ns])
        assert (np.diff(reads) >= 0).all() and reads[-1] == prof.terms.weight_bytes
        assert reads[1] < 0.5 * reads[-1]


@pytest.mark.parametrize("which", PATHS)
def test_step_estimate_by_hand(which):
    estimate = _rules(which)[4]
    whole = DraftTerms(DRAFT_WHOLE, 0.0, 0.0, True)
    passes = (whole,)
    order = np.array([0])
    # 3 sequences over 50 KV verify k = 2 drafts each; the target's forward 2.0 s, overhead 0.01 s.
    # Drafting: one pass at (3 seqs, 6 tokens, 50 KV) = 1.41; no prompt chunk: 1.41 + 2.0 + 0.01
    args = (whole, LINEAR, passes, (LINEAR,), order, 0.01)
    assert estimate(2.0, *args, 0.0, False, 3, 50, 2, 0, 0, 0) == pytest.approx(3.42, rel=1e-15)
    # a vLLM V1 proposer's 0.5 s adds to the drafting
    assert estimate(2.0, *args, 0.5, False, 3, 50, 2, 0, 0, 0) == pytest.approx(3.92, rel=1e-15)
    # with 2 prompt chunks of 40 tokens over 40 KV: the drafter's own pass 1.64 after the step
    assert estimate(2.0, *args, 0.0, False, 3, 50, 2, 2, 40, 40) == pytest.approx(3.42 + 1.64, rel=1e-15)
    # k = 0: no drafting; the prompt pass still runs
    assert estimate(2.0, *args, 0.0, False, 3, 50, 0, 2, 40, 40) == pytest.approx(2.01 + 1.64, rel=1e-15)
    # pipelined (PSD): the target's 2.01 beside the draft device's 1.41 + 1.64 = 3.05; without the prompt pass 2.01
    assert estimate(2.0, *args, 0.0, True, 3, 50, 2, 2, 40, 40) == pytest.approx(3.05, rel=1e-15)
    assert estimate(2.0, *args, 0.0, True, 3, 50, 2, 0, 0, 0) == pytest.approx(2.01, rel=1e-15)
    # an autoregressive drafter drafts k one-token passes: (3, 3, 50) + (3, 3, 53) = 1.38 + 1.383
    ar = DraftTerms(DRAFT_AUTOREGRESSIVE, 0.0, 0.0, True)
    assert estimate(2.0, ar, LINEAR, passes, (LINEAR,), order, 0.01, 0.0, False, 3, 50, 2, 0, 0, 0) == pytest.approx(
        2.763 + 2.01, rel=1e-15)


def _target_rules(which: str):
    """(decode_tokens, target_time, terms_step_time) as plain Python or as the kernel compiled them."""
    if which == "plain":
        return pricing.decode_tokens, pricing.target_time, pricing.terms_step_time
    import simulator.engine.compiled_kernel as ker

    return ker._decode_tokens, ker._target_time, ker._price


# a structured step model (simulator/costs/step_model.py), every coefficient easy by hand, ROOFLINE_TERMS order:
# const, num_seqs, draft_tokens, decode_kv, prefill_tokens, prefill_seqs, prefill_attn, prefill_step, verify_step,
# flop_tokens
STRUCTURED_C = np.array([1.0, 0.1, 0.01, 0.001, 0.002, 0.05, 1e-5, 0.3, 0.2, 0.0])


def structured(form: str, flop: float = 0.0) -> ProfileTerms:
    c = STRUCTURED_C.copy()
    c[9] = flop
    return ProfileTerms(PROFILE_STRUCTURED, (0.0, 0.0, 0.0, 0.0), NO_ROOFLINE, c, form == "roofline")


@pytest.mark.parametrize("which", PATHS)
def test_target_time_by_hand(which):
    decode_tokens, target_time, step_time = _target_rules(which)
    # 4 decoding sequences verify 3 drafts each: 4 sampled tokens + 12 drafts = 16 query tokens
    assert decode_tokens(4, 3) == 16
    assert decode_tokens(4, 0) == 4  # no drafts: one token each
    assert decode_tokens(0, 5) == 0
    # beside 2 prompt chunks of 50 tokens over 70 KV (1,500 attention pairs): a batch profile prices 6 sequences,
    # 16 + 50 tokens, 100 + 70 KV: 0.17 + 0.66 + 0.6 + 1.0 (the pairs are not its terms)
    assert target_time(LINEAR, 4, 12, 100, 2, 50, 70, 1500) == pytest.approx(2.43, rel=1e-15)
    assert target_time(LINEAR, 4, 0, 100, 2, 50, 70, 1500) == pytest.approx(2.31, rel=1e-15)  # 54 tokens
    assert target_time(LINEAR, 4, 12, 100, 0, 0, 0, 0) == pytest.approx(1.66, rel=1e-15)  # (4, 16, 100)
    # the structured model, linear form: 1 + 6 x 0.1 + 12 x 0.01 + 100 x 0.001 + 50 x 0.002 + 2 x 0.05
    # + 1,500 x 1e-5 + 0.3 (a prefill step) + 0.2 (a verify step)
    assert target_time(structured("linear"), 4, 12, 100, 2, 50, 70, 1500) == pytest.approx(2.535, rel=1e-15)
    # no drafts, no prompt: neither step term
    assert target_time(structured("linear"), 4, 0, 100, 0, 0, 0, 0) == pytest.approx(1.5, rel=1e-15)
    # roofline form: max(read 1 + 0.1, compute 0.05 x (6 + 12 + 50) tokens = 3.4) + the rest 1.435
    assert target_time(structured("roofline", 0.05), 4, 12, 100, 2, 50, 70, 1500) == pytest.approx(4.835, rel=1e-15)
    # compute 0.01 x 68 = 0.68 below the read: 1.1 + 1.435
    assert target_time(structured("roofline", 0.01), 4, 12, 100, 2, 50, 70, 1500) == pytest.approx(2.535, rel=1e-15)
    # a plain batch (a drafter's profile) read as all decoding: (4 seqs, 16 tokens, 100 KV) = 12 drafts
    assert step_time(structured("linear"), 4, 16, 100) == pytest.approx(1.82, rel=1e-15)
    assert step_time(structured("linear"), 4, 3, 100) == pytest.approx(1.5, rel=1e-15)  # fewer tokens than seqs


@pytest.mark.parametrize("which", PATHS)
def test_engine_step_proposer_by_hand(which):
    """vLLM V1's proposer (an `engine_step` cost): one pass of its profile over the step's tokens and KV at the
    sampling requests, when any samples; nothing for another cost kind."""
    if which == "plain":
        rule = pricing.engine_step_time
    else:
        import simulator.engine.compiled_kernel as ker

        rule = ker._engine_step_time
    proposer = DraftTerms(DRAFT_ENGINE_STEP, 0.0, 0.0, False)
    # LINEAR at (5 sampling seqs, 40 tokens, 300 KV): 0.3 + 0.4 + 0.5 + 1.0
    assert rule(proposer, LINEAR, 5, 40, 300) == pytest.approx(2.2, rel=1e-15)
    assert rule(proposer, LINEAR, 0, 40, 300) == 0.0  # nobody samples (prompt chunks only): no proposer pass
    assert rule(DraftTerms(DRAFT_CONSTANT, 0.25, 0.0, False), LINEAR, 5, 40, 300) == 0.0


@pytest.mark.parametrize("rule", ["plain", "compiled"])
def test_draft_group_by_hand(rule):
    """rules/pricing.draft_group: drafter 1's requests among the first five that propose (entries 0 and 4; entry 2
    proposes nothing, 1 and 3 are drafter 0's, the sixth is past n)."""
    import simulator.engine.compiled_kernel as ker

    draft_group = pricing.draft_group if rule == "plain" else ker.draft_group
    member = np.array([1, 0, 1, 0, 1, 1], np.int64)
    proposed = np.array([2, 5, 0, 1, 3, 9], np.int64)
    k = np.array([2, 5, 4, 1, 3, 9], np.int64)
    context = np.array([10, 20, 30, 40, 50, 60], np.int64)
    assert draft_group(1, member, proposed, k, context, 5) == (2, 5, 3, 60)
    assert draft_group(0, member, proposed, k, context, 5) == (2, 6, 5, 60)
    assert draft_group(2, member, proposed, k, context, 5) == (0, 0, 0, 0)


@pytest.mark.parametrize("rule", ["plain", "compiled"])
def test_group_switches_by_hand(rule):
    """rules/pricing.group_switches: a drafter pays the switching cost when one of its proposing members last drafted
    with another drafter; a member new to drafting (-1), one that proposes nothing and one past n do not count."""
    import simulator.engine.compiled_kernel as ker

    switches = pricing.group_switches if rule == "plain" else ker.group_switches
    member = np.array([1, 1, 0, 1], np.int64)
    request = np.array([7, 3, 5, 0], np.int64)  # the members' request numbers: `last` is per request
    last = np.full(8, -1, np.int64)
    proposed = np.array([2, 0, 1, 4], np.int64)
    assert not switches(1, member, proposed, request, 4, last)  # nobody drafted before
    last[3] = 0  # request 3 last drafted with 0, but proposes nothing now
    assert not switches(1, member, proposed, request, 4, last)
    last[7] = 1  # request 7 stays with drafter 1
    assert not switches(1, member, proposed, request, 4, last)
    last[0] = 2  # request 0 (member 3) moves from drafter 2 to 1, but sits past n = 3
    assert not switches(1, member, proposed, request, 3, last)
    assert switches(1, member, proposed, request, 4, last)
    last[5] = 1  # drafter 0's member came from drafter 1
    assert switches(0, member, proposed, request, 4, last)
