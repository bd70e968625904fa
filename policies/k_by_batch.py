"""k chosen by the current batch size from a table of ranges (like vLLM's per-batch-size k)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from policies.base import NO_DRAFT, BatchView, Choice, Policy, RequestView


def parse_ranges(ranges: Sequence[Any], where: str) -> list[tuple[int, int | None, int]]:
    """[{min_batch, max_batch (null = no limit), k}, ...] -> sorted (lo, hi, k); gaps and overlaps are errors."""
    if not isinstance(ranges, (list, tuple)) or not ranges:
        raise ValueError(f"{where}: expected a non-empty list of {{min_batch, max_batch, k}}, got {ranges!r}")
    out = []
    for i, r in enumerate(ranges):
        if not isinstance(r, dict) or set(r) - {"min_batch", "max_batch", "k"} or "k" not in r:
            raise ValueError(f"{where}[{i}]: expected a mapping with keys min_batch, max_batch, k; got {r!r}")
        lo = int(r.get("min_batch", 1))
        hi = r.get("max_batch")
        hi = None if hi is None else int(hi)
        k = int(r["k"])
        if lo < 1 or (hi is not None and hi < lo) or k < 0:
            raise ValueError(f"{where}[{i}]: need 1 <= min_batch <= max_batch and k >= 0, got {r!r}")
        out.append((lo, hi, k))
    out.sort()
    if out[0][0] != 1:
        raise ValueError(f"{where}: the ranges must start at batch size 1, first starts at {out[0][0]}")
    for (lo1, hi1, _), (lo2, _, _) in zip(out, out[1:]):
        if hi1 is None or hi1 + 1 != lo2:
            raise ValueError(f"{where}: ranges must be contiguous without overlap; "
                             f"[{lo1}, {hi1}] is followed by a range starting at {lo2}")
    return out


class KByBatchPolicy(Policy):
    """One drafter; k looked up from the batch size (k = 0 in a range means plain decoding there)."""

    name = "k-by-batch"
    description = "One drafter, k from a table of batch-size ranges [{min_batch, max_batch, k}]."
    learns = False  # the engine may skip its feedback

    def __init__(self, drafter: str, ranges: Sequence[dict[str, Any]]):
        self.drafter = str(drafter)
        self.ranges = parse_ranges(ranges, f"policy {self.name!r}: ranges")

    def drafters_used(self) -> tuple[str, ...]:
        return (self.drafter,)

    def max_draft_tokens(self) -> int:
        return max(k for _, _, k in self.ranges)

    def k_for(self, batch_size: int) -> int:
        """The k of the range holding `batch_size` (beyond a bounded last range: an error)."""
        for lo, hi, k in self.ranges:
            if lo <= batch_size and (hi is None or batch_size <= hi):
                return k
        raise ValueError(f"policy {self.name!r}: no range covers batch size {batch_size}; "
                         f"ranges end at {self.ranges[-1][1]} (use max_batch: null for the last one)")

    def choose(self, view: RequestView) -> Choice:
        k = self.k_for(view.batch_size)
        return Choice(self.drafter if k > 0 else None, k)

    def choose_batch(self, view: BatchView) -> tuple[np.ndarray, np.ndarray]:
        n = view.batch_size
        k = self.k_for(n)
        if k == 0:
            return np.full(n, NO_DRAFT, dtype=np.int64), np.zeros(n, dtype=np.int64)
        if self.drafter not in view.drafters:
            raise ValueError(f"policy {self.name!r}: drafter {self.drafter!r} is not in the trace's drafters "
                             f"{list(view.drafters)}")
        return np.full(n, view.drafters.index(self.drafter), dtype=np.int64), np.full(n, k, dtype=np.int64)
