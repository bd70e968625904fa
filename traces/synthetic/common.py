"""Pieces the acceptance generators share: pooled arrays of one drafter, runs of matches, tokens per step."""
from __future__ import annotations

import numpy as np

from traces.bundle import DrafterTrace, TraceBundle
from traces.walk import UNCAPPED, walk_many


def drafter_traces(bundle: TraceBundle, drafter: str) -> list[DrafterTrace]:
    """Every request's trace for `drafter`; ValueError naming the drafters when it is absent."""
    if drafter not in bundle.meta.drafters:
        raise ValueError(f"drafter {drafter!r} is not in the bundle (has {', '.join(bundle.meta.drafters)})")
    return [r.drafters[drafter] for r in bundle.requests]


def pooled(traces: list[DrafterTrace], attr: str) -> np.ndarray | None:
    """One array of `attr` over all requests, or None when any request lacks it."""
    parts = [getattr(t, attr) for t in traces]
    if any(p is None for p in parts):
        return None
    return np.concatenate(parts)


def tokens_per_step(traces: list[DrafterTrace], depth: int) -> tuple[np.ndarray, float]:
    """Mean tokens per step at k = 0..depth (k = 0 gives 1) and uncapped, pooled over requests.

    Counts each step's verified tokens (1 + accepted drafts) before the end-of-output cut, so that short
    requests do not bias the fits downwards at large k.
    """
    t = np.ones(depth + 1)
    for k in range(1, depth + 1):
        t[k] = walk_many(traces, k).verified_tokens_per_step
    return t, walk_many(traces, UNCAPPED).verified_tokens_per_step


def runs_from(matches: np.ndarray) -> np.ndarray:
    """run[p] = number of consecutive True values starting at p (0 where matches[p] is False)."""
    m = np.asarray(matches, dtype=bool)
    n = m.shape[0]
    idx = np.arange(n)
    next_miss = np.where(~m, idx, n)
    next_miss = np.minimum.accumulate(next_miss[::-1])[::-1]
    return next_miss - idx
