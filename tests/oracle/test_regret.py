"""Plain-loop rounds, stopping-time regret and best-arm ratio (no SimPy)."""
import numpy as np
import pytest

from oracle.regret import best_arm_by_position, regret_curve, run_rounds
from policies.base import FixedPolicy
from policies.registry import make_policy
from traces.pool import PoolSpec, make_pool_bundle, pool_drafters, request_segments, specialist_name

SPEC = PoolSpec(num_requests=2, output_len=(600, 600), seed=3)
DRAFTERS = pool_drafters(SPEC)


@pytest.fixture(scope="module")
def req():
    return make_pool_bundle(SPEC).requests[0]


def test_rounds_emit_the_budget_exactly(req):
    res = run_rounds(FixedPolicy(DRAFTERS[0], 3), req, DRAFTERS, 3, 500, np.random.default_rng(0))
    assert 1 + res.emitted.sum() == 500  # the prefill made the first token
    assert (res.emitted == res.accepted + 1).all() and (res.accepted <= res.proposed).all()
    assert res.rounds_to(500) == res.rounds
    some = res.proposed > 0  # the last round may have no room left to draft
    assert np.allclose(res.reward_be[some], res.accepted[some] / res.proposed[some])
    assert (res.reward_be[~some] == 0).all()
    tv = req.drafters[DRAFTERS[0]].tv
    assert res.reward_bd[0] == pytest.approx(float(np.mean(1 - tv[1:4])), abs=1e-6)  # first round drafts tokens 1..3


def test_same_seed_same_rounds_other_seed_differs(req):
    def go(seed):
        pol = make_policy({"name": "thompson", "drafters": DRAFTERS, "seed": 1})
        return run_rounds(pol, req, DRAFTERS, 3, 500, np.random.default_rng(seed)).arms

    assert (go(5) == go(5)).all()
    assert go(5).shape != go(6).shape or (go(5) != go(6)).any()


def test_budget_beyond_the_trace_is_refused(req):
    with pytest.raises(ValueError, match="budget_tokens"):
        run_rounds(FixedPolicy(DRAFTERS[0], 3), req, DRAFTERS, 3, req.output_len + 1, np.random.default_rng(0))


def test_best_fixed_drafter_has_zero_regret_and_full_best_arm_ratio(req):
    best_arm = best_arm_by_position(req, DRAFTERS, 3)
    assert (best_arm == best_arm[0]).all()
    best = DRAFTERS[best_arm[0]]
    assert best == specialist_name(req.category)
    curve = regret_curve(lambda s: FixedPolicy(best, 3), req, DRAFTERS, 3, [100, 300, 599], seeds=range(3))
    assert curve.best_fixed == best
    assert np.allclose(curve.regret, 0.0)
    assert np.allclose(curve.best_arm_ratio, 1.0)


def test_random_drafter_has_positive_regret_and_learners_less(req):
    budgets = [150, 599]
    rnd = regret_curve(lambda s: make_policy({"name": "random-drafter", "drafters": DRAFTERS, "seed": s}),
                       req, DRAFTERS, 3, budgets, seeds=range(4))
    ucb = regret_curve(lambda s: make_policy({"name": "metasd-ucb", "drafters": DRAFTERS, "beta": 0.1, "seed": s}),
                       req, DRAFTERS, 3, budgets, seeds=range(4))
    assert rnd.regret[-1] > 0
    assert ucb.regret[-1] < rnd.regret[-1]
    assert ucb.best_arm_ratio[-1] > rnd.best_arm_ratio[-1]


def test_best_arm_follows_segments_in_drift_mode():
    spec = PoolSpec(num_requests=1, drift=True, segments=3, output_len=(900, 900), seed=8)
    b = make_pool_bundle(spec)
    r = b.requests[0]
    segs = request_segments(b, r)
    best = best_arm_by_position(r, pool_drafters(spec), 3, segs)
    for (s, c), e in zip(segs, [300, 600, 900]):
        assert (best[s:e] == pool_drafters(spec).index(specialist_name(c))).all()
