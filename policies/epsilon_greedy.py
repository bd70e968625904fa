"""Epsilon-greedy and uniformly random drafter choice (the exploration baselines)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy
from policies.ucb import UCBState, ucb_update


def epsilon_greedy_arm(counts: np.ndarray, sums: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """The first arm never played; else, when rng.random() < epsilon, rng.integers(0, arms); else the best mean
    sums / counts (the first on ties). Plain Python (both paths call it; numba draws the generator's own stream)."""
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
    """A uniformly random arm: rng.integers(0, arms) (both paths call it)."""
    return int(rng.integers(0, arms))


class EpsilonGreedyPolicy(BanditPolicy):
    """Play each arm once, then the best mean with probability 1 - epsilon, a random arm otherwise."""

    name = "epsilon-greedy"
    description = "Epsilon-greedy over drafters (random arm with probability epsilon); BE reward by default."

    def __init__(self, drafters: Sequence[str], k: int = 3, epsilon: float = 0.1, reward: str | None = None,
                 scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, reward=reward, scope=scope, seed=seed)
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"policy {self.name!r}: epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = float(epsilon)

    def _new_state(self) -> UCBState:
        return UCBState(np.zeros(self.num_arms), np.zeros(self.num_arms))

    def _select(self, state: UCBState) -> int:
        return epsilon_greedy_arm(state.counts, state.sums, self.epsilon, self.rng)

    def _update(self, state: UCBState, arm: int, reward: float) -> None:
        ucb_update(state.counts, state.sums, arm, reward, 1.0)


class RandomDrafterPolicy(BanditPolicy):
    """A uniformly random drafter every round (the no-learning baseline)."""

    name = "random-drafter"
    description = "A uniformly random drafter each round (baseline; learns nothing)."
    learns = False  # the engine may skip its feedback

    def _new_state(self) -> None:
        return None

    def _select(self, state: None) -> int:
        return random_arm(self.num_arms, self.rng)

    def _update(self, state: None, arm: int, reward: float) -> None:
        return None
