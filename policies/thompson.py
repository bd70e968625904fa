"""Thompson sampling over drafters with Beta posteriors (fractional rewards update alpha and beta)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy


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
        return int(np.argmax(self.rng.beta(state.alpha, state.beta)))

    def _update(self, state: BetaState, arm: int, reward: float) -> None:
        state.alpha[arm] += reward
        state.beta[arm] += 1.0 - reward
