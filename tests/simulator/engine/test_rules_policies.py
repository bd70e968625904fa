"""The built-in policies' choices as the engine applies them (the rules of policies/*.py as the kernel compiles them:
adaptive_ks, bandit_choices, the combine rules; the kernel's _step_times and its fixed branch), against hand-worked
choices. The fixed policy's k is in test_rules_replay.py. Every target step costs 1.0 s."""
from __future__ import annotations

from policies.adaptive_k import AdaptiveKPolicy
from policies.combine import CombineMatchPolicy
from policies.ucb import UCBPolicy
from simulator.costs.draft_cost import DraftCost
from tests.simulator.engine.engine_fixtures import linear
from tests.simulator.engine.rule_cases import Req, col, run

ACCEPT_AT_1 = [1, 3] + [1] * 10  # position 1 accepts 2 drafts
REJECT_AT_1 = [1] * 12


def adaptive(acc: list[int]):
    # drafting costs 0.2 s per drafted token (autoregressive, a constant profile): step times 1.0, 1.2, 1.4, 1.6
    # for k = 0..3. Prior 0.6 (weight 2): expected tokens 1, 1.6, 1.96, 2.176 -> per second 1, 1.33, 1.40, 1.36:
    # k = 2 first.
    cost = DraftCost("autoregressive", profile=linear(0.0, 0.0, 0.2))
    return run([Req(0.0, 4, 12, acc={"d": acc})], mode="sd", policy=AdaptiveKPolicy("d", k_max=3),
               costs={"d": cost})


def test_rule_adaptive_k_raises_k_after_acceptance():
    # both drafts accepted: successes 2, failures 0 -> estimate (2 + 1.2) / 4 = 0.8: expected 1, 1.8, 2.44, 2.952
    # per second 1, 1.5, 1.74, 1.85 -> k = 3
    assert col(adaptive(ACCEPT_AT_1), "proposed_tokens")[1:3] == [2, 3]


def test_rule_adaptive_k_lowers_k_after_rejection():
    # nothing accepted: one failure -> estimate 1.2 / 3 = 0.4: expected 1, 1.4, 1.56, 1.624 per second 1, 1.17,
    # 1.11, 1.02 -> k = 1
    assert col(adaptive(REJECT_AT_1), "proposed_tokens")[1:3] == [2, 1]


def test_rule_adaptive_k_is_capped_by_the_match_length():
    # adaptive() on an n-gram drafter whose match at position 1 is 1 token: k = 2 first (above) is capped to k = 1,
    # one 0.2 s drafting pass (k = 2 would propose the same 1 matched token in two passes, 0.4 s); from position 2
    # the match is 3 tokens and nothing caps k
    cost = DraftCost("autoregressive", profile=linear(0.0, 0.0, 0.2))
    res = run([Req(0.0, 4, 12, acc={"d": ACCEPT_AT_1}, proposal={"d": [3, 1] + [3] * 10})], mode="sd",
              policy=AdaptiveKPolicy("d", k_max=3), costs={"d": cost})
    draft = res.steps[res.steps.phase == "draft"]
    assert col(res, "proposed_tokens")[1] == 1
    assert abs(float(draft.end.iloc[0] - draft.start.iloc[0]) - 0.2) < 1e-12


def test_rule_adaptive_k_no_draft_when_drafting_too_dear():
    # 0.5 s per drafted token: per second 1, 1.6/1.5, 1.96/2, 2.176/2.5 = 1, 1.07, 0.98, 0.87 -> k = 1; at 0.7 s:
    # 1, 0.94, 0.82, 0.70 -> k = 0 (a plain decode, nothing proposed)
    for per_token, k in ((0.5, 1), (0.7, 0)):
        cost = DraftCost("autoregressive", profile=linear(0.0, 0.0, per_token))
        res = run([Req(0.0, 4, 3)], mode="sd", policy=AdaptiveKPolicy("d", k_max=3), costs={"d": cost})
        assert col(res, "proposed_tokens")[1] == k


def test_rule_combine_match():
    # min_match 2, k_ngram 4, k_eagle 2. Position 1: match 2 -> n-gram, min(4, 2) = 2 drafts (rejected);
    # position 2: match 1 -> EAGLE, 2 drafts, both accepted (acc_len 3) -> 5 tokens; position 5: match 5 -> n-gram,
    # min(4, 5) = 4 drafts, all accepted, cut to the 3 left
    ngram_acc = [1, 1, 1, 1, 1, 9, 1, 1]
    eagle_acc = [1, 1, 3, 1, 1, 1, 1, 1]
    match = [0, 2, 1, 0, 0, 5, 0, 0]
    r = Req(0.0, 4, 8, acc={"ngram": ngram_acc, "eagle": eagle_acc}, proposal={"ngram": match})
    res = run([r], mode="sd", drafters=("eagle", "ngram"),
              policy=CombineMatchPolicy("ngram", "eagle", k_ngram=4, k_eagle=2, min_match=2))
    assert col(res, "drafters") == ["", "ngram", "eagle", "ngram"]
    assert col(res, "proposed_tokens") == [0, 2, 2, 4]
    assert col(res, "accepted_tokens") == [0, 0, 2, 4]
    assert col(res, "emitted_tokens") == [1, 1, 3, 3]


def ucb(beta: float):
    # k = 2, BE reward accepted / proposed. Step 1: arm a (first unplayed), position 1 rejects: a = 0/1. Step 2:
    # arm b (unplayed), position 2 accepts 1 of 2: b = 0.5/1. Step 3 (t = 2, equal bonus): b, position 4 rejects:
    # b = 0.5/2. Step 4 (t = 3): a's index 0 + beta sqrt(2 ln 3) = 1.482 beta, b's 0.25 + beta sqrt(ln 3) =
    # 0.25 + 1.048 beta: a for beta 1 (1.48 > 1.30), b for beta 0.1 (0.148 < 0.355) and for beta 0.5 (0.741 <
    # 0.774; had b's first reward been 1/3 instead of 1/2 it would be a: 0.691)
    acc_a = [1] * 10
    acc_b = [1, 1, 2, 1, 1, 1, 1, 1, 1, 1]
    r = Req(0.0, 4, 10, acc={"a": acc_a, "b": acc_b})
    return run([r], mode="sd", drafters=("a", "b"), policy=UCBPolicy(["a", "b"], k=2, beta=beta))


def test_rule_ucb_explores_then_exploits():
    assert col(ucb(1.0), "drafters")[1:5] == ["a", "b", "b", "a"]
    assert col(ucb(0.1), "drafters")[1:5] == ["a", "b", "b", "b"]
    assert col(ucb(0.5), "drafters")[1:5] == ["a", "b", "b", "b"]
