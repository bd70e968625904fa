"""Per-position generator: survival function, walk statistics, fit recovering the conditional rates."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from tests.traces.synth_helpers import bundle_from
from traces.synthetic import PositionalAcceptance
from traces.synthetic.common import tokens_per_step

TRUE = PositionalAcceptance(rates=[0.8, 0.6, 0.5, 0.7], tail=0.4, max_acc=20)


def test_survival_by_hand():
    s = PositionalAcceptance(rates=[0.5, 0.5], tail=0.1, max_acc=5).survival()
    assert s.tolist() == pytest.approx([1, 0.5, 0.25, 0.025, 0.0025])


def test_generated_marginals_follow_the_rates():
    acc = TRUE.generate(200_000, np.random.default_rng(2)).acc_len
    surv = [(acc > j).mean() for j in range(5)]
    assert surv == pytest.approx([1, 0.8, 0.48, 0.24, 0.168], abs=0.01)
    assert acc.max() <= 20


def test_walk_tokens_per_step_match_the_model():
    b = bundle_from(TRUE, n=100, length=400, seed=4)
    measured, _ = tokens_per_step([r.drafters["d"] for r in b.requests], 5)
    for k in (1, 3, 5):
        assert measured[k] == pytest.approx(TRUE.mean_tokens_per_step(k), rel=0.03)


def test_fit_recovers_rates():
    fitted = PositionalAcceptance.fit(bundle_from(TRUE, n=300, length=300, seed=5), "d")
    assert fitted.rates[:4] == pytest.approx(TRUE.rates, abs=0.04)
    # deep conditional rates divide small survival values, so the fit guarantees the survival itself
    assert fitted.survival()[:12] == pytest.approx(TRUE.survival()[:12], abs=0.01)
    assert fitted.mean_tokens_per_step(64) == pytest.approx(TRUE.mean_tokens_per_step(64), rel=0.02)
    assert fitted.max_acc <= 20


def test_rates_outside_unit_interval_rejected():
    with pytest.raises(ValidationError, match="rates\\[1\\]"):
        PositionalAcceptance(rates=[0.5, 1.5])
