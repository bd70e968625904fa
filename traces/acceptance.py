"""The replay rule: what one verify step proposes, accepts and emits, given a drafter's acceptance trace.

Position convention (README "How the engine works"): the prefill emits output token 0, so a request
that has generated g tokens drafts from position p = g and reads acc_len[p]; its first step is at
`FIRST_DRAFT_POSITION` = 1. Under greedy verification a drafter's proposal from p depends only on the
target's own prefix, so one table replays any drafter and any k:

    proposed = min(k, proposal_len[p])                 (n-gram: the match length; no cap otherwise)
    accepted = min(acc_len[p] - 1, proposed)           (the verify outcome)
    emitted  = min(1 + accepted, output_len - p)       (the end of the output cuts the last step)

Every replay in the project (engine, walks, oracles, regret loops, live and calibration checks) uses
these functions; none restates the formulas.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FIRST_DRAFT_POSITION = 1  # the prefill emitted output token 0; decoding starts at position 1


def trace_position(position: int, n: int) -> int:
    """The position of a trace of n positions that output position `position` reads: past the trace's end, its last
    one, as the replay reads it (simulator/engine/drafting.Drafting.choose) and the kernels too."""
    return min(int(position), n - 1)


def _out(x):
    return int(x) if np.ndim(x) == 0 else x


def proposed_tokens(k, proposal_len=None):
    """Tokens the drafter actually proposes when asked for k (n-gram may have fewer); scalars or arrays."""
    return _out(k if proposal_len is None else np.minimum(k, proposal_len))


def accepted_drafts(acc_len, proposed):
    """Drafted tokens that pass greedy verification when `proposed` tokens were drafted (the verify outcome,
    before any end-of-output cut). Scalars or numpy arrays."""
    return _out(np.minimum(np.asarray(acc_len) - 1, proposed))


def emitted_in_output(accepted, position, output_len):
    """Tokens a step starting at `position` adds to the output: 1 + accepted, cut at the output's end."""
    return _out(np.minimum(1 + np.asarray(accepted), np.asarray(output_len) - position))


def emitted_tokens(acc_len, k, proposal_len=None):
    """Tokens one verify step yields before the end-of-output cut (>= 1: accepted drafts + 1).

    Works on scalars or numpy arrays (broadcast). `k` = 0 means no speculation (plain decode).
    """
    return _out(1 + np.asarray(accepted_drafts(acc_len, proposed_tokens(k, proposal_len))))


@dataclass(frozen=True)
class StepOutcome:
    """One replayed verify step."""

    proposed: int
    accepted: int
    emitted: int  # after the end-of-output cut


def replay_step(acc_len: int, k: int, proposal_len: int | None, position: int, output_len: int) -> StepOutcome:
    """The replay rule for one request at one position (scalars)."""
    proposed = proposed_tokens(int(k), None if proposal_len is None else int(proposal_len))
    accepted = accepted_drafts(int(acc_len), proposed)
    return StepOutcome(proposed, accepted, emitted_in_output(accepted, position, output_len))


def reachable_drafts(acc_len, proposal_len, k_max, position, output_len):
    """The most drafts from `position` that will all be accepted and stay inside the output: min(acc_len - 1,
    proposal_len, k_max, tokens left - 1), at least 0 (None = no cap). Drafting j <= this emits exactly
    1 + j tokens: what an oracle may draft. Scalars or numpy arrays (broadcast)."""
    j = np.minimum(np.asarray(acc_len) - 1, np.asarray(output_len) - np.asarray(position) - 1)
    if proposal_len is not None:
        j = np.minimum(j, proposal_len)
    if k_max is not None:
        j = np.minimum(j, k_max)
    return _out(np.maximum(j, 0))
