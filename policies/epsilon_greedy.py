"""Epsilon-greedy and uniformly random drafter choice (the exploration baselines)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy, first_unplayed
from policies.ucb import UCBState


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
        arm = first_unplayed(state.counts)
        if arm is not None:
            return arm
        if self.rng.random() < self.epsilon:
            return int(self.rng.integers(self.num_arms))
        return int(np.argmax(state.sums / state.counts))

    def _update(self, state: UCBState, arm: int, reward: float) -> None:
        state.counts[arm] += 1.0
        state.sums[arm] += reward


class RandomDrafterPolicy(BanditPolicy):
    """A uniformly random drafter every round (the no-learning baseline)."""

    name = "random-drafter"
    description = "A uniformly random drafter each round (baseline; learns nothing)."

    def _new_state(self) -> None:
        return None

    def _select(self, state: None) -> int:
        return int(self.rng.integers(self.num_arms))

    def _update(self, state: None, arm: int, reward: float) -> None:
        return None
