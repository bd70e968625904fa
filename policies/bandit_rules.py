"""The drafter bandits' rules over per-arm arrays, written once as plain Python: the policies (policies/ucb.py,
epsilon_greedy.py, thompson.py, exp3.py) call them, and the compiled engine compiles the same functions.

A bandit's state is two per-arm arrays (BanditState): UCB's and epsilon-greedy's play counts and reward sums,
Thompson's alpha and beta, EXP3's (unused, log weights), a random drafter's (unused, unused); sliding-window UCB adds
the ring of its last rounds. `rule` names which bandit the arrays belong to. A compiled rule draws from the
policy's own generator, through numba's implementation of numpy's Generator, and draws the same numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# the built-in bandits' rules: UCB's family (UCB1, MetaSD-UCB, discounted), sliding-window UCB, epsilon-greedy,
# a random drafter, Thompson sampling, EXP3
B_UCB, B_SLIDING, B_EPSILON, B_RANDOM, B_THOMPSON, B_EXP3 = range(6)


class BanditRule(NamedTuple):
    """A built-in bandit's rule (B_UCB ... B_EXP3) and the settings its choice and update read."""

    rule: int
    beta: float = 0.0  # UCB's exploration weight
    epsilon: float = 0.0  # epsilon-greedy's exploration probability
    exp3_gamma: float = 0.0  # EXP3's exploration mix
    discount: float = 1.0  # discounted UCB's gamma (1.0: none)


@dataclass
class BanditState:
    """One state's two per-arm arrays (the module's docstring says what each rule keeps in them) and sliding-window
    UCB's ring, as row 0 of the kernel's per-state arrays: the arm and reward of round s at [0, s % window], the
    rounds seen so far in seen[0]."""

    first: np.ndarray
    second: np.ndarray
    ring_arm: np.ndarray | None = None  # int64 (1, window)
    ring_reward: np.ndarray | None = None  # float64 (1, window)
    seen: np.ndarray | None = None  # int64 (1,)


def bandit_draws(rule: int) -> bool:
    """Whether a bandit's choice draws from its generator (then each request's choice is its own call, in batch
    order; else a shared state's one choice serves the whole step)."""
    return rule == B_EPSILON or rule == B_RANDOM or rule == B_THOMPSON or rule == B_EXP3


def bandit_choices(rows, n, first, second, arm_slot, arms, shared, rule, beta, epsilon, exp3_gamma, rng, slot):
    """A step's choices for its requests in batch order: request j reads the state in row rows[j] of `first` and
    `second` (their first `arms` columns; row 0 for them all when `shared`) and plays the drafter arm_slot[arm]
    (into slot[j]); a shared state that draws nothing makes one choice for the step (bandit_draws)."""
    each_draws = bandit_draws(rule)
    arm = 0
    for j in range(n):
        if j == 0 or not shared or each_draws:
            e = 0 if shared else rows[j]
            if rule == B_UCB or rule == B_SLIDING:
                arm = ucb_arm_rule(first[e, :arms], second[e, :arms], beta)
            elif rule == B_EPSILON:
                arm = epsilon_greedy_arm(first[e, :arms], second[e, :arms], epsilon, rng)
            elif rule == B_RANDOM:
                arm = random_arm(arms, rng)
            elif rule == B_THOMPSON:
                arm = thompson_arm(first[e, :arms], second[e, :arms], rng)
            else:
                arm = exp3_arm(second[e, :arms], exp3_gamma, rng)
        slot[j] = arm_slot[arm]


def bandit_updates(rows, n, first, second, arms, shared, rule, played, rewards, ring_arm, ring_reward, seen,
                   discount, exp3_gamma):
    """A step's updates in batch order: request j's state (row rows[j] of `first` and `second`, their first `arms`
    columns; row 0 for them all when `shared`) played arm played[j] for rewards[j] (played[j] < 0: it learns nothing
    this step). Sliding-window UCB's ring is the state's row of ring_arm and ring_reward, its rounds seen in `seen`;
    no other rule reads them. A random drafter learns nothing. One call per step, like bandit_choices: compiled, the
    rule's branch is then taken once per step, not per request (UCB runs half again as fast)."""
    for j in range(n):
        arm = played[j]
        if arm < 0:
            continue
        x = 0 if shared else rows[j]
        if rule == B_UCB or rule == B_EPSILON:
            ucb_update(first[x, :arms], second[x, :arms], arm, rewards[j], discount)
        elif rule == B_SLIDING:
            seen[x] = sliding_update(first[x, :arms], second[x, :arms], ring_arm[x], ring_reward[x], seen[x], arm,
                                     rewards[j])
        elif rule == B_THOMPSON:
            thompson_update(first[x, :arms], second[x, :arms], arm, rewards[j])
        elif rule == B_EXP3:
            exp3_update(second[x, :arms], arm, rewards[j], exp3_gamma)


