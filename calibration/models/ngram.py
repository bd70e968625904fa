"""Prompt-lookup (n-gram) drafter, following vLLM's rule.

The longest suffix of the context with length in [min_n, max_n] that also occurs earlier is
matched (earliest occurrence among the longest), and the tokens that followed it are proposed,
at most `max_proposal` of them and never beyond the current context.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NgramDrafter:
    """n-gram prompt lookup with vLLM's parameters (prompt_lookup_min/max, num_speculative_tokens)."""

    min_n: int = 2
    max_n: int = 4
    max_proposal: int = 16

    def __post_init__(self) -> None:
        if not (1 <= self.min_n <= self.max_n):
            raise ValueError(f"n-gram drafter needs 1 <= min_n <= max_n, got min_n={self.min_n}, max_n={self.max_n}")
        if self.max_proposal < 1:
            raise ValueError(f"n-gram drafter needs max_proposal >= 1, got {self.max_proposal}")

    def match_start(self, context: np.ndarray) -> int | None:
        """Index in `context` where the proposed continuation starts, or None when nothing matches."""
        t = len(context)
        for n in range(min(self.max_n, t - 1), self.min_n - 1, -1):
            suffix = context[t - n:]
            windows = np.lib.stride_tricks.sliding_window_view(context[: t - 1], n)
            hits = np.flatnonzero((windows == suffix).all(axis=1))
            if hits.size:
                return int(hits[0]) + n
        return None

    def propose(self, context: np.ndarray | list[int], k: int | None = None) -> list[int]:
        """Draft tokens for the next step (at most k, or max_proposal when k is None)."""
        ctx = np.asarray(context, dtype=np.int64)
        start = self.match_start(ctx)
        if start is None:
            return []
        cap = self.max_proposal if k is None else min(k, self.max_proposal)
        return ctx[start:start + cap].tolist()

    def proposal_matches(self, prompt: list[int], output: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
        """Per output position p: whether each token of the proposal drafted at p (uncapped by max_proposal, cut
        at the output's end) equals the target's token there, and proposal_len (capped by max_proposal)."""
        seq = np.asarray(list(prompt) + list(output), dtype=np.int64)
        out = seq[len(prompt):]
        n_out = len(output)
        prop = np.zeros(n_out, dtype=np.int32)
        matches = []
        for p in range(n_out):
            t = len(prompt) + p
            start = self.match_start(seq[:t])
            if start is None:
                matches.append(np.zeros(0, dtype=bool))
                continue
            avail = t - start
            prop[p] = min(avail, self.max_proposal)
            m = min(avail, n_out - p)
            matches.append(seq[start:start + m] == out[p:p + m])
        return matches, prop

    def trace(self, prompt: list[int], output: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Per output position p: (acc_len uncapped by max_proposal, proposal_len capped by it)."""
        matches, prop = self.proposal_matches(prompt, output)
        acc = np.asarray([1 + (int(np.argmin(eq)) if not eq.all() else eq.size) for eq in matches], dtype=np.int32)
        return acc, prop
