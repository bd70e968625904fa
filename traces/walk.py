"""Walks over one drafter's acceptance trace at a fixed k: the replay that stats and fits share.

A walk starts at output position 0; each step emits `emitted_tokens(acc_len[p], k, proposal_len[p])`
tokens, capped by the output still to produce, and the next step starts where it stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from traces.bundle import DrafterTrace

UNCAPPED = 1 << 30  # a k no trace reaches: the oracle walk (each step emits the whole acc_len)


@dataclass(frozen=True)
class WalkTotals:
    """Sums over one or more walks at one k."""

    tokens: int
    steps: int
    steps_with_draft: int  # steps whose drafter proposed >= 1 token
    accepted_at: np.ndarray  # accepted_at[i] = steps whose drafts 0..i were all accepted (vLLM's counter)
    verified_tokens: int = 0  # sum of 1 + accepted drafts, before the last step is cut to the output length

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else float("nan")

    @property
    def verified_tokens_per_step(self) -> float:
        """Tokens per step without the end-of-output cut: an unbiased draw of min(acc_len, k + 1) per step."""
        return self.verified_tokens / self.steps if self.steps else float("nan")


def walk_positions(acc_len: np.ndarray, k: int, proposal_len: np.ndarray | None = None) -> np.ndarray:
    """Output positions at which the steps of a walk at `k` start, in order."""
    acc = np.asarray(acc_len, dtype=np.int64)
    n = acc.shape[0]
    drafts = np.minimum(acc - 1, k)
    if proposal_len is not None:
        drafts = np.minimum(drafts, np.asarray(proposal_len, dtype=np.int64))
    step = (1 + drafts).tolist()
    starts = []
    p = 0
    while p < n:
        starts.append(p)
        p += step[p]
    return np.asarray(starts, dtype=np.int64)


def walk_trace(trace: DrafterTrace, k: int, positions: int = 0) -> WalkTotals:
    """Replay one request's trace at `k`; count tokens, steps and accepted drafts at the first `positions`."""
    acc = np.asarray(trace.acc_len, dtype=np.int64)
    n = acc.shape[0]
    starts = walk_positions(acc, k, trace.proposal_len)
    proposed = np.full(starts.shape, k, dtype=np.int64)
    if trace.proposal_len is not None:
        proposed = np.minimum(proposed, np.asarray(trace.proposal_len, dtype=np.int64)[starts])
    accepted = np.minimum(acc[starts] - 1, proposed)  # the verify outcome; the output cap only truncates
    emitted = np.minimum(1 + accepted, n - starts)
    counts = np.zeros(positions, dtype=np.int64)
    if positions:
        counts = (accepted[:, None] > np.arange(positions)[None, :]).sum(axis=0)
    return WalkTotals(int(emitted.sum()), int(starts.shape[0]), int((proposed > 0).sum()), counts,
                      int(accepted.sum()) + int(starts.shape[0]))


def walk_many(traces: Iterable[DrafterTrace], k: int, positions: int = 0) -> WalkTotals:
    """Pooled totals of `walk_trace` over many requests (tokens / steps = mean tokens per step)."""
    tokens = steps = drafted = verified = 0
    counts = np.zeros(positions, dtype=np.int64)
    for t in traces:
        w = walk_trace(t, k, positions)
        tokens += w.tokens
        steps += w.steps
        drafted += w.steps_with_draft
        counts += w.accepted_at
        verified += w.verified_tokens
    return WalkTotals(tokens, steps, drafted, counts, verified)
