"""Oracles: oracle k never proposes a rejected token and needs the fewest rounds on teacher-forced traces;
the combine oracle is at least as good as each single oracle; best fixed in hindsight is the best fixed."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from oracle.best_drafter import OracleBestDrafterPolicy
from oracle.combine import OracleCombinePolicy
from oracle.hindsight import BestFixedInHindsightPolicy, greedy_rounds
from oracle.oracle_k import OracleKPolicy
from oracle.regret import run_rounds
from policies.base import FixedPolicy, RequestView
from policies.registry import make_policy
from traces.bundle import DrafterTrace, RequestTrace
from traces.pool import match_runs


def teacher_forced(rng, n, rates):
    """A request whose drafters' acc_len come from per-position greedy matches (teacher-forced drafting)."""
    drafters = {}
    for name, rate in rates.items():
        match = rng.random(n) < rate
        drafters[name] = DrafterTrace((1 + match_runs(match)).astype(np.int32))
    return RequestTrace("r", 10, n, drafters)


def rounds_of(policy, req, drafters, kcap=64):
    policy.bind_ground_truth({req.id: req}) if policy.reads_ground_truth else None
    return run_rounds(policy, req, drafters, kcap, req.output_len, np.random.default_rng(0), sampled=False)


def test_oracle_k_never_proposes_a_rejected_token():
    req = teacher_forced(np.random.default_rng(1), 400, {"e": 0.7})
    res = rounds_of(OracleKPolicy("e"), req, ["e"])
    assert (res.accepted == res.proposed).all()
    assert (res.proposed == req.drafters["e"].acc_len[res.positions] - 1).all()


def test_oracle_k_respects_proposal_len_and_k_max():
    t = DrafterTrace(np.array([5, 4, 3, 2, 1, 4, 3, 2], np.int32),
                     proposal_len=np.array([2, 9, 9, 9, 0, 9, 9, 9], np.int32))
    pol = OracleKPolicy("n", k_max=2)
    pol.bind_ground_truth({"r": RequestTrace("r", 1, 8, {"n": t})})
    # position 6 (tokens 0..5 exist): 2 would be accepted but only 8 - 1 - 6 = 1 draft fits in the output
    assert [pol.choose(RequestView("r", p, 1)).k for p in range(8)] == [2, 2, 2, 1, 0, 2, 1, 0]
    assert pol.choose(RequestView("r", 4, 1)).drafter is None


def test_reference_combine_takes_the_longer_reach_and_the_ngram_on_a_tie_by_hand():
    """oracle-combine, reference costs: per position the drafter whose all-accepted drafts reach further (acc_len -
    1, capped by the n-gram's match length and the output left), the n-gram on a tie, none when neither reaches a
    token; its table of choices (position_choices) is what choose reads and the compiled engine takes."""
    ngram = DrafterTrace(np.array([3, 3, 1, 5, 2, 4], np.int32), proposal_len=np.array([9, 1, 9, 9, 1, 9], np.int32))
    eagle = DrafterTrace(np.array([2, 3, 1, 2, 3, 4], np.int32))
    pol = OracleCombinePolicy("n", "e", costs="reference")
    pol.bind_ground_truth({"r": RequestTrace("r", 1, 6, {"n": ngram, "e": eagle})})
    # reach: n-gram min(acc - 1, match, left) = [2, 1, 0, 2, 1, 0]; EAGLE min(acc - 1, left) = [1, 2, 0, 1, 1, 0]
    # (left = 6 - 1 - p: 5, 4, 3, 2, 1, 0)
    d, k = pol.position_choices("r")
    assert d.tolist() == [0, 1, -1, 0, 0, -1] and k.tolist() == [2, 2, 0, 2, 1, 0]
    got = [pol.choose(RequestView("r", p, 1)) for p in range(6)]
    assert [(c.drafter, c.k) for c in got] == [("n", 2), ("e", 2), (None, 0), ("n", 2), ("n", 1), (None, 0)]


def test_oracle_refuses_to_run_unbound():
    with pytest.raises(RuntimeError, match="bind_ground_truth"):
        OracleKPolicy("e").choose(RequestView("r", 0, 1))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(5, 200), r1=st.floats(0, 0.95), r2=st.floats(0, 0.95),
       kcap=st.integers(1, 8))
