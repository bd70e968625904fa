"""Exact oracles: the DP against brute force over every action sequence (built on the replay rule, not on the
DP's own reachability), never worse than the greedy oracle or any fixed-k walk, and followed in the engine."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from oracle.combine import OracleCombinePolicy
from oracle.exact import StepCosts, exact_plan, greedy_plan, min_steps_plan, plan_time
from oracle.oracle_k import OracleKPolicy
from oracle.regret import run_rounds
from policies.base import Choice, RequestView
from traces.acceptance import replay_step
from traces.bundle import DrafterTrace, RequestTrace
from traces.walk import walk

DRAFTERS = ("a", "b")


def request(acc: dict[str, list[int]], prop: dict[str, list[int]] | None = None) -> RequestTrace:
    n = len(next(iter(acc.values())))
    return RequestTrace("r", 4, n, {d: DrafterTrace(np.array(a, np.int32),
                                                    proposal_len=None if not prop or d not in prop
                                                    else np.array(prop[d], np.int32))
                                    for d, a in acc.items()})


def brute_force(req: RequestTrace, costs: StepCosts) -> float:
    """Least cost over every sequence of (drafter, k <= k_max) steps, each replayed with traces.acceptance."""
    n = req.output_len

    @lru_cache(maxsize=None)
    def best(p: int) -> float:
        if p >= n:
            return 0.0
        out = costs.plain + best(p + 1)
        for d, c in costs.drafted.items():
            t = req.drafters[d]
            for k in range(1, costs.k_max(d) + 1):
                s = replay_step(int(t.acc_len[p]), k, None if t.proposal_len is None else int(t.proposal_len[p]), p, n)
                step = costs.plain if s.proposed == 0 else float(c[s.proposed])
                out = min(out, step + best(p + s.emitted))
        return out

    return best(1)


def traces_strategy(max_n: int = 9):
    n = st.integers(1, max_n)
    return n.flatmap(lambda k: st.tuples(
        st.lists(st.integers(1, k + 1), min_size=k, max_size=k),
        st.lists(st.integers(1, k + 1), min_size=k, max_size=k),
        st.lists(st.integers(0, 4), min_size=k, max_size=k)))


def cost_strategy():
    inc = st.lists(st.floats(0.0, 2.0), min_size=1, max_size=4)
    return st.tuples(st.floats(0.2, 3.0), inc, inc)


def _costs(plain, inc_a, inc_b):
    a = np.concatenate([[np.nan], plain + np.cumsum(np.asarray(inc_a) + 1e-3)])
    b = np.concatenate([[np.nan], plain + np.cumsum(np.asarray(inc_b) + 1e-3)])
    return StepCosts(plain, {"a": a, "b": b})


@settings(max_examples=150, deadline=None)
@given(traces_strategy(), cost_strategy())
def test_exact_min_time_equals_brute_force(tr, c):
    acc_a, acc_b, prop_b = tr
    req = request({"a": acc_a, "b": acc_b}, {"b": prop_b})
    costs = _costs(*c)
    plan = exact_plan(req, costs)
    assert plan.cost == pytest.approx(brute_force(req, costs))
    assert plan_time(plan, costs) == pytest.approx(plan.cost)  # the path realises the cost-to-go


@settings(max_examples=150, deadline=None)
@given(traces_strategy(), st.integers(1, 4), st.integers(1, 4))
def test_exact_min_steps_equals_brute_force_with_k_limits(tr, ka, kb):
    acc_a, acc_b, _ = tr
    req = request({"a": acc_a, "b": acc_b})
    plan = min_steps_plan(req, DRAFTERS, {"a": ka, "b": kb})
    assert plan.steps == brute_force(req, StepCosts.unit({"a": ka, "b": kb}))


def teacher_forced_like(rng, n):
    """Acceptance runs that do not shrink by one (like EAGLE's real traces), so greedy can be beaten."""
    return {d: rng.integers(1, 7, size=n).tolist() for d in DRAFTERS}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 120))
def test_exact_never_takes_more_steps_than_greedy(seed, n):
    req = request(teacher_forced_like(np.random.default_rng(seed), n))
    for ds in (["a"], ["b"], list(DRAFTERS)):
        assert min_steps_plan(req, ds).steps <= greedy_plan(req, ds).steps


