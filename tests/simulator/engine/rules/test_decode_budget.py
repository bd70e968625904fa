"""vLLM V1's decode budget rule (simulator/engine/rules/decode_budget.py), plain and compiled: decoding requests in
admission order take 1 + drafts tokens from the step budget until it runs out; one cut to 1 token verifies no
drafts; one cut to 0 waits."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.rules.decode_budget import fit_decodes


@pytest.fixture(params=["plain", "compiled"])
def rule(request):
    if request.param == "plain":
        return fit_decodes
    from numba import njit
    return njit(fit_decodes)


def _fit(rule, proposed, budget):
    prop = np.array(proposed, np.int64)
    drafts = np.full(len(prop), -7, np.int64)
    m = int(rule(prop, len(prop), budget, drafts))
    return m, drafts[:m].tolist()


@pytest.mark.parametrize("budget, expected", [
    (12, (3, [3, 3, 3])),  # 4 + 4 + 4 = 12: everyone with all drafts
    (10, (3, [3, 3, 1])),  # 4 + 4, then 2 left: the third verifies 1 of its 3 drafts
    (9, (3, [3, 3, 0])),  # 1 left: the third decodes its one token, no drafts
    (8, (2, [3, 3])),  # nothing left for the third: it waits
    (2, (1, [1])),
    (0, (0, [])),
])
def test_budget_cut_hand_worked(rule, budget, expected):
    assert _fit(rule, [3, 3, 3], budget) == expected


def test_requests_without_drafts_take_one_token_each(rule):
    assert _fit(rule, [0, 0, 0, 0], 3) == (3, [0, 0, 0])


@settings(max_examples=80, deadline=None)
@given(budget=st.integers(0, 40), proposed=st.lists(st.integers(0, 6), max_size=12))
def test_budget_cut_closed_form(budget, proposed):
    """Request j runs iff the tokens of those before it, sum(1 + d), leave budget; it keeps
    min(d, budget - before - 1) drafts."""
    m, drafts = _fit(fit_decodes, proposed, budget)
    before = np.concatenate([[0], np.cumsum(np.array(proposed, np.int64) + 1)])[:len(proposed)]
    runs = before < budget
    assert m == int(runs.sum()) and runs[:m].all()
    assert drafts == [min(d, budget - b - 1) for d, b in zip(proposed[:m], before[:m])]
