"""Bandit policies against textbook behaviour on stationary Bernoulli arms (seeded), scope and drift."""
import numpy as np
import pytest

from policies.base import Feedback, RequestView
from policies.registry import make_policy

ARMS = ("a", "b", "c")


def play(policy, means, rounds, seed, request_id="r", k=1, mean_at=None):
    """Bernoulli arms: one drafted token accepted with prob means[arm]; returns the arm index per round."""
    rng = np.random.default_rng(seed)
    pulls = []
    policy.start_request(request_id)
    for t in range(rounds):
        c = policy.choose(RequestView(request_id=request_id, position=t, batch_size=1))
        arm = ARMS.index(c.drafter)
        mu = (mean_at(t) if mean_at else means)[arm]
        acc = int(rng.random() < mu)
        policy.observe(Feedback(request_id, t, c.drafter, k, proposed=1, accepted=acc, tv=(1.0 - mu,)))
        pulls.append(arm)
    return np.array(pulls)


@pytest.mark.parametrize("spec", [
    {"name": "ucb"},
    {"name": "metasd-ucb", "reward": "be"},
    {"name": "exp3", "gamma": 0.1},
    {"name": "thompson"},
    {"name": "epsilon-greedy", "epsilon": 0.1},
    {"name": "discounted-ucb", "gamma": 0.999, "reward": "be"},
    {"name": "sliding-window-ucb", "window": 500, "reward": "be"},
])
def test_best_arm_dominates_after_enough_rounds(spec):
    means = (0.2, 0.5, 0.8)
    pol = make_policy({**spec, "drafters": list(ARMS), "k": 1, "seed": 0})
    pulls = play(pol, means, 3000, seed=1)
    last = pulls[-1000:]
    assert (last == 2).mean() > 0.8, f"{spec['name']}: best arm share {np.mean(last == 2):.2f} in the last 1000 rounds"
    assert (pulls[:300] == 2).mean() < (last == 2).mean()  # it learned


def test_random_drafter_does_not_learn():
    pol = make_policy({"name": "random-drafter", "drafters": list(ARMS), "seed": 0})
    pulls = play(pol, (0.2, 0.5, 0.8), 3000, seed=1)
    assert abs((pulls == 2).mean() - 1 / 3) < 0.05


def test_ucb_plays_each_arm_once_first():
    pol = make_policy({"name": "ucb", "drafters": list(ARMS), "seed": 0})
    assert sorted(play(pol, (0.9, 0.9, 0.9), 3, seed=0).tolist()) == [0, 1, 2]


def test_ucb_regret_grows_logarithmically():
    # pseudo-regret at 4000 rounds is far below linear and below 3x its value at 500 (ln ratio ~ 1.33)
    means = np.array([0.3, 0.7])
    pol = make_policy({"name": "ucb", "drafters": ["a", "b"], "seed": 0})
    pulls = play(pol, (0.3, 0.7, 0.0), 4000, seed=3)
    gap = (means.max() - means[pulls]).cumsum()
    assert gap[-1] < 0.1 * 4000 * 0.4
    assert gap[-1] < 3 * gap[499]


def test_bd_reward_uses_tv_not_acceptance():
    # BD sees 1 - tv (here constant per arm) even when nothing is accepted: it finds the best arm at once
    pol = make_policy({"name": "metasd-ucb", "drafters": list(ARMS), "k": 1, "beta": 0.1, "seed": 0})
    pol.start_request("r")
    for t in range(60):
        c = pol.choose(RequestView("r", t, 1))
        tv = {"a": 0.8, "b": 0.5, "c": 0.2}[c.drafter]
        pol.observe(Feedback("r", t, c.drafter, 1, proposed=1, accepted=0, tv=(tv,)))
    assert pol.choose(RequestView("r", 60, 1)).drafter == "c"


def test_bd_refuses_feedback_without_tv_and_offers_be():
    pol = make_policy({"name": "metasd-ucb", "drafters": list(ARMS)})
    assert pol.needs_tv
    c = pol.choose(RequestView("r", 0, 1))
    with pytest.raises(ValueError, match="reward: be"):
        pol.observe(Feedback("r", 0, c.drafter, 3, proposed=3, accepted=1, tv=None))


def test_request_scope_resets_and_shared_scope_carries_over():
    means = (0.1, 0.1, 0.9)
    per_req = make_policy({"name": "ucb", "drafters": list(ARMS), "k": 1, "scope": "request", "seed": 0})
    shared = make_policy({"name": "ucb", "drafters": list(ARMS), "k": 1, "scope": "shared", "seed": 0})
    play(per_req, means, 500, seed=0, request_id="r1")
    play(shared, means, 500, seed=0, request_id="r1")
    # a fresh request: the per-request bandit starts over (each arm once), the shared one keeps exploiting
    assert play(per_req, means, 3, seed=1, request_id="r2").tolist() == [0, 1, 2]
    assert play(shared, means, 1, seed=1, request_id="r2").tolist() == [2]


def test_finish_request_drops_state():
    pol = make_policy({"name": "thompson", "drafters": list(ARMS)})
    play(pol, (0.5, 0.5, 0.5), 5, seed=0, request_id="x")
    pol.finish_request("x")
    assert "x" not in pol._states


def test_discounted_and_window_follow_a_switch_plain_ucb_lags():
    # at round 1500 arm a jumps from 0.2 to 0.9 above c (0.8); share of a in rounds 1600..2000
    def mean_at(t):
        return (0.2, 0.6, 0.8) if t < 1500 else (0.9, 0.6, 0.8)

    shares = {}
    for name, extra in (("ucb", {}), ("discounted-ucb", {"gamma": 0.98}), ("sliding-window-ucb", {"window": 100})):
        pol = make_policy({"name": name, "drafters": list(ARMS), "k": 1, "reward": "be", "beta": 0.2, "seed": 0,
                           **extra})
        pulls = play(pol, None, 2000, seed=0, mean_at=mean_at)
        shares[name] = (pulls[1600:] == 0).mean()
    assert shares["discounted-ucb"] > 0.5 and shares["sliding-window-ucb"] > 0.5, shares
    assert shares["ucb"] < 0.2, shares


@pytest.mark.parametrize("bad", [
    {"name": "ucb", "drafters": []},
    {"name": "ucb", "drafters": ["a", "a"]},
    {"name": "ucb", "drafters": ["a"], "k": 0},
    {"name": "ucb", "drafters": ["a"], "reward": "xx"},
    {"name": "ucb", "drafters": ["a"], "scope": "global"},
    {"name": "ucb", "drafters": ["a"], "beta": -1},
    {"name": "discounted-ucb", "drafters": ["a"], "gamma": 0},
    {"name": "sliding-window-ucb", "drafters": ["a"], "window": 0},
    {"name": "exp3", "drafters": ["a"], "gamma": 2},
    {"name": "epsilon-greedy", "drafters": ["a"], "epsilon": -0.1},
    {"name": "thompson", "drafters": ["a"], "prior_alpha": 0},
])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError, match="policy"):
        make_policy(bad)
