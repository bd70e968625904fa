"""Synthetic TV distances: Beta sampling and method-of-moments fit."""
from __future__ import annotations

import numpy as np
import pytest

from tests.traces.synth_helpers import bundle_from
from traces.synthetic import BetaParams, IidAcceptance, TvModel

MODEL = TvModel(match=BetaParams(mean=0.1, concentration=20), miss=BetaParams(mean=0.6, concentration=5))


def test_sample_depends_on_match():
    acc = np.array([2, 1] * 20_000)
    tv = MODEL.sample(acc, np.random.default_rng(0))
    assert tv[acc > 1].mean() == pytest.approx(0.1, abs=0.01)
    assert tv[acc == 1].mean() == pytest.approx(0.6, abs=0.01)
    assert ((tv >= 0) & (tv <= 1)).all()


def test_fit_recovers_beta_parameters():
    acc = np.array([2, 1] * 20_000)
    fitted = TvModel.fit(acc, MODEL.sample(acc, np.random.default_rng(1)))
    assert fitted.match.mean == pytest.approx(0.1, abs=0.01)
    assert fitted.match.concentration == pytest.approx(20, rel=0.1)
    assert fitted.miss.concentration == pytest.approx(5, rel=0.1)


def test_fit_needs_both_groups():
    assert TvModel.fit(np.array([1, 1]), np.array([0.3, 0.4])) is None


def test_generators_carry_tv_through_fit():
    b = bundle_from(IidAcceptance(rate=0.6, tv=MODEL), n=100, length=200, seed=2)
    fitted = IidAcceptance.fit(b, "d")
    assert fitted.tv is not None
    assert fitted.tv.miss.mean == pytest.approx(0.6, abs=0.02)
