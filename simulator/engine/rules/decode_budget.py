"""The decode side of the step's one token budget: running requests take their tokens from it before any prompt
chunk (vLLM V1). A scheduler variant that does not charge decodes to max_num_batched_tokens (`scheduler: draftsim`)
is the same rule over an unbounded decode budget (docs/architecture.md)."""
from __future__ import annotations

import numpy as np

UNCHARGED = np.iinfo(np.int64).max  # the decode budget of a variant that never cuts or delays a decode


def decode_side_budget(max_num_batched_tokens, decodes_in_budget):
    """The tokens a step's decodes (1 + drafts each) may take: the step budget when the variant charges them to it
    (SchedulerVariant.decodes_in_budget), else UNCHARGED. The prefills get the step budget less what decodes took."""
    return max_num_batched_tokens if decodes_in_budget else UNCHARGED


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
    """The decode budget (fit_decodes) over chains already verified: `proposed[:n]` drafts each, of which `accepted[:n]`
    pass; each that runs keeps `kept[j]` drafts and their accepted part (cut_accepted). Cuts `proposed` and `accepted`
    in place; returns how many run."""
    m = fit_decodes(proposed, n, budget, kept)
    for j in range(m):
        accepted[j] = cut_accepted(accepted[j], kept[j])
        proposed[j] = kept[j]
    return m
