"""Per-position conditional acceptance: draft j is accepted with rate c_j given drafts 0..j-1 were.

Each output position draws its acc_len independently (each verify step drafts afresh), so a walk at
any k sees the same distribution: mean tokens per step at k is 1 + S_1 + ... + S_k with
S_j = c_0 * ... * c_{j-1}.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from traces.config_base import StrictModel

from traces.bundle import DrafterTrace, TraceBundle
from traces.synthetic.common import drafter_traces, pooled, tokens_per_step
from traces.synthetic.tv import TvModel

FIT_DEPTH = 8


class PositionalAcceptance(StrictModel):
    """Conditional rates `rates[j]` for j < K, `tail` beyond; acc_len capped at max_acc."""

    model: Literal["positional"] = "positional"
    rates: list[float] = Field(min_length=1)
    tail: float = Field(0.0, ge=0, lt=1)
    max_acc: int = Field(32, ge=1)
    tv: TvModel | None = None

    @field_validator("rates")
    @classmethod
    def _in_unit(cls, v: list[float]) -> list[float]:
        for j, r in enumerate(v):
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"rates[{j}] = {r}: expected a probability in [0, 1]")
        return v

    def survival(self) -> np.ndarray:
        """S[j] = P(acc_len > j) for j = 0..max_acc-1 (S[0] = 1)."""
        cond = np.array([self.rates[j] if j < len(self.rates) else self.tail for j in range(self.max_acc - 1)])
        return np.concatenate([[1.0], np.cumprod(cond)])

    def mean_tokens_per_step(self, k: int) -> float:
        """Mean tokens per step at k under this model (no output-length cap)."""
        return float(self.survival()[: k + 1].sum())

    def generate(self, output_len: int, rng: np.random.Generator) -> DrafterTrace:
        above = self.survival()[1:][::-1]  # ascending
        u = rng.random(output_len)
        acc = (1 + above.shape[0] - np.searchsorted(above, u, side="right")).astype(np.int32)
        tv = None if self.tv is None else self.tv.sample(acc, rng)
        return DrafterTrace(acc_len=acc, tv=tv)

    @classmethod
    def fit(cls, bundle: TraceBundle, drafter: str, depth: int = FIT_DEPTH) -> "PositionalAcceptance":
        """Method of moments on walks: S_k = T_k - T_(k-1) for k = 1..depth; geometric tail from the oracle walk."""
        traces = drafter_traces(bundle, drafter)
        t, oracle = tokens_per_step(traces, depth)
        s = np.minimum.accumulate(np.clip(np.diff(t), 0.0, 1.0))
        prev = np.concatenate([[1.0], s[:-1]])
        rates = np.where(prev > 0, s / np.where(prev > 0, prev, 1.0), 0.0)
        beyond = max(oracle - t[depth], 0.0)
        tail = beyond / (s[-1] + beyond) if s[-1] + beyond > 0 else 0.0
        acc = pooled(traces, "acc_len")
        tv = pooled(traces, "tv")
        return cls(rates=[round(float(r), 5) for r in rates], tail=round(min(float(tail), 0.999), 5),
                   max_acc=int(acc.max()), tv=None if tv is None else TvModel.fit(acc, tv))
