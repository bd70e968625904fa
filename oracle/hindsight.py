"""Best fixed drafter in hindsight, per request: the one drafter (at a fixed k) that finishes in least time.

Time of a request with drafter d = greedy replay rounds (acc_len) * (1 + cost ratio of d) in
target steps, or, when the traces carry tv and `expected: true`, output_len / expected tokens per
round (the sampled-verification version). This is the reference the bandits' regret is measured against.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from policies.base import Choice, RequestView
from oracle.ground_truth import GroundTruthPolicy
from traces.bundle import DrafterTrace, RequestTrace
from traces.walk import walk_positions


def greedy_rounds(trace: DrafterTrace, k: int, budget: int | None = None) -> int:
    """Decode steps of a fixed-k walk (the replay rule) until `budget` tokens exist (default: the whole output)."""
    starts = walk_positions(trace.acc_len, k, trace.proposal_len)
    return int(starts.shape[0]) if budget is None else int(np.count_nonzero(starts < int(budget)))


def expected_emitted(trace: DrafterTrace, k: int) -> np.ndarray:
    """Per position, E[tokens emitted] under sampled verification: 1 + sum_j prod_{i<=j} (1 - tv[p+i])."""
    if trace.tv is None:
        raise ValueError("expected_emitted needs tv (per-position TV distances); this trace has none")
    q = 1.0 - trace.tv.astype(np.float64)
    n = q.shape[0]
    out = np.ones(n)
    run = np.ones(n)
    for j in range(k):
        shifted = np.zeros(n)
        shifted[: n - j] = q[j:]
        run = run * shifted
        out += run
    return out


def best_fixed_drafter(request: RequestTrace, drafters: Sequence[str], k: int, expected: bool = False,
                       cost_ratios: Mapping[str, float] | None = None) -> str:
    """The drafter with the least (replayed or expected) time for this whole request; ties: first listed."""
    costs = cost_ratios or {}
    times = []
    for d in drafters:
        t = request.drafters[d]
        rounds = (request.output_len / float(expected_emitted(t, k).mean())) if expected else greedy_rounds(t, k)
        times.append(rounds * (1.0 + float(costs.get(d, 0.0))))
    return drafters[int(np.argmin(times))]


class BestFixedInHindsightPolicy(GroundTruthPolicy):
    """Per request, always the drafter that is best for that request as a whole (fixed k)."""

    name = "oracle-best-fixed"
    description = "ORACLE: per request, the single drafter that would finish it fastest (fixed k), in hindsight."

    def __init__(self, drafters: Sequence[str], k: int = 3, expected: bool = False,
                 cost_ratios: Mapping[str, float] | None = None):
        super().__init__()
        if isinstance(drafters, str) or not drafters:
            raise ValueError(f"policy {self.name!r}: drafters must be a non-empty list, got {drafters!r}")
        if int(k) < 1:
            raise ValueError(f"policy {self.name!r}: k must be >= 1, got {k}")
        self.drafters, self.k, self.expected = tuple(drafters), int(k), bool(expected)
        self.cost_ratios = dict(cost_ratios or {})
        self._best: dict[str, str] = {}

    def drafters_used(self) -> tuple[str, ...]:
        return self.drafters

    def max_draft_tokens(self) -> int:
        return self.k

    by_position = True  # one drafter per request, from its trace alone (position_choices)

    def bind_ground_truth(self, traces: Mapping[str, Any]) -> None:
        super().bind_ground_truth(traces)
        for rid, r in traces.items():
            self._best[rid] = best_fixed_drafter(r, self.drafters, self.k, self.expected, self.cost_ratios)

    def position_choices(self, request_id: str) -> tuple[np.ndarray, np.ndarray]:
        """The request's best drafter (its index in `drafters`) at k, at every output position."""
        self.trace_of(request_id)  # a clear error when the request is not bound
        n = self.drafter_trace(request_id, self._best[request_id]).acc_len.shape[0]
        return (np.full(n, self.drafters.index(self._best[request_id]), dtype=np.int64),
                np.full(n, self.k, dtype=np.int64))

    def choose(self, view: RequestView) -> Choice:
        self.trace_of(view.request_id)
        return self.tabulated(view)
