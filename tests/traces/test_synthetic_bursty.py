"""Bursty n-gram generator and the two-state HMM fit: parameters recovered, structure of the traces."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from tests.traces.synth_helpers import bundle_from
from traces.synthetic import BurstyAcceptance
from traces.synthetic.common import runs_from

TRUE = BurstyAcceptance(rate_off=0.03, rate_on=0.95, stay_off=0.97, stay_on=0.93, start_on=0.0, max_acc=21,
                        max_proposal=20, miss_proposal_rate=0.3)


def test_runs_from_by_hand():
    assert runs_from(np.array([1, 1, 0, 1, 0, 0, 1, 1, 1], bool)).tolist() == [2, 1, 0, 1, 0, 0, 3, 2, 1]


def test_acc_len_is_the_run_of_matches_and_proposals_cover_it():
    t = TRUE.generate(5000, np.random.default_rng(0))
    acc, prop = t.acc_len, t.proposal_len
    inside = acc[:-1] > 1
    uncapped = acc[:-1] < 21
    # inside a run (and below the cap) the next position's run is one shorter
    assert np.array_equal(acc[1:][inside & uncapped], acc[:-1][inside & uncapped] - 1)
    assert (prop[acc > 1] == 20).all()
    assert set(np.unique(prop)) <= {0, 20}
    assert (prop[acc == 1] > 0).mean() == pytest.approx(0.3, abs=0.04)


def test_states_persist():
    s = TRUE.states(200_000, np.random.default_rng(1))
    same = s[1:] == s[:-1]
    assert same[~s[:-1]].mean() == pytest.approx(0.97, abs=0.005)
    assert same[s[:-1]].mean() == pytest.approx(0.93, abs=0.01)


def test_fit_recovers_parameters():
    fitted = BurstyAcceptance.fit(bundle_from(TRUE, n=120, length=400, seed=2, kind="ngram"), "d")
    assert fitted.rate_off == pytest.approx(0.03, abs=0.015)
    assert fitted.rate_on == pytest.approx(0.95, abs=0.02)
    assert fitted.stay_off == pytest.approx(0.97, abs=0.015)
    assert fitted.stay_on == pytest.approx(0.93, abs=0.03)
    assert fitted.max_proposal == 20
    assert fitted.miss_proposal_rate == pytest.approx(0.3, abs=0.03)


def test_fit_without_proposal_len_leaves_proposals_off():
    g = TRUE.model_copy(update={"max_proposal": None})
    fitted = BurstyAcceptance.fit(bundle_from(g, n=30, length=200, seed=3, kind="ngram"), "d")
    assert fitted.max_proposal is None
    assert fitted.generate(50, np.random.default_rng(0)).proposal_len is None


def test_proposal_shorter_than_acceptance_rejected():
    with pytest.raises(ValidationError, match="max_proposal"):
        BurstyAcceptance(rate_off=0.1, rate_on=0.9, stay_off=0.9, stay_on=0.9, max_acc=21, max_proposal=5)
