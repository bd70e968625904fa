"""Acceptance arithmetic: acc_len from per-position matches, TV distance, sampled acceptance.

acc_len[p] = 1 + (number of consecutive positions q >= p where the drafter's guess equals the
target's token), the convention of the reference traces (it may reach output_len - p + 1).
"""
from __future__ import annotations

import numpy as np


def acc_len_from_matches(match: np.ndarray) -> np.ndarray:
    """acc_len[p] = 1 + length of the run of True values starting at p."""
    match = np.asarray(match, dtype=bool)
    run = np.zeros(match.size + 1, dtype=np.int32)
    for p in range(match.size - 1, -1, -1):
        run[p] = run[p + 1] + 1 if match[p] else 0
    return (run[:-1] + 1).astype(np.int32)


def greedy_acc_len(draft_guess: np.ndarray, target_tokens: np.ndarray) -> np.ndarray:
    """Greedy verification: a draft token is accepted iff it equals the target's token."""
    draft_guess, target_tokens = np.asarray(draft_guess), np.asarray(target_tokens)
    if draft_guess.shape != target_tokens.shape:
        raise ValueError(f"draft guesses {draft_guess.shape} and target tokens {target_tokens.shape} differ in shape")
    return acc_len_from_matches(draft_guess == target_tokens)


def tv_distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Total-variation distance 0.5 * sum |p - q| over the last axis (probability vectors)."""
    return 0.5 * np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum(axis=-1)


def sampled_acc_len(tv: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Temperature > 0: each position accepts with probability 1 - tv (speculative sampling)."""
    tv = np.asarray(tv, dtype=np.float64)
    return acc_len_from_matches(rng.random(tv.size) < 1.0 - tv)
