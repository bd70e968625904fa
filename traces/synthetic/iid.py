"""i.i.d. acceptance: every draft token is accepted with the same rate `a` (Leviathan et al.)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from traces.config_base import StrictModel

from traces.bundle import DrafterTrace, TraceBundle
from traces.expected_tokens import expected_tokens as leviathan_tokens
from traces.synthetic.common import drafter_traces, pooled, tokens_per_step
from traces.synthetic.tv import TvModel

FIT_DEPTH = 8


def capped_iid_tokens(rate: float, k: int, max_acc: int) -> float:
    """Expected tokens per step at k for i.i.d. rate, with acc_len capped at max_acc."""
    return leviathan_tokens(rate, min(k, max_acc - 1))


class IidAcceptance(StrictModel):
    """acc_len[p] = 1 + run of successes of rate `rate`, drawn independently per position, capped at max_acc."""

    model: Literal["iid"] = "iid"
    rate: float = Field(ge=0, lt=1)
    max_acc: int = Field(32, ge=1)
    tv: TvModel | None = None

    def generate(self, output_len: int, rng: np.random.Generator) -> DrafterTrace:
        acc = np.minimum(rng.geometric(1.0 - self.rate, size=output_len), self.max_acc).astype(np.int32)
        tv = None if self.tv is None else self.tv.sample(acc, rng)
        return DrafterTrace(acc_len=acc, tv=tv)

    @classmethod
    def fit(cls, bundle: TraceBundle, drafter: str) -> "IidAcceptance":
        """Least-squares rate matching the measured mean tokens per step at k = 1..8."""
        traces = drafter_traces(bundle, drafter)
        measured, _ = tokens_per_step(traces, FIT_DEPTH)
        max_acc = int(pooled(traces, "acc_len").max())
        ks = range(1, FIT_DEPTH + 1)

        def loss(a: float) -> float:
            return sum((capped_iid_tokens(a, k, max_acc) - measured[k]) ** 2 for k in ks)

        from scipy.optimize import minimize_scalar  # scipy costs ~0.2 s to import: only when fitting

        a = float(minimize_scalar(loss, bounds=(0.0, 0.999), method="bounded", options={"xatol": 1e-6}).x)
        tv = pooled(traces, "tv")
        return cls(rate=round(a, 5), max_acc=max_acc,
                   tv=None if tv is None else TvModel.fit(pooled(traces, "acc_len"), tv))
