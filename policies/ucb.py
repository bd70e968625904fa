"""UCB bandits over drafters: UCB1 (BE reward), MetaSD-UCB (BD reward), discounted and sliding-window UCB.

Index of arm i: mean_i + beta * sqrt(2 ln t / n_i), each arm played once first (MetaSD-UCB).
Discounted UCB weights round s by gamma^(t - s) (counts, sums and t alike); sliding-window UCB
keeps only the last `window` rounds. Both follow drift inside a long generation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy


def ucb_arm_rule(counts: np.ndarray, sums: np.ndarray, beta: float) -> int:
    """The first arm never played, else argmax over arms of sums / counts + beta * sqrt(2 ln max(t, 1) / counts), t =
    the plays, the first on ties. Plain Python over two arrays (libm's log and sqrt), so the policy calls it in Python
    and the compiled engine compiles it (one rule)."""
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
    count + 1 and sum + reward. Plain Python, so the policy calls it in Python and the compiled engine compiles it."""
    if discount != 1.0:
        for a in range(len(counts)):
            counts[a] *= discount
            sums[a] *= discount
    counts[arm] += 1.0
    sums[arm] += reward


def sliding_update(counts: np.ndarray, sums: np.ndarray, ring_arm: np.ndarray, ring_reward: np.ndarray, seen: int,
                   arm: int, reward: float) -> int:
    """Sliding-window UCB's update over its last len(ring_arm) rounds (`seen` so far, held in a ring): the round is
    added, then, once the ring is full, its oldest round leaves. Returns the rounds seen. Both paths call it."""
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


@dataclass
class UCBState:
    """Possibly discounted play counts and reward sums per arm; sliding-window UCB's ring of its last rounds."""

    counts: np.ndarray
    sums: np.ndarray
    row: int = -1  # its row in the policy's StateRows (counts and sums are views of it); -1: arrays of its own
    ring_arm: np.ndarray | None = None  # sliding window: the arm and reward of round s at s % window
    ring_reward: np.ndarray | None = None
    seen: int = 0  # sliding window: rounds seen


class StateRows:
    """Every live UCBState's counts and sums as rows of two (rows x arms) arrays, so a step reads and updates its
    batch's states in one indexing pass; a state's own arrays are views of its row (re-pointed when the arrays grow)."""

    def __init__(self, arms: int, rows: int = 64):
        self.counts, self.sums = np.zeros((rows, arms)), np.zeros((rows, arms))
        self.free = list(range(rows - 1, -1, -1))
        self.live: dict[int, UCBState] = {}

    def new(self) -> UCBState:
        if not self.free:
            self._grow()
        row = self.free.pop()
        self.counts[row] = 0.0
        self.sums[row] = 0.0
        state = self.live[row] = UCBState(self.counts[row], self.sums[row], row=row)
        return state

    def release(self, state: UCBState) -> None:
        if self.live.get(state.row) is state:
            del self.live[state.row]
            self.free.append(state.row)

    def _grow(self) -> None:
        n, arms = self.counts.shape
        counts, sums = np.zeros((2 * n, arms)), np.zeros((2 * n, arms))
        counts[:n], sums[:n] = self.counts, self.sums
        self.counts, self.sums = counts, sums
        for row, state in self.live.items():
            state.counts, state.sums = counts[row], sums[row]
        self.free.extend(range(2 * n - 1, n - 1, -1))


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
        self._rows = StateRows(self.num_arms)
        # the one-pass paths stand for UCB's own _select and for an _update whose class also gives its _add_rows;
        # a subclass that redefines either alone keeps the per-state calls
        mro = type(self).__mro__
        self._rows_select = next(c for c in mro if "_select" in c.__dict__) is UCBPolicy
        self._rows_update = "_add_rows" in next(c for c in mro if "_update" in c.__dict__).__dict__

    def _new_state(self) -> UCBState:
        return self._rows.new()

    def start_request(self, request_id: str) -> None:
        if self.scope == "request":
            old = self._states.get(request_id)
            if old is not None:
                self._rows.release(old)
        super().start_request(request_id)

    def finish_request(self, request_id: str) -> None:
        if self.scope == "request":
            old = self._states.get(request_id)
            if old is not None:
                self._rows.release(old)
        super().finish_request(request_id)

    def _select(self, state: UCBState) -> int:
        return ucb_arm_rule(state.counts, state.sums, self.beta)

    def _update(self, state: UCBState, arm: int, reward: float) -> None:
        ucb_update(state.counts, state.sums, arm, reward, 1.0)

    def _select_batch(self, states: list) -> np.ndarray:
        """`_select` over a step's states (a shared state once: it does not change between the step's choices)."""
        n = len(states)
        if not self._rows_select:
            return super()._select_batch(states)
        if n == 0 or self.scope == "shared":
            return np.full(n, self._select(states[0]) if n else 0, dtype=np.int64)
        return np.fromiter((ucb_arm_rule(s.counts, s.sums, self.beta) for s in states), dtype=np.int64, count=n)

    def _rows_of(self, states: list) -> np.ndarray | None:
        """Rows of `states` in the StateRows, or None when one has arrays of its own."""
        rows = np.fromiter([s.row for s in states], dtype=np.int64, count=len(states))
        return None if len(rows) and rows.min() < 0 else rows

    def _update_batch(self, states: list, arms: np.ndarray, rewards) -> None:
        """The step's updates as one indexed add; each request's state appears once, so the order is immaterial."""
        rows = self._rows_of(states) if self.scope == "request" and self._rows_update else None
        if rows is None or len(set(rows.tolist())) != len(rows):  # a state twice: its updates in order
            return super()._update_batch(states, arms, rewards)
        self._add_rows(rows, arms, np.asarray(rewards, dtype=np.float64))

    def _add_rows(self, rows: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        """`_update` over distinct rows at once."""
        self._rows.counts[rows, arms] += 1.0
        self._rows.sums[rows, arms] += rewards


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
        ucb_update(state.counts, state.sums, arm, reward, self.gamma)


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

    def _new_state(self) -> UCBState:
        state = super()._new_state()
        state.ring_arm, state.ring_reward = np.zeros(self.window, dtype=np.int64), np.zeros(self.window)
        state.seen = 0
        return state

    def _update(self, state: UCBState, arm: int, reward: float) -> None:
        state.seen = sliding_update(state.counts, state.sums, state.ring_arm, state.ring_reward, state.seen, arm,
                                    reward)
