"""Verify and draft pricing in a run (draft_cost.DraftCost; the rules latency.linear_step_time,
roofline.roofline_step_time and rules/pricing.py that the kernels run): each row
of the step table lasts what its profile gives for the step's shape, worked out by hand here for linear profiles."""
from __future__ import annotations

import pytest

from simulator.costs.draft_cost import DraftCost
from simulator.costs.latency import LinearProfile, Provenance
from policies.base import Choice, Policy
from tests.simulator.engine.rule_cases import Req, req, run

# target: 1e-3 x kv + 1e-2 x batched tokens + 0.1 x seqs + 1.0; a drafter profile: 2e-3, 3e-2, 0.2, 0.05
TARGET = LinearProfile("t", {"kv_tokens": 1e-3, "batched_tokens": 1e-2, "num_seqs": 0.1, "const": 1.0},
                       provenance=Provenance("test"))
DRAFT = LinearProfile("p", {"kv_tokens": 2e-3, "batched_tokens": 3e-2, "num_seqs": 0.2, "const": 0.05},
                      provenance=Provenance("test"))
OVERHEAD = 0.01


def durations(res, phase: str, device: str = "target") -> list[float]:
    s = res.steps[(res.steps.phase == phase) & (res.steps.device == device)]
    return (s.end - s.start).tolist()


# one request, prompt 4, output 3, k = 2, nothing accepted: verify steps at contexts 5 and 6 (3 tokens each)
# prefill: 4e-3 + 4e-2 + 0.1 + 1 = 1.144; verify: 1.135, 1.136 (+ the overhead on the target's row)
CASES = {
    "constant": (DraftCost("constant", seconds=0.25), [0.25, 0.25], None),
    "fraction_of_verify": (DraftCost("fraction_of_verify", fraction=0.5), [0.5675, 0.568], None),
    # the drafter's profile at (1 seq, 2 proposed tokens, kv 5 / 6); its prompt pass at (1, 4, 4)
    "whole_proposal": (DraftCost("whole_proposal", profile=DRAFT), [0.32, 0.322], 0.378),
    # k passes of one token each, kv growing by one per pass: P(1, 1, 5) + P(1, 1, 6); P(1, 1, 6) + P(1, 1, 7)
    "autoregressive": (DraftCost("autoregressive", profile=DRAFT), [0.582, 0.586], 0.378),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_rule_pricing_verify_and_draft(kind):
    cost, draft, own_prefill = CASES[kind]
    res = run([Req(0.0, 4, 3)], mode="sd", k=2, target=TARGET, costs={"d": cost}, overhead=OVERHEAD)
    assert durations(res, "prefill") == pytest.approx([1.144 + OVERHEAD], rel=1e-12)
    assert durations(res, "verify") == pytest.approx([1.135 + OVERHEAD, 1.136 + OVERHEAD], rel=1e-12)
    assert durations(res, "draft") == pytest.approx(draft, rel=1e-12)
    assert durations(res, "draft_prefill") == ([] if own_prefill is None else pytest.approx([own_prefill], rel=1e-12))
    total = 1.144 + 1.135 + 1.136 + 3 * OVERHEAD + sum(draft) + (own_prefill or 0.0)
    assert res.requests.finish_time.tolist() == pytest.approx([total], rel=1e-12)


def test_rule_pricing_ar_decode():
    # AR: one token per step: 5e-3 + 1e-2 + 0.1 + 1 = 1.115, then 1.116
    res = run([Req(0.0, 4, 3)], target=TARGET, overhead=OVERHEAD)
    assert durations(res, "decode") == pytest.approx([1.115 + OVERHEAD, 1.116 + OVERHEAD], rel=1e-12)


def test_rule_pricing_drafter_charged_once_per_batch():
    # two requests verify together at contexts 5 + 5: a constant cost once per step, a whole-proposal cost once on
    # the batch's shape (2 seqs, 4 proposed, kv 10): 0.02 + 0.12 + 0.4 + 0.05 = 0.59; the target's verify at
    # (2 seqs, 6 tokens, kv 10): 0.01 + 0.06 + 0.2 + 1 = 1.27
    for cost, draft in ((DraftCost("constant", seconds=0.25), 0.25), (DraftCost("whole_proposal", profile=DRAFT), 0.59)):
        res = run([Req(0.0, 4, 2), Req(0.0, 4, 2)], mode="sd", k=2, target=TARGET, costs={"d": cost})
        assert durations(res, "draft") == pytest.approx([draft], rel=1e-12)
        assert durations(res, "verify") == pytest.approx([1.27], rel=1e-12)


def test_rule_pricing_roofline_shape():
    # a roofline target: each target row lasts the profile's own step_time for the row's (seqs, tokens, kv)
    from tests.simulator.engine.test_compiled_run import roofline

    prof = roofline("llama3.1-8b", "h100-80gb", 1, 0.5, 0.8, 0.0)
    res = run([Req(0.0, 40, 5), Req(0.2, 300, 4)], mode="sd", k=3, target=prof, overhead=OVERHEAD)
    rows = res.steps[res.steps.phase.isin(["prefill", "verify", "mixed"])]
    assert len(rows) >= 4
    for r in rows.itertuples():
        assert r.end - r.start == pytest.approx(prof.step_time(r.num_seqs, r.batched_tokens, r.kv_tokens) + OVERHEAD,
                                                rel=1e-9)


class ByParity(Policy):
    """Drafts k = 1 with "d" at even output positions and "g" at odd ones, or always with `only`."""

    name = "by-parity"
    learns = False

    def __init__(self, only=None):
        self.only = only

    def choose(self, view):
        return Choice(self.only or ("d" if view.position % 2 == 0 else "g"), 1)

    def drafters_used(self):
        return (self.only,) if self.only else ("d", "g")

    def max_draft_tokens(self):
        return 1


@pytest.mark.parametrize("only, finish", [(None, 8.0), ("g", 6.0)])
def test_rule_switching_cost_when_a_request_changes_drafter(only, finish):
    # one request, prompt 4, output 6, nothing accepted, every target step 1 s, free drafts, a 0.5 s switching cost:
    # the prefill (1 s) makes token 0 and the first decode starts at position 1. Alternating, it drafts with g, d, g,
    # d, g at positions 1..5: the first draft has no drafter before it, the 4 others each change it: 5 + 4 x 0.5 s
    # after the prefill, finishing at 8; always with g, it never pays: 6
    res = run([Req(0.0, 4, 6)], mode="sd", policy=ByParity(only), drafters=("d", "g"),
              switch_cost_s=0.5)
    assert req(res, "finish_time") == [finish]
    assert durations(res, "draft") == ([0.5] * 4 if only is None else [])
