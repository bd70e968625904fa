"""Two-state bursty acceptance for n-gram (prompt lookup) drafters.

A hidden state per output position, `off` (no usable match: low rate of a correct first draft) or
`on` (inside copied text: high rate), persists from one position to the next with probabilities
`stay_off` / `stay_on`, which makes long runs of matches in code. Each position's draft matches with
the state's rate; acc_len[p] = 1 + the run of matches starting at p (capped at max_acc), as a
teacher-forced pass over the output measures it. `proposal_len[p]` (optional) is `max_proposal`
where the first draft matches, and otherwise `max_proposal` with probability `miss_proposal_rate`
(a lookup hit whose first token is wrong) or 0 (no match).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from traces.config_base import StrictModel

from traces.bundle import DrafterTrace, TraceBundle
from traces.synthetic.common import drafter_traces, pooled, runs_from
from traces.synthetic.hmm import fit_two_state
from traces.synthetic.tv import TvModel


class BurstyAcceptance(StrictModel):
    """Parameters of the two-state model (state 0 = off, state 1 = on)."""

    model: Literal["bursty"] = "bursty"
    rate_off: float = Field(ge=0, le=1)
    rate_on: float = Field(ge=0, le=1)
    stay_off: float = Field(ge=0, le=1)
    stay_on: float = Field(ge=0, le=1)
    start_on: float = Field(0.0, ge=0, le=1)
    max_acc: int = Field(21, ge=1)
    max_proposal: int | None = Field(None, ge=1)
    miss_proposal_rate: float = Field(0.0, ge=0, le=1)
    tv: TvModel | None = None

    @model_validator(mode="after")
    def _proposal_covers_acceptance(self):
        if self.max_proposal is not None and self.max_proposal < self.max_acc - 1:
            raise ValueError(f"max_proposal ({self.max_proposal}) must be >= max_acc - 1 ({self.max_acc - 1}): "
                             "a drafter cannot have more drafts accepted than it proposed")
        return self

    def states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Hidden on/off state per position (True = on), from geometric sojourns."""
        out = np.empty(n, dtype=bool)
        on = bool(rng.random() < self.start_on)
        p = 0
        while p < n:
            stay = self.stay_on if on else self.stay_off
            length = n - p if stay >= 1.0 else int(rng.geometric(1.0 - stay))
            out[p: p + length] = on
            p += length
            on = not on
        return out

    def generate(self, output_len: int, rng: np.random.Generator) -> DrafterTrace:
        state = self.states(output_len, rng)
        matches = rng.random(output_len) < np.where(state, self.rate_on, self.rate_off)
        acc = (1 + np.minimum(runs_from(matches), self.max_acc - 1)).astype(np.int32)
        proposal = None
        if self.max_proposal is not None:
            hit = matches | (rng.random(output_len) < self.miss_proposal_rate)
            proposal = np.where(hit, self.max_proposal, 0).astype(np.int32)
        tv = None if self.tv is None else self.tv.sample(acc, rng)
        return DrafterTrace(acc_len=acc, tv=tv, proposal_len=proposal)

    @classmethod
    def fit(cls, bundle: TraceBundle, drafter: str) -> "BurstyAcceptance":
        """Baum-Welch on the per-position match indicators acc_len > 1; proposal terms from proposal_len if present."""
        traces = drafter_traces(bundle, drafter)
        h = fit_two_state([np.asarray(t.acc_len) > 1 for t in traces])
        acc = pooled(traces, "acc_len")
        proposal = pooled(traces, "proposal_len")
        max_proposal, miss_rate = None, 0.0
        if proposal is not None:
            max_proposal = max(int(proposal.max()), int(acc.max()) - 1, 1)
            miss = acc == 1
            miss_rate = float((proposal[miss] > 0).mean()) if miss.any() else 0.0
        tv = pooled(traces, "tv")
        return cls(rate_off=round(float(h.emit[0]), 5), rate_on=round(float(h.emit[1]), 5),
                   stay_off=round(float(h.trans[0, 0]), 5), stay_on=round(float(h.trans[1, 1]), 5),
                   start_on=round(float(h.start[1]), 5), max_acc=int(acc.max()), max_proposal=max_proposal,
                   miss_proposal_rate=round(miss_rate, 5), tv=None if tv is None else TvModel.fit(acc, tv))
