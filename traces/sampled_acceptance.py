"""Sampled verification and the bandit rewards computed from one verified proposal.

With temperature > 0, a drafted token at position j is accepted with probability 1 - TV(p_j, q_j)
(Leviathan et al.); a step accepts the leading run of successes, capped by k. Greedy replay is
`traces.acceptance.emitted_tokens`. Rewards: block efficiency `r_BE = accepted / N` (sparse) and
MetaSD's block divergence `r_BD = mean_j (1 - TV_j)` over all N drafted positions (dense; needs tv).
"""
from __future__ import annotations

import math

import numpy as np

from traces.errors import shorten

REWARDS = ("be", "bd")


class MissingTVError(ValueError):
    """The BD reward was asked for on a trace that has no per-position TV distances."""


def tv_windows(tv: np.ndarray, positions: np.ndarray, width: int, starts: np.ndarray | None = None,
               ends: np.ndarray | None = None) -> np.ndarray:
    """TV at output positions p .. p + width - 1 for each p in `positions`, NaN past the end of its trace.

    `tv` is one trace, or several concatenated: row i then reads the trace that occupies
    tv[starts[i]:ends[i]] (the simulator's flattened table). Shape (len(positions), width).
    """
    tv = np.asarray(tv)
    positions = np.asarray(positions, dtype=np.int64)
    base = np.zeros_like(positions) if starts is None else np.asarray(starts, dtype=np.int64)
    stop = np.full_like(positions, tv.shape[0]) if ends is None else np.asarray(ends, dtype=np.int64)
    return tv_window_rows(tv, base, positions, stop, width, np.empty((positions.shape[0], width)))


def tv_window_rows(tv, starts, positions, ends, width, out):
    """out[j, c] = tv[starts[j] + positions[j] + c] while that index is before ends[j], NaN past it: row j's TV
    window (tv_windows). Plain loops over arrays: the compiled engine runs it too."""
    for j in range(positions.shape[0]):
        for c in range(width):
            f = starts[j] + positions[j] + c
            out[j, c] = tv[f] if f < ends[j] else np.nan
    return out


def leading_successes(u, tv, k, out):
    """out[j]: the leading run of successes u[j, c] < 1 - tv[j, c] (a NaN tv, no token there, is never one),
    capped by k[j]: a sampled check's accepted drafts. Plain loops over arrays: the compiled engine runs it too."""
    for j in range(u.shape[0]):
        a = 0
        while a < k[j] and u[j, a] < 1.0 - tv[j, a]:
            a += 1
        out[j] = a
    return out


def sample_accepted(tv: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Accepted drafts per row: the leading run of Bernoulli(1 - tv) successes, capped by k.

    `tv` is (n, kmax) with NaN past the end of a request (no token to draft there); `k` is (n,) with
    0 <= k <= kmax. One uniform draw per cell is taken from `rng` (rng.random((n, kmax))), so results depend only
    on the seed.
    """
    tv = np.atleast_2d(np.asarray(tv, dtype=np.float64))
    k = np.asarray(k, dtype=np.int64).reshape(-1)
    n, kmax = tv.shape
    if k.shape[0] != n:
        raise ValueError(f"sample_accepted: tv has {n} rows but k has {k.shape[0]} values")
    if n and (k.min() < 0 or k.max() > kmax):
        raise ValueError(f"sample_accepted: k must lie in [0, {kmax}] (tv columns), got {k.min()}..{k.max()}")
    finite = tv[np.isfinite(tv)]
    if finite.size and (finite.min() < 0 or finite.max() > 1):
        raise ValueError("sample_accepted: tv must lie in [0, 1]")
    return leading_successes(rng.random((n, kmax)), tv, k, np.zeros(n, dtype=np.int64))


def reward_be(accepted, proposed):
    """Block efficiency accepted / N (0 when nothing was proposed); scalars or arrays."""
    accepted = np.asarray(accepted, dtype=np.float64)
    proposed = np.asarray(proposed, dtype=np.float64)
    out = np.divide(accepted, proposed, out=np.zeros(np.broadcast(accepted, proposed).shape), where=proposed > 0)
    return float(out) if out.ndim == 0 else out


def reward_bd(tv) -> float:
    """Block divergence mean_j (1 - TV_j) over the drafted positions (block_divergence); refuses when tv is
    unknown."""
    if tv is None:
        raise MissingTVError(
            "the BD (block divergence) reward needs per-position TV distances (`tv`), and this trace "
            "has none; use reward: be (block efficiency = accepted / proposed) instead")
    tv = np.asarray(tv, dtype=np.float64).reshape(-1)
    return float(block_divergence(tv, 0, 0, tv.shape[0], tv.shape[0]))


def block_divergence(tv, start, position, end, width):
    """MetaSD's block-divergence reward of one proposal: the mean of 1 - TV over output positions position ..
    position + width - 1 of the trace at tv[start:end], those before its end and not NaN, summed in order; 0.0 when
    there are none. Plain loops over an array: the compiled engine runs it too."""
    total = 0.0
    n = 0
    for c in range(width):
        f = start + position + c
        if f < end and not math.isnan(tv[f]):
            total += 1.0 - tv[f]
            n += 1
    return total / n if n > 0 else 0.0


def check_reward(reward: str, has_tv: bool, where: str = "reward") -> None:
    """Fail early (before a run) when `reward` is unknown or is BD on a trace without tv."""
    if reward not in REWARDS:
        raise ValueError(f"{where}: expected one of {REWARDS}, got {shorten(reward)}")
    if reward == "bd" and not has_tv:
        reward_bd(None)
