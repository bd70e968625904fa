"""The bandits' choice and update rules (policies/bandit_rules.py), which the policies call in Python and the kernels
compile: hand-worked updates and step choices, and the choices against numpy's own draws (Generator.choice with p, a
vector of Beta draws, integers)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from policies.bandit_rules import (B_EPSILON, B_EXP3, B_RANDOM, B_SLIDING, B_THOMPSON, B_UCB,
                                   bandit_choices, bandit_updates, epsilon_greedy_arm, exp3_arm, exp3_probabilities,
                                   exp3_update, random_arm, sliding_update, thompson_arm, thompson_update, ucb_arm_rule,
                                   ucb_update)


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


def test_a_step_s_choices_read_each_request_s_row_and_name_its_drafter_slot():
    """UCB per request: request j reads row rows[j]; the arm's drafter is arm_slot[arm]. Row 0 never played arm 1,
    row 2 has arm 0's mean 0.9 against arm 1's 0.1 (equal counts: the same bonus)."""
    first = np.array([[1.0, 0.0], [0.0, 0.0], [5.0, 5.0]])
    second = np.array([[1.0, 0.0], [0.0, 0.0], [4.5, 0.5]])
    slot = np.full(3, -9, dtype=np.int64)
    bandit_choices(np.array([0, 1, 2]), 3, first, second, np.array([7, 4]), 2, False, B_UCB, 1.0, 0.0, 0.0,
                   np.random.default_rng(0), slot)
    assert slot.tolist() == [4, 7, 7]  # row 0: arm 1 untried; row 1: arm 0 untried; row 2: arm 0's mean
    slot[:] = -9
    bandit_choices(np.array([2, 0]), 2, first, second, np.array([7, 4]), 2, False, B_UCB, 1.0, 0.0, 0.0,
                   np.random.default_rng(0), slot)
    assert slot[:2].tolist() == [7, 4] and slot[2] == -9  # only the n asked are written


def test_a_shared_state_chooses_once_per_step_unless_its_rule_draws():
    """Shared UCB (draws nothing): one choice serves the step, from row 0 whatever rows says. Shared random
    drafter: one generator draw per request, in batch order."""
    first, second = np.array([[3.0, 1.0]]), np.array([[0.3, 0.9]])  # arm 1 best
    slot = np.zeros(4, dtype=np.int64)
    bandit_choices(np.array([5, 6, 7, 8]), 4, first, second, np.array([0, 1]), 2, True, B_UCB, 0.0, 0.0, 0.0,
                   np.random.default_rng(0), slot)
    assert slot.tolist() == [1, 1, 1, 1]
    rng, twin = np.random.default_rng(11), np.random.default_rng(11)
    bandit_choices(np.zeros(4, dtype=np.int64), 4, np.zeros((1, 3)), np.zeros((1, 3)), np.array([0, 1, 2]), 3, True,
                   B_RANDOM, 0.0, 0.0, 0.0, rng, slot)
    assert slot.tolist() == [int(twin.integers(0, 3)) for _ in range(4)]


def test_each_rule_s_update_touches_what_its_rule_keeps():
    """UCB and epsilon-greedy: counts and sums (discounted UCB first decays them); Thompson: alpha and beta; EXP3:
    its log weights alone; a random drafter: nothing; sliding window: its ring and rounds seen. One request of a step
    of three updates state 1 (request 0 played nothing, request 2 reads state 0, left alone here)."""
    def run(rule, discount=1.0):
        first, second = np.array([[7.0, 7.0], [2.0, 1.0]]), np.array([[7.0, 7.0], [1.0, 0.5]])
        ring_arm, ring_reward = np.zeros((2, 2), dtype=np.int64), np.zeros((2, 2))  # two states' rings
        seen = np.array([0, 5])
        bandit_updates(np.array([1, 1, 0]), 2, first, second, 2, False, rule, np.array([-1, 1, 0]),
                       np.array([9.0, 0.5, 9.0]), ring_arm, ring_reward, seen, discount, 0.2)
        assert first[0].tolist() == [7.0, 7.0] and second[0].tolist() == [7.0, 7.0]
        assert ring_arm[0].tolist() == [0, 0] and ring_reward[0].tolist() == [0.0, 0.0] and seen[0] == 0
        return first[1].tolist(), second[1].tolist(), ring_arm[1].tolist(), ring_reward[1].tolist(), int(seen[1])

    assert run(B_UCB) == ([2.0, 2.0], [1.0, 1.0], [0, 0], [0.0, 0.0], 5)
    assert run(B_EPSILON) == run(B_UCB)
    assert run(B_UCB, discount=0.5) == ([1.0, 1.5], [0.5, 0.75], [0, 0], [0.0, 0.0], 5)
    assert run(B_THOMPSON) == ([2.0, 1.5], [1.0, 1.0], [0, 0], [0.0, 0.0], 5)
    lw = np.array([1.0, 0.5])
    exp3_update(lw, 1, 0.5, 0.2)
    assert run(B_EXP3) == ([2.0, 1.0], lw.tolist(), [0, 0], [0.0, 0.0], 5)
    assert run(B_RANDOM) == ([2.0, 1.0], [1.0, 0.5], [0, 0], [0.0, 0.0], 5)
    # the ring of 2 has seen 5 rounds: round 5 goes to position 1, where round 3 (arm 0, reward 0.0 here) leaves
    assert run(B_SLIDING) == ([1.0, 2.0], [1.0, 1.0], [0, 1], [0.0, 0.5], 6)


def test_a_shared_state_learns_every_request_s_round_in_batch_order():
    """Shared sliding window of 2: three requests' rounds in one step go to row 0 in batch order, so the first
    one's round has left the ring by the end (arm 0 then arm 1 then arm 1: counts [0, 2])."""
    first, second = np.zeros((1, 2)), np.zeros((1, 2))
    ring_arm, ring_reward, seen = np.zeros((1, 2), dtype=np.int64), np.zeros((1, 2)), np.zeros(1, dtype=np.int64)
    bandit_updates(np.array([4, 5, 6]), 3, first, second, 2, True, B_SLIDING, np.array([0, 1, 1]),
                   np.array([1.0, 0.25, 0.5]), ring_arm, ring_reward, seen, 1.0, 0.0)
    assert first[0].tolist() == [0.0, 2.0] and second[0].tolist() == [0.0, 0.75] and seen[0] == 3


