"""vLLM V1's decode budget (server `scheduler: vllm-v1`): running requests take their tokens from the step's one
token budget before any prompt chunk (docs/architecture.md)."""
from __future__ import annotations

import numpy as np


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


def cut_accepted(accepted, kept):
    """The drafts verification accepts of a chain the budget cut to `kept` drafts, given those it accepts of the
    whole chain: acceptance is a leading run of the chain, so the cut keeps the part of it within the kept drafts,
    min(accepted, kept). Scalars or integer arrays."""
    return np.minimum(accepted, kept)


def fit_proposals(proposed, accepted, n, budget, kept):
    """The decode budget (fit_decodes) over chains already verified: `proposed[:n]` drafts each, of which
    `accepted[:n]` pass; each that runs keeps `kept[j]` drafts and their accepted part (cut_accepted, as
    Drafting.accept applies it). Cuts `proposed` and `accepted` in place; returns how many run."""
    m = fit_decodes(proposed, n, budget, kept)
    for j in range(m):
        accepted[j] = cut_accepted(accepted[j], kept[j])
        proposed[j] = kept[j]
    return m
