"""Walks over one drafter's acceptance trace at a fixed k: the replay that stats, fits, oracles and checks share.

A walk follows the replay rule of `traces.acceptance` (the engine's): the prefill emitted output token 0,
so the first step drafts from position 1; each step emits 1 + accepted drafts, cut at the output's end,
and the next step starts where it stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from traces.acceptance import FIRST_DRAFT_POSITION, accepted_drafts, emitted_in_output, proposed_tokens
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
    """Output positions at which the steps of a walk at `k` start, in order (the first is 1)."""
    acc = np.asarray(acc_len, dtype=np.int64)
    n = acc.shape[0]
    prop = None if proposal_len is None else np.asarray(proposal_len, dtype=np.int64)
    step = (1 + accepted_drafts(acc, proposed_tokens(k, prop))).tolist()
    starts = []
    p = FIRST_DRAFT_POSITION
    while p < n:
        starts.append(p)
        p += step[p]
    return np.asarray(starts, dtype=np.int64)


@dataclass(frozen=True)
class Walk:
    """The steps of one request's walk: start positions and, per step, proposed, accepted and emitted tokens."""

    positions: np.ndarray
    proposed: np.ndarray
    accepted: np.ndarray  # the verify outcome, before the end-of-output cut
    emitted: np.ndarray  # after the cut: sums to output_len - 1


def walk(trace: DrafterTrace, k: int) -> Walk:
    """Replay one request's trace at a fixed `k` from position 1 to the end of its output."""
    acc = np.asarray(trace.acc_len, dtype=np.int64)
    starts = walk_positions(acc, k, trace.proposal_len)
    cap = None if trace.proposal_len is None else np.asarray(trace.proposal_len, dtype=np.int64)[starts]
    proposed = np.broadcast_to(np.asarray(proposed_tokens(k, cap), dtype=np.int64), starts.shape)
    accepted = np.asarray(accepted_drafts(acc[starts], proposed), dtype=np.int64)
    emitted = np.asarray(emitted_in_output(accepted, starts, acc.shape[0]), dtype=np.int64)
    return Walk(starts, proposed, accepted, emitted)


def walk_trace(trace: DrafterTrace, k: int, positions: int = 0) -> WalkTotals:
    """Replay one request's trace at `k`; count tokens, steps and accepted drafts at the first `positions`."""
    w = walk(trace, k)
    counts = np.zeros(positions, dtype=np.int64)
    if positions:
        counts = (w.accepted[:, None] > np.arange(positions)[None, :]).sum(axis=0)
    steps = int(w.positions.shape[0])
    return WalkTotals(int(w.emitted.sum()), steps, int((w.proposed > 0).sum()), counts,
                      int(w.accepted.sum()) + steps)


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
