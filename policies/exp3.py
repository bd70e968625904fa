"""EXP3 over drafters: exponential weights with importance-weighted rewards (adversarial bandit)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy


def exp3_probabilities(log_weights: np.ndarray, gamma: float) -> np.ndarray:
    """(1 - gamma) * softmax(log w) + gamma / K."""
    w = np.exp(log_weights - log_weights.max())
    return (1.0 - gamma) * w / w.sum() + gamma / log_weights.shape[0]


@dataclass
class EXP3State:
    log_weights: np.ndarray


class EXP3Policy(BanditPolicy):
    """EXP3 (Auer et al. 2002): sample from mixed exponential weights; update with reward / probability."""

    name = "exp3"
    description = "EXP3 over drafters (exponential weights, exploration gamma); BE reward by default."

    def __init__(self, drafters: Sequence[str], k: int = 3, gamma: float = 0.1, reward: str | None = None,
                 scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, reward=reward, scope=scope, seed=seed)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"policy {self.name!r}: gamma must be in (0, 1], got {gamma}")
        self.gamma = float(gamma)

    def _new_state(self) -> EXP3State:
        return EXP3State(np.zeros(self.num_arms))

    def _select(self, state: EXP3State) -> int:
        return int(self.rng.choice(self.num_arms, p=exp3_probabilities(state.log_weights, self.gamma)))

    def _update(self, state: EXP3State, arm: int, reward: float) -> None:
        p = exp3_probabilities(state.log_weights, self.gamma)[arm]
        state.log_weights[arm] += self.gamma * (reward / p) / self.num_arms