def test_each_rule_s_arm_is_its_own_rule_s_choice():
    """A state's choice (bandit_choices over one request) under each rule answers as that rule's function with a twin
    generator, and draws as much: UCB and sliding-window UCB draw nothing; epsilon-greedy at epsilon 1 explores;
    Thompson reads (alpha, beta); EXP3 its second array alone."""
    first, second = np.array([3.0, 2.0, 4.0]), np.array([1.5, 1.8, 0.4])

    def _arm_of(rule, first, second, beta, epsilon, exp3_gamma, rng):
        slot = np.full(1, -1, dtype=np.int64)
        bandit_choices(np.zeros(1, dtype=np.int64), 1, first[None], second[None], np.arange(3), 3, False, rule, beta,
                       epsilon, exp3_gamma, rng, slot)
        return int(slot[0])

    for seed in range(20):
        def twins():
            return np.random.default_rng(seed), np.random.default_rng(seed)

        for rule in (B_UCB, B_SLIDING):
            rng, twin = twins()
            assert _arm_of(rule, first, second, 0.7, 0.0, 0.0, rng) == ucb_arm_rule(first, second, 0.7) == 1
            assert rng.bit_generator.state == twin.bit_generator.state
        rng, twin = twins()
        assert _arm_of(B_EPSILON, first, second, 0.0, 1.0, 0.0, rng) == epsilon_greedy_arm(first, second, 1.0, twin)
        assert rng.random() == twin.random()
        rng, twin = twins()
        assert _arm_of(B_RANDOM, first, second, 0.0, 0.0, 0.0, rng) == random_arm(3, twin)
        rng, twin = twins()
        assert _arm_of(B_THOMPSON, first, second, 0.0, 0.0, 0.0, rng) == thompson_arm(first, second, twin)
        rng, twin = twins()
        assert _arm_of(B_EXP3, first, second, 0.0, 0.0, 0.3, rng) == exp3_arm(second, 0.3, twin)
        assert rng.random() == twin.random()
