"""UCB bandits over drafters: UCB1 (BE reward), MetaSD-UCB (BD reward), discounted and sliding-window UCB.

Index of arm i: mean_i + beta * sqrt(2 ln t / n_i), each arm played once first (MetaSD-UCB).
Discounted UCB weights round s by gamma^(t - s) (counts, sums and t alike); sliding-window UCB
keeps only the last `window` rounds. Both follow drift inside a long generation.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy, first_unplayed


def ucb_index(means: np.ndarray, counts: np.ndarray, t, beta: float) -> np.ndarray:
    """mean + beta * sqrt(2 ln t / n) per arm (counts must be > 0); rows of a (states x arms) array with t (states, 1)."""
    return means + beta * np.sqrt(2.0 * np.log(np.maximum(t, 1.0)) / counts)


@dataclass
class UCBState:
    """Possibly discounted play counts and reward sums per arm, and the (discounted) round count."""

    counts: np.ndarray
    sums: np.ndarray
    history: deque = field(default_factory=deque)  # (arm, reward) for the sliding window


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

    def _new_state(self) -> UCBState:
        return UCBState(np.zeros(self.num_arms), np.zeros(self.num_arms))

    def _select(self, state: UCBState) -> int:
        arm = first_unplayed(state.counts)
        if arm is not None:
            return arm
        t = float(state.counts.sum())
        return int(np.argmax(ucb_index(state.sums / state.counts, state.counts, t, self.beta)))

    def _update(self, state: UCBState, arm: int, reward: float) -> None:
        state.counts[arm] += 1.0
        state.sums[arm] += reward

    def _select_batch(self, states: list) -> np.ndarray:
        """`_select` over a step's states as one (requests x arms) pass; the same floats as the scalar path."""
        n = len(states)
        if n == 0 or self.scope == "shared":  # one state, unchanged between the step's choices
            return np.full(n, self._select(states[0]) if n else 0, dtype=np.int64)
        counts = np.array([s.counts for s in states])
        sums = np.array([s.sums for s in states])
        unplayed = counts <= 0
        with np.errstate(divide="ignore", invalid="ignore"):  # unplayed rows are overridden below
            index = ucb_index(sums / counts, counts, counts.sum(axis=1)[:, None], self.beta)
        arms = np.argmax(index, axis=1)
        first = unplayed.any(axis=1)
        if first.any():
            arms = np.where(first, np.argmax(unplayed, axis=1), arms)
        return arms.astype(np.int64)


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

    def _update(self, state: UCBState, arm: int, reward: float) -> None:
        state.counts *= self.gamma
        state.sums *= self.gamma
        state.counts[arm] += 1.0
        state.sums[arm] += reward


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

    def _update(self, state: UCBState, arm: int, reward: float) -> None:
        state.history.append((arm, reward))
        state.counts[arm] += 1.0
        state.sums[arm] += reward
        if len(state.history) > self.window:
            old_arm, old_r = state.history.popleft()
            state.counts[old_arm] -= 1.0
            state.sums[old_arm] -= old_r
