"""Parametric length distributions (prompt or output tokens) for workloads and synthetic bundles."""
from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from traces.limits import MAX_TOKENS_PER_REQUEST as _MAX
from traces.config_base import StrictModel as _Dist


class LognormalLengths(_Dist):
    """exp(N(ln median, sigma^2)) rounded, clipped to [min, max] (the clip is part of the distribution)."""

    dist: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0, le=_MAX)
    sigma: float = Field(ge=0, le=10)
    min: int = Field(1, ge=1, le=_MAX)
    max: int = Field(ge=1, le=_MAX)

    @model_validator(mode="after")
    def _bounds(self):
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        x = np.rint(rng.lognormal(np.log(self.median), self.sigma, size=n))
        return np.clip(x, self.min, self.max).astype(np.int64)


class ConstantLengths(_Dist):
    """Every request has the same length."""

    dist: Literal["constant"] = "constant"
    value: int = Field(ge=1, le=_MAX)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


class UniformLengths(_Dist):
    """Integers uniform on [low, high] inclusive."""

    dist: Literal["uniform"] = "uniform"
    low: int = Field(ge=1, le=_MAX)
    high: int = Field(ge=1, le=_MAX)

    @model_validator(mode="after")
    def _bounds(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, endpoint=True).astype(np.int64)


LengthDist = Annotated[Union[LognormalLengths, ConstantLengths, UniformLengths], Field(discriminator="dist")]


def fit_lognormal(values) -> LognormalLengths:
    """Lognormal through the sample's median and log-spread, clipped to the sample's range."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or (v < 1).any():
        raise ValueError("fit_lognormal needs at least one length, all >= 1")
    logs = np.log(v)
    return LognormalLengths(median=round(float(np.exp(np.median(logs))), 3), sigma=round(float(logs.std()), 4),
                            min=int(v.min()), max=int(v.max()))
