"""Leviathan et al.'s expectation for i.i.d. per-token acceptance a and k drafts.

Tokens per verify step: (1 - a^(k+1)) / (1 - a) = sum_{j=0..k} a^j (k + 1 at a = 1, 1 at k = 0).
Wall-time gain over plain decoding when a draft step costs c target steps: that / (k c + 1).
`expected_tokens` evaluates it over arrays (numpy; analysis, bounds, synthetic traces); `leviathan_tokens` for one
(a, k) with libm's functions, the form a policy's rule takes (the compiled engine compiles the same function, and
numpy's vectorised expm1 / log1p may differ from libm's in the last bit).
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
    """(1 - a^(k+1)) / (1 - a) tokens per verify step; scalars or arrays (broadcast).

    Evaluated as -expm1((k+1) log a) / (1 - a), which keeps full precision as a approaches 1.
    """
    a = np.asarray(a, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    _check(a, k)
    one_minus = 1.0 - a
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(one_minus > 0, -np.expm1((k + 1.0) * np.log1p(-one_minus)) / one_minus, k + 1.0)
    out = np.where(k == 0, 1.0, out)
    return float(out) if out.ndim == 0 else out


def leviathan_tokens(a: float, k: int) -> float:
    """expected_tokens for one acceptance a in [0, 1] and k >= 0, as -expm1((k+1) log1p(a - 1)) / (1 - a) by libm;
    plain Python that compiles (policies' rules)."""
    one_minus = 1.0 - a
    if k == 0 or one_minus >= 1.0:  # log1p(-1) is -inf (numpy) or an error (math): 1 token either way
        return 1.0
    if one_minus > 0.0:
        return -math.expm1((k + 1.0) * math.log1p(-one_minus)) / one_minus
    return k + 1.0


def wall_time_gain(a, k, c):
    """Expected speed-up over plain decoding: expected_tokens(a, k) / (k c + 1), c = draft / target step time."""
    c = np.asarray(c, dtype=np.float64)
    if np.any(~(c >= 0)):
        raise ValueError(f"draft cost ratio c must be >= 0, got {shorten(c.tolist())}")
    out = np.asarray(expected_tokens(a, k)) / (np.asarray(k, dtype=np.float64) * c + 1.0)
    return float(out) if out.ndim == 0 else out
