"""Closed-form bounds: the two-batch PSD pipeline gain and saving (Leviathan's expected tokens live in
`traces.expected_tokens`; `leviathan_expected_tokens` here is that function, re-exported).

Pipeline model (DESIGN "Bounds"): sequential SD spends t (draft) + V (verify) per step; two-batch PSD
overlaps the two on separate devices and spends max(t, V). With both servers saturated,
throughput gain = (t + V) / max(t, V), in [1, 2]; the E2E latency saving of a saturated closed loop
is 1 - 1/gain = min(t, V) / (t + V), at most 50% (t = V).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from traces.expected_tokens import expected_tokens as leviathan_expected_tokens  # noqa: F401  (re-export)

MINEDRAFT_SAVING = 0.37  # the paper's claimed lower bound on latency saving
MINEDRAFT_RATIO = 1.59  # the same claim as T_SD / T_PSD (1 / (1 - 0.37) = 1.587)


def _check_times(t: float, v: float) -> None:
    for name, x in (("draft time", t), ("verify time", v)):
        if not (isinstance(x, (int, float)) and math.isfinite(x) and x >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {x!r}")
    if t + v <= 0:
        raise ValueError("draft time and verify time cannot both be 0")


def pipeline_gain(t: float, v: float) -> float:
    """Saturated throughput of two-batch PSD over sequential SD: (t + V) / max(t, V)."""
    _check_times(t, v)
    return (t + v) / max(t, v)


def pipeline_saving(t: float, v: float) -> float:
    """Saturated E2E latency saving of PSD over SD: min(t, V) / (t + V) = 1 - 1/gain."""
    _check_times(t, v)
    return min(t, v) / (t + v)


def saving_band(saving: float = MINEDRAFT_SAVING) -> tuple[float, float]:
    """The t/V interval where the pipeline saving is at least `saving` (< 0.5): [s/(1-s), (1-s)/s]."""
    if not 0 < saving <= 0.5:
        raise ValueError(f"saving must be in (0, 0.5], got {saving!r}")
    return saving / (1 - saving), (1 - saving) / saving


@dataclass
class PipelineBounds:
    """The analytic figures for one (t, V)."""

    draft_time: float
    verify_time: float
    ratio_t_over_v: float
    analytic_gain: float
    analytic_saving: float
    within_37_band: bool

    def to_dict(self) -> dict:
        return asdict(self)


def pipeline_bounds(t: float, v: float) -> PipelineBounds:
    """Gain, saving and whether t/V lies in the band where the saving reaches 37%."""
    _check_times(t, v)
    lo, hi = saving_band()
    r = t / v if v > 0 else math.inf
    return PipelineBounds(t, v, r, pipeline_gain(t, v), pipeline_saving(t, v), lo <= r <= hi)