def ucb_arm_rule(counts: np.ndarray, sums: np.ndarray, beta: float) -> int:
    """The first arm never played, else argmax over arms of sums / counts + beta * sqrt(2 ln max(t, 1) / counts), t =
    the plays, the first on ties. libm's log and sqrt, as numba
    compiles them."""
    arms = len(counts)
    for a in range(arms):
        if counts[a] <= 0:
            return a
    t = 0.0
    for a in range(arms):
        t += counts[a]
    log_t = math.log(max(t, 1.0))
    best = 0
    best_index = -math.inf
    for a in range(arms):
        index = sums[a] / counts[a] + beta * math.sqrt(2.0 * log_t / counts[a])
        if index > best_index:
            best, best_index = a, index
    return best


def ucb_update(counts: np.ndarray, sums: np.ndarray, arm: int, reward: float, discount: float) -> None:
    """One round's update: every count and sum times `discount` (discounted UCB; 1.0: none), then the played arm's
    count + 1 and sum + reward."""
    if discount != 1.0:
        for a in range(len(counts)):
            counts[a] *= discount
            sums[a] *= discount
    counts[arm] += 1.0
    sums[arm] += reward


def sliding_update(counts: np.ndarray, sums: np.ndarray, ring_arm: np.ndarray, ring_reward: np.ndarray, seen: int,
                   arm: int, reward: float) -> int:
    """Sliding-window UCB's update over its last len(ring_arm) rounds (`seen` so far, held in a ring): the round is
    added, then, once the ring is full, its oldest round leaves. Returns the rounds seen."""
    window = len(ring_arm)
    pos = seen % window
    counts[arm] += 1.0
    sums[arm] += reward
    if seen >= window:
        old = ring_arm[pos]
        counts[old] -= 1.0
        sums[old] -= ring_reward[pos]
    ring_arm[pos] = arm
    ring_reward[pos] = reward
    return seen + 1


def epsilon_greedy_arm(counts: np.ndarray, sums: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """The first arm never played; else, when rng.random() < epsilon, rng.integers(0, arms); else the best mean
    sums / counts (the first on ties)."""
    arms = len(counts)
    for a in range(arms):
        if counts[a] <= 0:
            return a
    if rng.random() < epsilon:
        return int(rng.integers(0, arms))
    best = 0
    best_mean = sums[0] / counts[0]
    for a in range(1, arms):
        mean = sums[a] / counts[a]
        if mean > best_mean:
            best, best_mean = a, mean
    return best


def random_arm(arms: int, rng: np.random.Generator) -> int:
    """A uniformly random arm: rng.integers(0, arms)."""
    return int(rng.integers(0, arms))


def thompson_arm(alpha: np.ndarray, beta: np.ndarray, rng: np.random.Generator) -> int:
    """The arm whose draw rng.beta(alpha[a], beta[a]) (drawn in arm order) is largest, the first on ties."""
    best = 0
    best_draw = -1.0
    for a in range(len(alpha)):
        draw = rng.beta(alpha[a], beta[a])
        if draw > best_draw:
            best, best_draw = a, draw
    return best


def thompson_update(alpha: np.ndarray, beta: np.ndarray, arm: int, reward: float) -> None:
    """A reward r in [0, 1] adds r to the played arm's alpha and 1 - r to its beta."""
    alpha[arm] += reward
    beta[arm] += 1.0 - reward


def exp3_probabilities(log_weights: np.ndarray, gamma: float) -> np.ndarray:
    """(1 - gamma) * softmax(log w) + gamma / K, as plain loops (libm's exp, sums in arm order), as
    numba compiles them."""
    arms = len(log_weights)
    top = log_weights[0]
    for a in range(1, arms):
        top = max(top, log_weights[a])
    w = np.empty(arms)
    total = 0.0
    for a in range(arms):
        w[a] = math.exp(log_weights[a] - top)
        total += w[a]
    for a in range(arms):
        w[a] = (1.0 - gamma) * w[a] / total + gamma / arms
    return w


def exp3_arm(log_weights: np.ndarray, gamma: float, rng: np.random.Generator) -> int:
    """An arm drawn from exp3_probabilities with one rng.random(): the first arm whose cumulative probability (over
    their total) passes it, as Generator.choice(arms, p=...) draws."""
    u = rng.random()
    p = exp3_probabilities(log_weights, gamma)
    cdf = np.empty(len(p))
    total = 0.0
    for a in range(len(p)):
        total += p[a]
        cdf[a] = total
    for a in range(len(p)):
        if cdf[a] / total > u:
            return a
    return len(p) - 1


def exp3_update(log_weights: np.ndarray, arm: int, reward: float, gamma: float) -> None:
    """The played arm's log weight grows by gamma * (reward / its probability) / K."""
    p = exp3_probabilities(log_weights, gamma)[arm]
    log_weights[arm] += gamma * (reward / p) / len(log_weights)