def test_oracle_needs_no_more_rounds_than_any_policy(seed, n, r1, r2, kcap):
    rng = np.random.default_rng(seed)
    req = teacher_forced(rng, n, {"a": r1, "b": r2})
    oracle = rounds_of(OracleBestDrafterPolicy(["a", "b"], k_max=kcap), req, ["a", "b"], kcap).rounds
    others = [FixedPolicy("a", kcap), FixedPolicy("b", kcap), FixedPolicy("a", 1),
              make_policy({"name": "ucb", "drafters": ["a", "b"], "k": kcap, "seed": seed}),
              make_policy({"name": "random-drafter", "drafters": ["a", "b"], "k": kcap, "seed": seed})]
    for pol in others:
        assert oracle <= rounds_of(pol, req, ["a", "b"], kcap).rounds
    for d in ("a", "b"):
        assert oracle <= rounds_of(OracleKPolicy(d, k_max=kcap), req, ["a", "b"], kcap).rounds


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(5, 200), r1=st.floats(0, 0.95), r2=st.floats(0, 0.95))
def test_combine_oracle_is_at_least_each_single_oracle(seed, n, r1, r2):
    req = teacher_forced(np.random.default_rng(seed), n, {"ngram": r1, "eagle3": r2})
    both = rounds_of(OracleCombinePolicy(), req, ["ngram", "eagle3"]).rounds
    assert both <= rounds_of(OracleKPolicy("ngram"), req, ["ngram", "eagle3"]).rounds
    assert both <= rounds_of(OracleKPolicy("eagle3"), req, ["ngram", "eagle3"]).rounds


def test_honest_combine_charges_costs_and_switching():
    t_n = DrafterTrace(np.full(10, 3, np.int32))
    t_e = DrafterTrace(np.full(10, 4, np.int32))
    req = RequestTrace("r", 1, 10, {"ngram": t_n, "eagle3": t_e})
    ref = OracleCombinePolicy(costs="reference")
    honest = OracleCombinePolicy(costs="honest")
    for p in (ref, honest):
        p.bind_ground_truth({"r": req})
    est = lambda d, k: 1.0 if d in (None, "ngram") else 2.0  # noqa: E731  eagle doubles the step
    view = RequestView("r", 0, 1, step_time_estimate=est)
    assert ref.choose(view).drafter == "eagle3"  # 4 tokens > 3 tokens, cost ignored
    assert honest.choose(view).drafter == "ngram"  # 3 / 1.0 > 4 / 2.0
    cheap = lambda d, k: 1.0 if d in (None, "ngram") else 1.2  # noqa: E731
    sw = OracleBestDrafterPolicy(["ngram", "eagle3"], switch_cost_s=1.0)
    sw.bind_ground_truth({"r": req})
    assert sw.choose(RequestView("r", 0, 1, step_time_estimate=est)).drafter == "ngram"
    # eagle would win at 4 / 1.2 > 3 / 1.0, but switching costs 1.0 more: 4 / 2.2 < 3
    assert sw.choose(RequestView("r", 1, 1, step_time_estimate=cheap)).drafter == "ngram"
    fresh = OracleBestDrafterPolicy(["ngram", "eagle3"], switch_cost_s=1.0)
    fresh.bind_ground_truth({"r": req})
    assert fresh.choose(RequestView("r", 1, 1, step_time_estimate=cheap)).drafter == "eagle3"


def test_best_fixed_in_hindsight_is_the_fixed_drafter_with_fewest_rounds():
    rng = np.random.default_rng(4)
    for _ in range(10):
        req = teacher_forced(rng, 300, {"a": rng.random(), "b": rng.random(), "c": rng.random()})
        pol = BestFixedInHindsightPolicy(["a", "b", "c"], k=3)
        pol.bind_ground_truth({"r": req})
        chosen = pol.choose(RequestView("r", 0, 1)).drafter
        rounds = {d: greedy_rounds(req.drafters[d], 3) for d in "abc"}
        assert rounds[chosen] == min(rounds.values())
        assert rounds_of(FixedPolicy(chosen, 3), req, ["a", "b", "c"], 3).rounds == rounds[chosen]
