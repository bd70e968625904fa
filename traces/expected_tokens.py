"""Leviathan et al.'s expectation for i.i.d. per-token acceptance a and k drafts.

Tokens per verify step: (1 - a^(k+1)) / (1 - a) = sum_{j=0..k} a^j (k + 1 at a = 1, 1 at k = 0).
Wall-time gain over plain decoding when a draft step costs c target steps: that / (k c + 1).
`leviathan_tokens` evaluates it for one (a, k) with libm's functions (policies' rules call it, and the compiled engine
compiles it); `expected_tokens` checks its inputs and applies it over arrays (analysis, bounds, synthetic traces).
One evaluation: numpy's vectorised expm1 / log1p differ from libm's in the last bit on some machines.
"""
from __future__ import annotations

import math

import numpy as np

from traces.errors import shorten


def _check(a: np.ndarray, k: np.ndarray) -> None:
    if np.any(~(a >= 0) | ~(a <= 1)):
        raise ValueError(f"acceptance must be in [0, 1], got {shorten(a.tolist())}")
    if np.any(~(k >= 0)):
        raise ValueError(f"k must be >= 0, got {shorten(k.tolist())}")


def expected_tokens(a, k):
    """(1 - a^(k+1)) / (1 - a) tokens per verify step; scalars or arrays (broadcast): `leviathan_tokens` at each
    element, after checking the inputs."""
    a = np.asarray(a, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    _check(a, k)
    out = _each(a, k)
    return float(out) if np.ndim(out) == 0 else out


def leviathan_tokens(a: float, k: int) -> float:
    """expected_tokens for one acceptance a in [0, 1] and k >= 0, as -expm1((k+1) log1p(a - 1)) / (1 - a) by libm;
    plain Python that compiles (policies' rules)."""
    one_minus = 1.0 - a
    if k == 0 or one_minus >= 1.0:  # log1p(-1) is -inf (numpy) or an error (math): 1 token either way
        return 1.0
    if one_minus > 0.0:
        return -math.expm1((k + 1.0) * math.log1p(-one_minus)) / one_minus
    return k + 1.0


_each = np.vectorize(leviathan_tokens, otypes=[np.float64])  # element by element, broadcast


def wall_time_gain(a, k, c):
    """Expected speed-up over plain decoding: expected_tokens(a, k) / (k c + 1), c = draft / target step time."""
    c = np.asarray(c, dtype=np.float64)
    if np.any(~(c >= 0)):
        raise ValueError(f"draft cost ratio c must be >= 0, got {shorten(c.tolist())}")
    out = np.asarray(expected_tokens(a, k)) / (np.asarray(k, dtype=np.float64) * c + 1.0)
    return float(out) if out.ndim == 0 else out
