"""UCB bandits over drafters: UCB1 (BE reward), MetaSD-UCB (BD reward), discounted and sliding-window UCB.

Index of arm i: mean_i + beta * sqrt(2 ln t / n_i), each arm played once first (MetaSD-UCB).
Discounted UCB weights round s by gamma^(t - s) (counts, sums and t alike); sliding-window UCB
keeps only the last `window` rounds. Both follow drift inside a long generation. The rules are
policies/bandit_rules.py's (ucb_arm_rule, ucb_update, sliding_update).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy
from policies.bandit_rules import B_SLIDING, B_UCB, BanditRule, BanditState


class UCBPolicy(BanditPolicy):
    """UCB1: argmax mean + beta * sqrt(2 ln t / n) with the block-efficiency reward."""

    name = "ucb"
    description = "UCB1 over drafters, block-efficiency reward (accepted / k); scope per request or shared."
    default_reward = "be"

    def __init__(self, drafters: Sequence[str], k: int = 3, beta: float = 1.0, reward: str | None = None,
                 scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, reward=reward, scope=scope, seed=seed)
        if beta < 0:
            raise ValueError(f"policy {self.name!r}: beta must be >= 0, got {beta}")
        self.beta = float(beta)
        self.rule = BanditRule(B_UCB, beta=self.beta)


class MetaSDUCBPolicy(UCBPolicy):
    """MetaSD-UCB: UCB with the dense block-divergence reward mean(1 - TV)."""

    name = "metasd-ucb"
    description = "MetaSD-UCB: UCB over drafters with the block-divergence reward mean(1 - TV); needs tv."
    default_reward = "bd"


class DiscountedUCBPolicy(UCBPolicy):
    """Discounted UCB: counts and sums decay by gamma each round, so old evidence fades."""

    name = "discounted-ucb"
    description = "Discounted UCB (statistics weighted gamma^(t-s)); for drift inside a request. BD reward by default."
    default_reward = "bd"

    def __init__(self, drafters: Sequence[str], k: int = 3, beta: float = 1.0, gamma: float = 0.95,
                 reward: str | None = None, scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, beta=beta, reward=reward, scope=scope, seed=seed)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"policy {self.name!r}: gamma must be in (0, 1], got {gamma}")
        self.gamma = float(gamma)
        self.rule = BanditRule(B_UCB, beta=self.beta, discount=self.gamma)


class SlidingWindowUCBPolicy(UCBPolicy):
    """Sliding-window UCB: statistics over the last `window` rounds only."""

    name = "sliding-window-ucb"
    description = "Sliding-window UCB (last `window` rounds); for drift inside a request. BD reward by default."
    default_reward = "bd"

    def __init__(self, drafters: Sequence[str], k: int = 3, beta: float = 1.0, window: int = 50,
                 reward: str | None = None, scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, beta=beta, reward=reward, scope=scope, seed=seed)
        if int(window) < 1:
            raise ValueError(f"policy {self.name!r}: window must be >= 1, got {window}")
        self.window = int(window)
        self.rule = BanditRule(B_SLIDING, beta=self.beta)

    def new_state(self) -> BanditState:
        return BanditState(np.zeros(self.num_arms), np.zeros(self.num_arms),
                           np.zeros((1, self.window), dtype=np.int64), np.zeros((1, self.window)),
                           np.zeros(1, dtype=np.int64))
