"""PSD's sub-batch sides (MineDraft's two-batch scheduler): the side a request joins when it is admitted
(docs/architecture.md)."""
from __future__ import annotations


def join_side(side, running, n, verify_side):
    """The side (0 or 1) a request admitted as running[n - 1] joins: the side drafted next step (`verify_side`, the
    one verified now) unless it has more members among running[:n] than the other. `side[i]` is -1 for a request on
    no side yet (the new one itself)."""
    c0 = 0
    c1 = 0
    for q in range(n):
        s = side[running[q]]
        if s == 0:
            c0 += 1
        elif s == 1:
            c1 += 1
    if verify_side == 0:
        return 0 if c0 <= c1 else 1
    return 1 if c1 <= c0 else 0
