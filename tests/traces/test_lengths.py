"""Parametric length distributions."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from traces.lengths import ConstantLengths, LengthDist, LognormalLengths, UniformLengths, fit_lognormal

ADAPTER = TypeAdapter(LengthDist)


def test_lognormal_median_and_clip():
    d = LognormalLengths(median=100, sigma=0.5, min=20, max=300)
    x = d.sample(50_000, np.random.default_rng(0))
    assert np.median(x) == pytest.approx(100, rel=0.03)
    assert x.min() >= 20 and x.max() <= 300 and x.dtype == np.int64


def test_uniform_inclusive_and_constant():
    x = UniformLengths(low=3, high=5).sample(10_000, np.random.default_rng(1))
    assert set(np.unique(x)) == {3, 4, 5}
    assert ConstantLengths(value=7).sample(3, np.random.default_rng(0)).tolist() == [7, 7, 7]


def test_discriminated_parsing_and_errors():
    assert isinstance(ADAPTER.validate_python({"dist": "constant", "value": 4}), ConstantLengths)
    with pytest.raises(ValidationError):
        ADAPTER.validate_python({"dist": "zipf", "value": 4})
    with pytest.raises(ValidationError):
        ADAPTER.validate_python({"dist": "uniform", "low": 9, "high": 3})
    with pytest.raises(ValidationError):
        ADAPTER.validate_python({"dist": "constant", "value": 4, "extra": 1})


def test_fit_lognormal_recovers_parameters():
    x = LognormalLengths(median=200, sigma=0.7, min=1, max=10**6).sample(50_000, np.random.default_rng(2))
    f = fit_lognormal(x)
    assert f.median == pytest.approx(200, rel=0.03)
    assert f.sigma == pytest.approx(0.7, rel=0.03)
    assert (f.min, f.max) == (int(x.min()), int(x.max()))
