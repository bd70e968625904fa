"""Analytic upper bound on a candidate's service rate from its target step-time model: where `plan`'s rate search
starts at most (experiments/plan/search.py), never an answer.

Rule: a replica runs at most B = max_num_seqs sequences per target step, each step emits at most k + 1 tokens per
sequence (k = the policy's largest draft, 0 for AR), and every step takes at least the target's verify time of a full
batch with no KV context, t_min = step_time(B, B (k + 1), 0) (drafting, prefill and context only add time; per
sequence a step is cheapest full). A request needs at least (L - 1) / (k + 1) steps after its prefill (the prefill
emits token 1), so replicas x B (k + 1) / (t_min x mean(L - 1)) req/s bounds the service rate from above. It holds
for step models whose time per sequence falls with the batch and grows with tokens and context (linear fits with
non-negative coefficients, the roofline); for any other profile it is guidance only, which is all the search
takes it for (it doubles past a bound that a run beat, like any passing rate).
"""
from __future__ import annotations

import math
from typing import Any

SERVICE_BOUND_RULE = ("replicas x max_num_seqs x (k + 1) / (step_time(max_num_seqs, max_num_seqs (k + 1), 0) x "
                      "mean(output_len - 1)): no step is shorter than a full batch's verify with no context")


def service_rate_bound(profile: Any, max_num_seqs: int, max_draft_tokens: int, mean_decode_tokens: float,
                       replicas: int = 1) -> float | None:
    """The rule above in req/s; None when it gives no finite positive figure (no decode tokens, a zero step)."""
    b, tokens = int(max_num_seqs), int(max_draft_tokens) + 1
    if b < 1 or not mean_decode_tokens > 0:
        return None
    t_min = float(profile.step_time(b, b * tokens, 0))
    if not (t_min > 0 and math.isfinite(t_min)):
        return None
    return replicas * b * tokens / (t_min * float(mean_decode_tokens))


TPOT_FLOOR_RULE = ("TPOT floor: after its first token a request emits at most k + 1 tokens per target step (k = the "
                   "policy's largest draft, 0 for AR), the target's steps run one after another, and none is shorter "
                   "than step_time(1, 1, 0) (a linear fit with non-negative coefficients, or the roofline: both grow "
                   "with sequences, tokens and context), so every request with two or more output tokens has TPOT >= "
                   "step_time(1, 1, 0) / (k + 1); when that exceeds the SLO's TPOT bound and every run's workload "
                   "(each seed's draw) has no request of one output token, no request attains the SLO at any rate: "
                   "the candidate's max rate is 0 without a simulation")


def tpot_floor(profile: Any, max_draft_tokens: int) -> float | None:
    """The TPOT_FLOOR_RULE lower bound on any multi-token request's TPOT, in seconds; None for a profile the rule
    does not cover (not a linear fit, whose coefficients are non-negative, or a roofline) or a non-finite figure."""
    from simulator.costs.latency import LinearProfile
    from simulator.costs.roofline import RooflineProfile

    if type(profile) not in (LinearProfile, RooflineProfile):
        return None
    t = float(profile.step_time(1, 1, 0))
    return t / (int(max_draft_tokens) + 1) if t > 0 and math.isfinite(t) else None
