"""Leviathan et al.'s expected tokens per verify step for i.i.d. per-token acceptance a and k drafts."""
from __future__ import annotations

import numpy as np


def expected_tokens(a, k):
    """(1 - a^(k+1)) / (1 - a); k + 1 at a = 1; 1 at k = 0. Scalars or arrays (broadcast)."""
    a = np.clip(np.asarray(a, dtype=np.float64), 0.0, 1.0)
    k = np.asarray(k, dtype=np.float64)
    near_one = a > 1.0 - 1e-12
    safe = np.where(near_one, 0.5, a)
    out = np.where(near_one, k + 1.0, (1.0 - safe ** (k + 1.0)) / (1.0 - safe))
    return float(out) if out.ndim == 0 else out
