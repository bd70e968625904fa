"""The bandits' choice and update rules (policies/ucb.py, epsilon_greedy.py, thompson.py, exp3.py), which the policies
call in Python and the kernels compile: hand-worked updates, and the choices against numpy's own draws (Generator.choice
with p, a vector of Beta draws, integers)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from policies.epsilon_greedy import epsilon_greedy_arm, random_arm
from policies.exp3 import exp3_arm, exp3_probabilities, exp3_update
from policies.thompson import thompson_arm, thompson_update
from policies.ucb import sliding_update, ucb_update


def test_discounted_update_decays_every_arm_then_adds_the_round():
    counts, sums = np.array([1.0, 2.0]), np.array([0.5, 1.0])
    ucb_update(counts, sums, 1, 0.5, 0.5)
    assert counts.tolist() == [0.5, 2.0] and sums.tolist() == [0.25, 1.0]
    ucb_update(counts, sums, 0, 1.0, 1.0)  # no discount: the played arm alone
    assert counts.tolist() == [1.5, 2.0] and sums.tolist() == [1.25, 1.0]


def test_the_sliding_window_forgets_the_oldest_round_once_full():
    counts, sums = np.zeros(2), np.zeros(2)
    ring_arm, ring_reward = np.zeros(2, dtype=np.int64), np.zeros(2)
    seen = 0
    for arm, r in [(0, 1.0), (1, 0.5)]:
        seen = sliding_update(counts, sums, ring_arm, ring_reward, seen, arm, r)
    assert counts.tolist() == [1.0, 1.0] and sums.tolist() == [1.0, 0.5]
    seen = sliding_update(counts, sums, ring_arm, ring_reward, seen, 0, 0.25)  # round 1 (arm 0, 1.0) leaves
    assert seen == 3 and counts.tolist() == [1.0, 1.0] and sums.tolist() == [0.25, 0.5]
    seen = sliding_update(counts, sums, ring_arm, ring_reward, seen, 0, 0.75)  # round 2 (arm 1, 0.5) leaves
    assert counts.tolist() == [2.0, 0.0] and sums.tolist() == [1.0, 0.0]


def test_exp3_probabilities_mix_the_softmax_with_uniform_exploration():
    p = exp3_probabilities(np.array([0.0, math.log(3.0)]), 0.2)  # softmax (1/4, 3/4)
    assert p == pytest.approx([0.8 * 0.25 + 0.1, 0.8 * 0.75 + 0.1], abs=1e-15)
    assert exp3_probabilities(np.array([5.0, 5.0, 5.0]), 0.5) == pytest.approx([1 / 3] * 3, abs=1e-15)


def test_exp3_draws_as_generator_choice_with_its_probabilities():
    rs = np.random.default_rng(0)
    for t in range(2000):
        arms = int(rs.integers(1, 9))
        lw, gamma = rs.normal(0.0, 3.0, arms), float(rs.uniform(0.01, 1.0))
        mine, numpy_own = np.random.default_rng(t), np.random.default_rng(t)
        assert exp3_arm(lw, gamma, mine) == int(numpy_own.choice(arms, p=exp3_probabilities(lw, gamma)))
        assert mine.random() == numpy_own.random()  # one draw each


def test_exp3_update_importance_weights_the_reward():
    lw = np.array([0.0, math.log(3.0)])
    exp3_update(lw, 0, 0.6, 0.2)  # p(arm 0) = 0.3: + 0.2 * (0.6 / 0.3) / 2
    assert lw[0] == pytest.approx(0.2, abs=1e-15) and lw[1] == math.log(3.0)


def test_thompson_plays_the_largest_of_one_beta_draw_per_arm():
    rs = np.random.default_rng(1)
    for t in range(2000):
        arms = int(rs.integers(1, 9))
        alpha, beta = rs.uniform(0.1, 20.0, arms), rs.uniform(0.1, 20.0, arms)
        mine, numpy_own = np.random.default_rng(t), np.random.default_rng(t)
        assert thompson_arm(alpha, beta, mine) == int(np.argmax(numpy_own.beta(alpha, beta)))
        assert mine.random() == numpy_own.random()
    alpha, beta = np.ones(2), np.ones(2)
    thompson_update(alpha, beta, 1, 0.25)
    assert alpha.tolist() == [1.0, 1.25] and beta.tolist() == [1.0, 1.75]


def test_epsilon_greedy_tries_each_arm_then_explores_or_exploits():
    rng = np.random.default_rng(2)
    before = rng.bit_generator.state
    assert epsilon_greedy_arm(np.array([1.0, 0.0, 3.0]), np.zeros(3), 1.0, rng) == 1  # arm 1 never played
    assert rng.bit_generator.state == before  # no draw
    counts, sums = np.array([2.0, 4.0, 1.0]), np.array([1.0, 3.0, 0.5])  # means 0.5, 0.75, 0.5
    assert epsilon_greedy_arm(counts, sums, 0.0, rng) == 1
    rng, twin = np.random.default_rng(2), np.random.default_rng(2)
    picks = [epsilon_greedy_arm(counts, sums, 1.0, rng) for _ in range(300)]
    expected = []
    for _ in range(300):  # explore: one uniform draw (below epsilon = 1), then the arm
        twin.random()
        expected.append(int(twin.integers(3)))
    assert picks == expected and set(picks) == {0, 1, 2}


def test_a_random_drafter_is_generator_integers():
    mine, numpy_own = np.random.default_rng(3), np.random.default_rng(3)
    assert [random_arm(5, mine) for _ in range(500)] == [int(numpy_own.integers(5)) for _ in range(500)]
