"""Percentiles of a large array without copying it: numpy's `linear` percentiles, equal to np.percentile's bit for bit.

np.percentile partitions a copy of its input; for a run's ITL array (tens of millions of values) that copy costs
more than the partition. Here each percentile's two order statistics are found among the few values inside a
window bracketing them (read from a strided sample), counted and gathered chunk by chunk, so nothing of the
array's size is allocated. When a window misses its ranks (the sample misled), or the array is small, the
plain np.percentile of a copy answers. The interpolation between the two order statistics is numpy's `linear`
method (Hyndman & Fan's 7th), as numpy evaluates it; tests/simulator/measure/test_quantiles.py checks the result
against np.percentile.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

COPY_BELOW = 1 << 20  # smaller arrays: np.percentile of a copy (the copy is cheap)
SAMPLE_SIZE = 1 << 16  # values read (strided) to place the windows
WINDOW_SAMPLES = 1 << 10  # sample values on each side of a rank's sample position: the window's half-width
CHUNK = 1 << 17  # values compared at a time (temporaries of this size only, in cache)


def percentiles(values: np.ndarray, pcts: Sequence[float], *, copy_below: int = COPY_BELOW,
                sample_size: int = SAMPLE_SIZE, window_samples: int = WINDOW_SAMPLES) -> np.ndarray:
    """np.percentile(values, pcts) (method `linear`) of a 1-D array of finite floats, which is left as it is."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1:
        raise ValueError(f"percentiles: expected a 1-D array, got shape {v.shape}")
    if v.size == 0:
        raise ValueError("percentiles: no values")
    n = v.size
    if n < copy_below:
        return _by_copy(v, pcts)
    q = np.true_divide(np.asarray(pcts, dtype=float), 100)
    virtual = (n - 1) * q  # the `linear` method's position of each percentile in the sorted values
    prev = np.floor(virtual)
    prev_i, next_i = prev.astype(np.intp), (prev + 1).astype(np.intp)
    top = virtual >= n - 1  # at or past the largest value: both neighbours are it (index -1), as numpy takes them
    prev_i[top] = next_i[top] = -1
    gamma = virtual - prev_i
    got = _order_statistics(v, np.unique(np.concatenate([prev_i, next_i]) % n), sample_size, window_samples)
    if got is None:
        return _by_copy(v, pcts)
    a = np.array([got[i % n] for i in prev_i.tolist()])
    b = np.array([got[i % n] for i in next_i.tolist()])
    diff = b - a
    out = a + diff * gamma
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), out)


def _by_copy(v: np.ndarray, pcts: Sequence[float]) -> np.ndarray:
    """The plain way: np.percentile partitions a copy."""
    return np.percentile(v, pcts)


def _order_statistics(v: np.ndarray, ranks: np.ndarray, sample_size: int,
                      window_samples: int) -> dict[int, float] | None:
    """{rank: the rank-th smallest value of v} for each rank, or None when a window misses its rank."""
    n = v.size
    step = max(1, n // sample_size)
    sample = np.sort(v[::step])
    m = sample.size
    spans = []  # (low, high) per rank: the sample values around its position; open-ended at the sample's ends
    for r in ranks.tolist():
        pos = r * (m - 1) // max(n - 1, 1)
        lo_i, hi_i = pos - window_samples, pos + window_samples
        spans.append((sample[lo_i] if lo_i > 0 else -np.inf, sample[hi_i] if hi_i < m - 1 else np.inf))
    windows: list[list] = []  # overlapping spans merged: [low, high, ranks]
    for (lo, hi), r in sorted(zip(spans, ranks.tolist())):
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], hi)
            windows[-1][2].append(r)
        else:
            windows.append([lo, hi, [r]])
    below = [0] * len(windows)
    inside: list[list[np.ndarray]] = [[] for _ in windows]
    for start in range(0, n, CHUNK):
        chunk = v[start:start + CHUNK]
        for j, (lo, hi, _) in enumerate(windows):
            less = chunk < lo
            below[j] += int(np.count_nonzero(less))
            inside[j].append(chunk[~less & (chunk <= hi)])
    out: dict[int, float] = {}
    for (_, _, rs), b, parts in zip(windows, below, inside):
        cand = np.concatenate(parts)
        ks = [r - b for r in rs]
        if not all(0 <= k < cand.size for k in ks):
            return None
        cand.partition(ks)
        out.update({r: float(cand[k]) for r, k in zip(rs, ks)})
    return out
