"""Epsilon-greedy and uniformly random drafter choice (the exploration baselines); their rules are
policies/bandit_rules.py's (epsilon_greedy_arm, random_arm)."""
from __future__ import annotations

from typing import Sequence

from policies.bandit import BanditPolicy
from policies.bandit_rules import B_EPSILON, B_RANDOM, BanditRule


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
        self.rule = BanditRule(B_EPSILON, epsilon=self.epsilon)


class RandomDrafterPolicy(BanditPolicy):
    """A uniformly random drafter every round (the no-learning baseline)."""

    name = "random-drafter"
    description = "A uniformly random drafter each round (baseline; learns nothing)."
    learns = False  # the engine may skip its feedback
    rule = BanditRule(B_RANDOM)
