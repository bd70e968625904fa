"""vLLM V1's decode budget rule (simulator/engine/rules/decode_budget.py), plain and compiled: decoding requests in
admission order take 1 + drafts tokens from the step budget until it runs out; one cut to 1 token verifies no
drafts; one cut to 0 waits; a cut chain keeps the accepted drafts within its kept ones."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.rules.decode_budget import cut_accepted, fit_decodes, fit_proposals
from traces.acceptance import accepted_drafts


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


# ---- the budget cut of chains already verified (fit_proposals, cut_accepted): the kernels' SD and PSD loops call
# fit_proposals, which cuts each chain's accepted part by cut_accepted

CUT_RULES = [pytest.param("plain", id="plain"), pytest.param("compiled", id="compiled")]


def _cut_rules(which):
    """(cut_accepted, fit_proposals) as plain Python or as the kernels compile them."""
    if which == "plain":
        return cut_accepted, fit_proposals
    from numba import njit

    from simulator.engine import compiled_kernel
    return njit(cut_accepted), compiled_kernel._fit_proposals


@pytest.mark.parametrize("which", CUT_RULES)
@pytest.mark.parametrize("accepted, kept, expected", [
    (2, 3, 2),  # the accepted run ends inside the kept drafts: unchanged
    (3, 3, 3),
    (3, 1, 1),  # the run went past the cut: only the kept drafts can pass
    (2, 0, 0),  # cut to its one token: no drafts verified
])
def test_cut_accepted_hand_worked(which, accepted, kept, expected):
    rule = _cut_rules(which)[0]
    assert int(rule(np.int64(accepted), np.int64(kept))) == expected


def test_cut_accepted_over_arrays():
    """The rule is elementwise: over arrays as over one chain."""
    got = cut_accepted(np.array([0, 2, 3, 5], np.int64), np.array([4, 1, 3, 0], np.int64))
    assert got.tolist() == [0, 1, 3, 0]


@pytest.mark.parametrize("which", CUT_RULES)
@pytest.mark.parametrize("budget, expected", [
    (12, (3, [3, 3, 3], [3, 1, 2])),  # everyone whole: nothing cut
    (10, (3, [3, 3, 1], [3, 1, 1])),  # the third keeps 1 draft: its 2 accepted become 1
    (9, (3, [3, 3, 0], [3, 1, 0])),  # the third decodes one token: nothing verified
    (5, (2, [3, 0], [3, 0])),  # the second keeps no draft; the third waits
    (4, (1, [3], [3])),
])
def test_fit_proposals_hand_worked(which, budget, expected):
    rule = _cut_rules(which)[1]
    prop = np.array([3, 3, 3], np.int64)
    acc = np.array([3, 1, 2], np.int64)
    kept = np.full(3, -7, np.int64)
    m = int(rule(prop, acc, 3, budget, kept))
    assert (m, prop[:m].tolist(), acc[:m].tolist()) == expected
    assert prop[m:].tolist() == [3] * (3 - m) and acc[m:].tolist() == [3, 1, 2][m:]  # those left out untouched


@settings(max_examples=80, deadline=None)
@given(budget=st.integers(0, 40), chains=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 9)), max_size=12),
       compiled=st.booleans())
def test_fit_proposals_is_the_replay_of_the_kept_drafts(budget, chains, compiled):
    """Cutting chains verified as drafted gives what the replay rule (traces/acceptance.accepted_drafts) accepts of
    the drafts the budget keeps (fit_decodes), for every request that runs."""
    rule = _cut_rules("compiled" if compiled else "plain")[1]
    drafted = np.array([d for d, _ in chains], np.int64)
    acc_len = np.array([a for _, a in chains], np.int64)
    prop = drafted.copy()
    acc = np.asarray(accepted_drafts(acc_len, drafted), np.int64).copy()
    m = int(rule(prop, acc, len(prop), budget, np.empty(len(prop), np.int64)))
    m_budget, kept = _fit(fit_decodes, drafted.tolist(), budget)
    assert m == m_budget and prop[:m].tolist() == kept
    assert acc[:m].tolist() == np.asarray(accepted_drafts(acc_len[:m], np.array(kept, np.int64))).tolist()