def test_greedy_is_beaten_by_hand():
    # greedy at p1 takes 3 drafts to p5, where acceptance is poor (3 more steps); drafting 1 lands on p3,
    # whose acceptance covers the rest in one step: 2 steps against 4
    req = request({"a": [1, 4, 1, 5, 1, 1, 1, 1]})
    g, e = greedy_plan(req, ["a"]), min_steps_plan(req, ["a"])
    assert g.path.tolist() == [1, 5, 6, 7] and g.steps == 4
    assert e.path.tolist() == [1, 3] and e.steps == 2
    assert e.choice(1) == ("a", 1) and e.choice(3) == ("a", 4)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 80), cost_strategy())
def test_exact_min_time_beats_every_fixed_k_walk(seed, n, c):
    req = request(teacher_forced_like(np.random.default_rng(seed), n))
    costs = _costs(*c)
    best = exact_plan(req, costs).cost
    for d in DRAFTERS:
        for k in range(0, costs.k_max(d) + 1):
            w = walk(req.drafters[d], k)
            t = sum(costs.plain if m == 0 else float(costs.drafted[d][m]) for m in w.proposed.tolist())
            assert best <= t + 1e-9


def test_bad_costs_are_errors():
    with pytest.raises(ValueError, match="must not decrease"):
        StepCosts(1.0, {"a": np.array([0, 2.0, 1.0])})
    with pytest.raises(ValueError, match="plain"):
        StepCosts(0.0, {"a": np.array([0, 1.0])})
    with pytest.raises(ValueError, match="no trace for drafter"):
        exact_plan(request({"a": [1, 2]}), StepCosts.unit({"z": 2}))


def test_planned_oracles_follow_the_plan_under_the_replay_rule():
    rng = np.random.default_rng(3)
    req = request(teacher_forced_like(rng, 200))
    pol = OracleKPolicy("a", plan="min-steps")
    pol.bind_ground_truth({"r": req})
    res = run_rounds(pol, req, ["a"], 64, req.output_len, np.random.default_rng(0), sampled=False)
    assert res.rounds == min_steps_plan(req, ["a"]).steps
    assert (res.accepted == res.proposed).all()  # the plan never drafts a token that is rejected
    combo = OracleCombinePolicy("a", "b", plan="min-steps")
    combo.bind_ground_truth({"r": req})
    res = run_rounds(combo, req, list(DRAFTERS), 64, req.output_len, np.random.default_rng(0), sampled=False)
    assert res.rounds == min_steps_plan(req, DRAFTERS).steps <= greedy_plan(req, DRAFTERS).steps


def test_min_time_prices_drafting_at_the_most_any_fewer_drafts_cost():
    """An estimate that falls with m (drafts displacing prompt chunks from the token budget) is read at its running
    maximum: by hand, from position 1 the plan drafts 5 (all accepted; 1.9, the price of m = 1, not 1.5) and decodes
    the last position plainly (1.0): 2.9."""
    req = request({"a": [1, 6, 5, 4, 3, 2, 1, 1]})
    pol = OracleKPolicy("a", k_max=5, plan="min-time")
    pol.bind_ground_truth({"r": req})
    falling = lambda d, k: 1.0 if d is None else 2.0 - 0.1 * k  # noqa: E731
    assert pol.choose(RequestView("r", 1, 1, step_time_estimate=falling)) == Choice("a", 5)
    assert pol.time_plan.plan_of("r", req).cost == pytest.approx(2.9, abs=1e-12)


def test_min_time_plan_uses_the_step_time_estimate():
    req = request({"a": [1, 6, 5, 4, 3, 2, 1, 1]})
    pol = OracleKPolicy("a", k_max=5, plan="min-time")
    pol.bind_ground_truth({"r": req})
    # drafting is so dear that plain decoding is cheaper per token
    dear = lambda d, k: 1.0 if d is None else 10.0 + k  # noqa: E731
    assert pol.choose(RequestView("r", 1, 1, step_time_estimate=dear)).drafter is None
    pol.finish_request("r")
    cheap = lambda d, k: 1.0 if d is None else 1.0 + 0.01 * k  # noqa: E731
    assert pol.choose(RequestView("r", 1, 1, step_time_estimate=cheap)).k == 5
    with pytest.raises(ValueError, match="step-time estimate"):
        fresh = OracleKPolicy("a", plan="min-time")
        fresh.bind_ground_truth({"r": req})
        fresh.choose(RequestView("r", 1, 1))
    with pytest.raises(ValueError, match="plan must be one of"):
        OracleKPolicy("a", plan="best")
