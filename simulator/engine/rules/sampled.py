"""Sampled verification of one drafter's proposals in a step: draws and acceptance (the SD and PSD kernels run
it; traces/sampled_acceptance.py holds the window and the acceptance rule it applies)."""
from __future__ import annotations

import numpy as np

from traces.sampled_acceptance import leading_successes, tv_window_rows


def sample_group(group, member_group, proposed, accepted, request, n, gen, first, last, tv, rng):
    """Among the first `n` decodes, those of `group` (member_group[j] == group): none, nothing drawn; none drafting
    anything, each accepts 0 and nothing is drawn; else rng.random((members, largest proposal)), and each member
    accepts the leading successes over its TV window (request[j]'s trace at tv[first:last + 1] from its position
    gen), written to accepted[j], members in order."""
    m = 0
    width = 0
    for j in range(n):
        if member_group[j] == group:
            m += 1
            width = max(width, proposed[j])
    if m == 0:
        return
    rows = np.empty(m, np.int64)
    m = 0
    for j in range(n):
        if member_group[j] == group:
            rows[m] = j
            m += 1
    if width == 0:
        for r in range(m):
            accepted[rows[r]] = 0
        return
    starts, positions = np.empty(m, np.int64), np.empty(m, np.int64)
    ends, ks = np.empty(m, np.int64), np.empty(m, np.int64)
    for r in range(m):
        i = request[rows[r]]
        starts[r], positions[r], ends[r], ks[r] = first[i], gen[i], last[i] + 1, proposed[rows[r]]
    window = tv_window_rows(tv, starts, positions, ends, width, np.empty((m, width)))
    got = leading_successes(rng.random((m, width)), window, ks, np.zeros(m, np.int64))
    for r in range(m):
        accepted[rows[r]] = got[r]
