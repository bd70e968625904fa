"""Pricing rules: a drafter's drafting phase and prompt pass by its cost kind, and how a sequential step's parts add up.

Plain Python over numbers and typed records. Called with profile objects (`profile_price` asks a profile for its
`step_time`, as DraftCost does in Python), they price in Python; the kernels compile them and price their
ProfileTerms records there (compiled_kernel overloads `profile_price` with `terms_step_time`): the same lines.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from simulator.costs.latency import linear_step_time, table_step_time
from simulator.costs.roofline import RooflineTerms, roofline_step_time, weight_bytes_read
from simulator.costs.step_model import ROOFLINE_TERMS, shape_features, structured_batch_time, structured_time

# draft cost kinds (draft_cost.DRAFT_COST_KINDS) as the rules read them
DRAFT_NONE, DRAFT_CONSTANT, DRAFT_FRACTION, DRAFT_WHOLE, DRAFT_AUTOREGRESSIVE, DRAFT_ENGINE_STEP = range(6)
DRAFT_KIND_CODES = {"constant": DRAFT_CONSTANT, "fraction_of_verify": DRAFT_FRACTION, "whole_proposal": DRAFT_WHOLE,
                    "autoregressive": DRAFT_AUTOREGRESSIVE, "engine_step": DRAFT_ENGINE_STEP}
# latency profile kinds a ProfileTerms record holds
PROFILE_LINEAR, PROFILE_ROOFLINE, PROFILE_STRUCTURED, PROFILE_TABLE = 0, 1, 2, 3
NO_STRUCTURED = np.zeros(len(ROOFLINE_TERMS))  # a ProfileTerms record that is not structured


class DraftTerms(NamedTuple):
    """A drafter's cost as the rules read it: its kind code, constant seconds, fraction of verify, whether it
    runs its own prompt pass (it has a profile and is not priced per engine step), and the host-side seconds of
    each drafting phase that proposes anything (`host_s`: the proposer's CPU work beside its GPU forwards)."""

    kind: int
    seconds: float
    fraction: float
    prompt_pass: bool
    host_s: float = 0.0


class ProfileTerms(NamedTuple):
    """A linear, roofline, structured or table latency profile as numbers (the compiled engine's profile record):
    the linear terms (a, b, s, d), the roofline terms, the structured step model's coefficients (ROOFLINE_TERMS
    order) and its form; a table's TableProfile.data as the one row of `structured` (holds_rows: a field of its
    own, or a branch the compiled price keeps for every kind, slows every step)."""

    kind: int
    linear: tuple[float, float, float, float]
    roofline: RooflineTerms
    structured: np.ndarray = NO_STRUCTURED
    structured_roofline: bool = False

    def step_time(self, num_seqs, batched_tokens, kv_tokens):
        return terms_step_time(self, num_seqs, batched_tokens, kv_tokens)

    @property
    def by_shape(self):
        return self.kind == PROFILE_STRUCTURED

    def shape_seconds(self, decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_attn):
        return terms_shape_time(self, decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens,
                                prefill_attn)


def terms_step_time(profile, num_seqs, batched_tokens, kv_tokens):
    """A ProfileTerms record's step time: the linear rule, the table rule, the structured model's reading of a
    plain batch, or the roofline rule at its weight read per GPU for this step (RooflineProfile.step_time's)."""
    if profile.kind == PROFILE_LINEAR:
        a, b, s, d = profile.linear
        return linear_step_time(a, b, s, d, num_seqs, batched_tokens, kv_tokens)
    if profile.kind == PROFILE_TABLE and holds_rows(profile.structured):
        return table_step_time(record_row(profile.structured), num_seqs, batched_tokens, kv_tokens)
    if profile.kind == PROFILE_STRUCTURED:
        return structured_batch_time(record_row(profile.structured), profile.structured_roofline, num_seqs,
                                     batched_tokens, kv_tokens)
    w = weight_bytes_read(profile.roofline, batched_tokens) / profile.roofline.tp
    return roofline_step_time(profile.roofline, w, num_seqs, batched_tokens, kv_tokens)


def holds_rows(structured):
    """Whether a record's `structured` array is a row (2D): a table's always is (compiled_run.profile_terms), and in a
    run with a table so is every other profile record (CompiledRun builds them so); compiled, this is known from the
    array's type, so runs with no table compile no table code."""
    return structured.ndim == 2


def record_row(structured):
    """A record's `structured` numbers: the array, or its one row (holds_rows)."""
    return structured[0] if structured.ndim == 2 else structured


def profile_price(profile, num_seqs, batched_tokens, kv_tokens):
    """Seconds of one forward step of `profile` (any latency profile; compiled: a ProfileTerms record)."""
    return profile.step_time(num_seqs, batched_tokens, kv_tokens)


def prices_shape(profile):
    """Whether `profile` prices a step by its whole shape (simulator/costs/step_model.py's structured model)."""
    return getattr(profile, "by_shape", False)


def shape_price(profile, decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_attn):
    """A shape-priced profile's seconds for a step of this shape (compiled: a structured ProfileTerms record)."""
    return profile.shape_seconds(decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_attn)


def terms_shape_time(profile, decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_attn):
    """A structured ProfileTerms record's seconds for a step of this shape."""
    return structured_time(record_row(profile.structured), profile.structured_roofline,
                           shape_features(decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens,
                                          prefill_attn))


def target_time(profile, decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_kv,
                prefill_attn):
    """The target's seconds for a step of `decode_seqs` decoding sequences verifying `draft_tokens` drafts over
    `decode_kv` KV beside `prefill_seqs` prompt chunks of `prefill_tokens` tokens over `prefill_kv` KV (cached +
    chunk; `prefill_attn`: the chunks' chunk x (cached + chunk) token pairs): a structured profile reads the whole
    shape, a batch profile its sequences, query tokens and KV. The one target price of simulated steps and step
    estimates, on both paths."""
    if prices_shape(profile):
        return shape_price(profile, decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_attn)
    return profile_price(profile, decode_seqs + prefill_seqs, decode_seqs + draft_tokens + prefill_tokens,
                         decode_kv + prefill_kv)


def decode_tokens(num_seqs, k):
    """Query tokens of `num_seqs` decoding sequences that verify k drafts each (the sampled token and the drafts):
    what they take of the step budget before any prompt chunk."""
    return num_seqs * (k + 1)


def draft_group(group, member_group, proposed, k, context, n):
    """The sub-batch one drafter is charged for: of the first `n` requests, those of `group` (member_group[j] ==
    group) that propose. Returns (sequences, proposed tokens, largest k, context tokens), draft_time's shape."""
    num_seqs = 0
    proposed_tokens = 0
    k_max = 0
    kv_tokens = 0
    for j in range(n):
        if member_group[j] == group and proposed[j] > 0:
            num_seqs += 1
            proposed_tokens += proposed[j]
            kv_tokens += context[j]
            if k[j] > k_max:
                k_max = k[j]
    return num_seqs, proposed_tokens, k_max, kv_tokens


def group_switches(group, member_group, proposed, request, n, last):
    """Whether the drafter `group` pays the switching cost this step: of the first `n` requests, one of its members
    that proposes (draft_group's sub-batch) last drafted with another drafter (last[request[j]]: its drafter in the
    same numbering, or -1 before its first draft). Charged once per drafter and step."""
    for j in range(n):
        if member_group[j] == group and proposed[j] > 0:
            before = last[request[j]]
            if before >= 0 and before != group:
                return True
    return False


def draft_time(cost, profile, num_seqs, proposed_tokens, k_max, kv_tokens, verify_time):
    """One drafting phase for `num_seqs` sequences proposing `proposed_tokens` (up to k_max each): constant seconds,
    a fraction of the verify time, one profile pass over the whole proposal, or k_max one-token passes with the KV
    growing by a token per sequence each; plus the phase's host seconds (`host_s`); nothing proposed (or an
    engine-step proposer) costs nothing here."""
    if num_seqs <= 0 or proposed_tokens <= 0:
        return 0.0
    if cost.kind == DRAFT_CONSTANT:
        return cost.seconds + cost.host_s
    if cost.kind == DRAFT_FRACTION:
        return cost.fraction * verify_time + cost.host_s
    if cost.kind == DRAFT_WHOLE:
        return profile_price(profile, num_seqs, proposed_tokens, kv_tokens) + cost.host_s
    total = 0.0
    if cost.kind == DRAFT_AUTOREGRESSIVE:
        for i in range(k_max):
            total += profile_price(profile, num_seqs, num_seqs, kv_tokens + i * num_seqs)
        total += cost.host_s
    return total


def engine_step_time(cost, profile, sampling_seqs, step_tokens, kv_tokens):
    """vLLM V1's proposer (an `engine_step` cost): its seconds in one engine step, one pass of its profile over the
    step's tokens and KV when any request samples a token (sampling_seqs); 0 for other kinds or no sampling."""
    if cost.kind != DRAFT_ENGINE_STEP or sampling_seqs <= 0:
        return 0.0
    return profile_price(profile, sampling_seqs, step_tokens, kv_tokens)


def prefill_time(cost, profile, num_seqs, prompt_tokens, kv_tokens):
    """A drafter's own pass over `prompt_tokens` prompt tokens of `num_seqs` sequences (its profile at that shape),
    or 0 when it runs none."""
    if num_seqs <= 0 or prompt_tokens <= 0 or not cost.prompt_pass:
        return 0.0
    return profile_price(profile, num_seqs, prompt_tokens, kv_tokens)


def drafters_prefill_time(costs, profiles, order, num_seqs, prompt_tokens, kv_tokens):
    """The drafters' prompt passes of one step, drafter `order[j]` (costs[g], profiles[g]) in turn, summed from 0."""
    total = 0.0
    for j in range(len(order)):
        g = order[j]
        total += prefill_time(costs[g], profiles[g], num_seqs, prompt_tokens, kv_tokens)
    return total


def sd_step_time(draft_s, verify_s, overhead_s, prefill_s):
    """A sequential step's seconds: drafting, then the target's forward and its overhead, then the drafters' prompt
    pass."""
    return draft_s + verify_s + overhead_s + prefill_s


def step_estimate(verify_s, cost, profile, pass_costs, pass_profiles, pass_order, overhead_s, proposer_s, pipelined,
                  num_seqs, kv_tokens, k, prefill_seqs, prefill_tokens, prefill_kv):
    """A policy's estimate of a step in which `num_seqs` decoding sequences over `kv_tokens` KV verify k drafts each
    (drafter `cost`, `profile`) beside `prefill_seqs` prompt chunks, the target taking `verify_s`: the drafting
    (+ `proposer_s`, vLLM V1 proposers) and the drafters' prompt passes, added up as a sequential step or, PSD
    (`pipelined`), the target's side beside the draft device's."""
    draft = 0.0
    if k > 0:
        draft = draft_time(cost, profile, num_seqs, num_seqs * k, k, kv_tokens, verify_s)
    draft = draft + proposer_s
    own = 0.0
    if prefill_seqs > 0:
        own = drafters_prefill_time(pass_costs, pass_profiles, pass_order, prefill_seqs, prefill_tokens, prefill_kv)
    if pipelined:
        target_side = verify_s + overhead_s
        draft_side = draft + own
        return draft_side if draft_side > target_side else target_side
    return sd_step_time(draft, verify_s, overhead_s, own)
