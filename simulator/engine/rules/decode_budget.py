"""vLLM V1's decode budget (server `scheduler: vllm-v1`): running requests take their tokens from the step's one
token budget before any prompt chunk (docs/architecture.md)."""
from __future__ import annotations


def fit_decodes(proposed, n, budget, drafts):
    """Decoding requests (`proposed[:n]` drafts each, admission order) take 1 + drafts tokens from `budget` until it
    runs out; one cut to 1 token verifies no drafts. Writes the drafts each keeps to `drafts`; returns how many run."""
    left = budget
    m = 0
    for j in range(n):
        if left <= 0:
            break
        take = min(1 + proposed[j], left)
        drafts[j] = take - 1
        left -= take
        m += 1
    return m
