"""Thompson sampling over drafters with Beta posteriors (fractional rewards update alpha and beta)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy


def thompson_arm(alpha: np.ndarray, beta: np.ndarray, rng: np.random.Generator) -> int:
    """The arm whose draw rng.beta(alpha[a], beta[a]) (drawn in arm order) is largest, the first on ties. Plain Python
    (both paths call it; numba draws the generator's own stream)."""
    best = 0
    best_draw = -1.0
    for a in range(len(alpha)):
        draw = rng.beta(alpha[a], beta[a])
        if draw > best_draw:
            best, best_draw = a, draw
    return best


def thompson_update(alpha: np.ndarray, beta: np.ndarray, arm: int, reward: float) -> None:
    """A reward r in [0, 1] adds r to the played arm's alpha and 1 - r to its beta (both paths call it)."""
    alpha[arm] += reward
    beta[arm] += 1.0 - reward


@dataclass
class BetaState:
    alpha: np.ndarray
    beta: np.ndarray


class ThompsonPolicy(BanditPolicy):
    """Sample a mean from each arm's Beta(alpha, beta) and play the largest; reward r adds r and 1 - r."""

    name = "thompson"
    description = "Thompson sampling over drafters (Beta posterior per arm); BE reward by default."

    def __init__(self, drafters: Sequence[str], k: int = 3, prior_alpha: float = 1.0, prior_beta: float = 1.0,
                 reward: str | None = None, scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, reward=reward, scope=scope, seed=seed)
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(f"policy {self.name!r}: prior_alpha and prior_beta must be > 0")
        self.prior_alpha = float(prior_alpha)
        self.prior_beta = float(prior_beta)

    def _new_state(self) -> BetaState:
        return BetaState(np.full(self.num_arms, self.prior_alpha), np.full(self.num_arms, self.prior_beta))

    def _select(self, state: BetaState) -> int:
        return thompson_arm(state.alpha, state.beta, self.rng)

    def _update(self, state: BetaState, arm: int, reward: float) -> None:
        thompson_update(state.alpha, state.beta, arm, reward)
