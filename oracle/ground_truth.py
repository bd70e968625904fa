"""Base for oracles: policies that read the true acceptance traces (never allowed in live mode)."""
from __future__ import annotations

from typing import Any, Mapping

from policies.base import Policy
from traces.bundle import DrafterTrace, RequestTrace


class GroundTruthPolicy(Policy):
    """Stores request id -> RequestTrace from `bind_ground_truth`; refuses to run unbound."""

    reads_ground_truth = True
    learns = False  # the engine may skip its feedback

    def __init__(self) -> None:
        self._traces: dict[str, RequestTrace] = {}

    def bind_ground_truth(self, traces: Mapping[str, Any]) -> None:
        self._traces.update(traces)

    def trace_of(self, request_id: str) -> RequestTrace:
        t = self._traces.get(request_id)
        if t is None:
            raise RuntimeError(f"oracle {self.name!r} has no ground truth for request {request_id!r}; "
                               f"the runner must call bind_ground_truth first")
        return t

    def drafter_trace(self, request_id: str, drafter: str) -> DrafterTrace:
        t = self.trace_of(request_id).drafters.get(drafter)
        if t is None:
            raise ValueError(f"oracle {self.name!r}: drafter {drafter!r} is not in the trace of request "
                             f"{request_id!r} (has {sorted(self.trace_of(request_id).drafters)})")
        return t


def oracle_k(trace: DrafterTrace, position: int, k_max: int | None = None) -> int:
    """Tokens that will all be accepted from `position`: acc_len[p] - 1, capped by proposal_len, k_max
    and the output left (tokens 0..p-1 exist, so at most len - 1 - p drafts fit in the output)."""
    n = trace.acc_len.shape[0]
    if not 0 <= position < n:
        raise IndexError(f"position {position} is outside the trace (length {n})")
    k = min(int(trace.acc_len[position]) - 1, n - 1 - position)  # no drafts past the last output token
    if trace.proposal_len is not None:
        k = min(k, int(trace.proposal_len[position]))
    if k_max is not None:
        k = min(k, int(k_max))
    return max(k, 0)
