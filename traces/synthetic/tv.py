"""Optional synthetic TV distances: a Beta distribution for positions whose first draft matches, one for misses."""
from __future__ import annotations

import numpy as np
from pydantic import Field

from traces.config_base import StrictModel

_EPS = 1e-4


class BetaParams(StrictModel):
    """Beta distribution by mean and concentration (alpha + beta)."""

    mean: float = Field(gt=0, lt=1)
    concentration: float = Field(gt=0)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.beta(self.mean * self.concentration, (1 - self.mean) * self.concentration, size=n)

    @classmethod
    def fit(cls, values: np.ndarray) -> "BetaParams":
        """Method of moments; a sample with no spread gets a very concentrated Beta."""
        v = np.clip(np.asarray(values, dtype=np.float64), _EPS, 1 - _EPS)
        m = float(v.mean())
        var = float(v.var())
        conc = m * (1 - m) / var - 1 if var > 0 else 1e6
        return cls(mean=m, concentration=float(min(max(conc, 1e-3), 1e6)))


class TvModel(StrictModel):
    """tv[p] ~ Beta(match) where acc_len[p] > 1, else Beta(miss)."""

    match: BetaParams
    miss: BetaParams

    def sample(self, acc_len: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        hit = np.asarray(acc_len) > 1
        out = self.miss.sample(hit.shape[0], rng)
        out[hit] = self.match.sample(int(hit.sum()), rng)
        return out.astype(np.float32)

    @classmethod
    def fit(cls, acc_len: np.ndarray, tv: np.ndarray) -> "TvModel | None":
        """Fit both Betas from pooled positions; None when either group is empty."""
        hit = np.asarray(acc_len) > 1
        tv = np.asarray(tv)
        if hit.all() or not hit.any():
            return None
        return cls(match=BetaParams.fit(tv[hit]), miss=BetaParams.fit(tv[~hit]))
