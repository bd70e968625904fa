"""EXP3 over drafters: exponential weights with importance-weighted rewards (adversarial bandit)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy


def exp3_probabilities(log_weights: np.ndarray, gamma: float) -> np.ndarray:
    """(1 - gamma) * softmax(log w) + gamma / K, as plain loops (libm's exp, sums in arm order) so both paths run
    this one rule."""
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
    their total) passes it, as Generator.choice(arms, p=...) draws. Both paths call it."""
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
    """The played arm's log weight grows by gamma * (reward / its probability) / K (both paths call it)."""
    p = exp3_probabilities(log_weights, gamma)[arm]
    log_weights[arm] += gamma * (reward / p) / len(log_weights)


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
        return exp3_arm(state.log_weights, self.gamma, self.rng)

    def _update(self, state: EXP3State, arm: int, reward: float) -> None:
        exp3_update(state.log_weights, arm, reward, self.gamma)
