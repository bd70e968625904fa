"""Adaptive-k's step estimate with a prompt chunk waiting (compiled_kernel._step_times: the estimate over the prompt
chunk a mixed step would add), against hand-worked choices: the chunk each k would leave room for under
the token budget, and the drafter's own pass over that chunk.

The case: request r0 (4-token prompt) prefills alone in step 0; r1 (100-token prompt) arrives during it, so in step 1
r0 decodes with k drafts and r1 takes a chunk of what the budget of 10 leaves: 10 - (1 + k) tokens. Adaptive-k
(k_max 3, prior 0.6 weight 2: expected tokens 1, 1.6, 1.96, 2.176 for k = 0..3) prices every k with that chunk.
"""
from __future__ import annotations

from policies.adaptive_k import AdaptiveKPolicy
from simulator.costs.draft_cost import DraftCost
from tests.simulator.engine.engine_fixtures import linear
from tests.simulator.engine.rule_cases import Req, col, run

REQS = [Req(0.0, 4, 12), Req(0.001, 100, 4)]


def step_one(target, cost) -> tuple[int, int]:
    """(drafts r0 proposes in step 1, r1's prompt tokens in it)."""
    res = run(REQS, mode="sd", policy=AdaptiveKPolicy("d", k_max=3), costs={"d": cost}, target=target,
              budget=10, chunked=True)
    return col(res, "proposed_tokens")[1], col(res, "prefill_tokens")[1]


def test_rule_adaptive_k_prices_the_drafters_pass_over_the_previewed_chunk():
    # target 0.1 s per batched token + 1.0: every k batches 10 tokens (1 + k + 9 - k) -> 2.0 s. Drafting 2.5 s; the
    # drafter's own pass 0.1 s per chunk token: 0.9, 0.8, 0.7, 0.6. Times 2.9, 5.3, 5.2, 5.1 -> per second 0.345,
    # 0.302, 0.377, 0.427: k = 3 (without the pass: 2.0, 4.5, 4.5, 4.5 -> 0.5, 0.356, 0.436, 0.484: k = 0)
    cost = DraftCost("constant", seconds=2.5, profile=linear(0.0, 0.1, 0.0))
    assert step_one(linear(0.0, 0.1, 1.0), cost) == (3, 10 - (1 + 3))


def test_rule_adaptive_k_previews_the_chunk_after_the_decodes_k_plus_one_tokens():
    # target 0.5 s per batched token + 1.0: 10 tokens at every k -> 6.0 s; drafting 7.35 s, no pass of its own.
    # Times 6.0, 13.35, 13.35, 13.35 -> per second 0.1667, 0.120, 0.147, 0.1630: k = 0 (a chunk one token larger,
    # as if the decodes took k tokens: 6.5, 13.85 -> 0.1538 against 0.1571: k = 3)
    cost = DraftCost("constant", seconds=7.35)
    assert step_one(linear(0.0, 0.5, 1.0), cost) == (0, 10 - 1)
