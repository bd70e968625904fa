"""The replay rule: tokens one verify step emits, given a drafter's acceptance trace and k.

Position p is the output position of the first drafted token (a request that has generated g
tokens drafts from p = g). Under greedy verification a drafter's proposal from position p depends
only on the target's own prefix, so `emitted = 1 + min(acc_len[p] - 1, k, proposal_len[p])` replays
any drafter and any k.
"""
from __future__ import annotations

import numpy as np


def emitted_tokens(acc_len, k, proposal_len=None):
    """Tokens emitted by one verify step (>= 1, counts the corrected or bonus token).

    Works on scalars or numpy arrays (broadcast). `k` = 0 means no speculation (plain decode).
    `proposal_len` caps how many tokens the drafter can propose (n-gram match length); None = no cap.
    """
    drafts = np.minimum(np.asarray(acc_len) - 1, k)
    if proposal_len is not None:
        drafts = np.minimum(drafts, proposal_len)
    out = 1 + drafts
    return int(out) if np.ndim(out) == 0 else out


def accepted_drafts(acc_len, proposed):
    """Drafted tokens that pass greedy verification when `proposed` tokens were drafted (the verify outcome,
    before any end-of-output cut). Scalars or numpy arrays."""
    out = np.minimum(np.asarray(acc_len) - 1, proposed)
    return int(out) if np.ndim(out) == 0 else out


def proposed_tokens(k, proposal_len=None):
    """Tokens the drafter actually proposes when asked for k (n-gram may have fewer)."""
    return k if proposal_len is None else np.minimum(k, proposal_len)
