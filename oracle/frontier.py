"""The exponential drafter-frontier model behind MineDraft's "at least 37% saving", evaluated numerically.

Model (our reading; the assumptions are printed with every result):
- A drafter that spends t seconds per step reaches per-token acceptance f(t) = 1 - exp(-alpha t)
  (a slower, larger drafter accepts more, with diminishing returns).
- It proposes k tokens; acceptance is i.i.d., so a verify step emits
  E(t) = (1 - f^(k+1)) / (1 - f) tokens (Leviathan); for k = 1 that is 1 + f(t).
- Verification costs V per step regardless of t. Sequential SD spends t + V per step, two-batch PSD
  max(t, V) (saturated, no sync cost).
- Each system picks its own best t: T_SD = min_t (t + V) / E(t), T_PSD = min_t max(t, V) / E(t),
  time per emitted token. In units of 1/alpha everything depends on alpha*V (and k) only.
- Ratio = T_SD / T_PSD; saving = 1 - 1/ratio. MineDraft's claim: ratio >= 1.59 (saving >= 37%).
The ratio tends to 1 both as alpha*V -> 0 (drafting too slow to help either system) and as
alpha*V -> infinity (drafting nearly free, nothing left to hide), so 1.59 cannot be a universal
lower bound; this module reports where it holds.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import brentq, minimize_scalar

from oracle.bounds import MINEDRAFT_RATIO
from traces.expected_tokens import expected_tokens as leviathan

ASSUMPTIONS = (
    "f(t) = 1 - exp(-alpha t) is the per-token acceptance a drafter reaches with draft time t per step; "
    "k drafts per step, i.i.d. acceptance, so E(t) = (1 - f^(k+1)) / (1 - f) tokens per verify step; "
    "verify time V per step independent of t; SD step = t + V, PSD step = max(t, V) (saturated, no sync cost); "
    "each system picks the t minimising its own time per token; ratio = T_SD / T_PSD, saving = 1 - 1/ratio; "
    "the claim tested is ratio >= 1.59 (saving >= 37%)."
)


def frontier_tokens(u: np.ndarray | float, k: int) -> np.ndarray:
    """E at draft time u (in units of 1/alpha): Leviathan's formula with acceptance 1 - exp(-u)."""
    return np.asarray(leviathan(-np.expm1(-np.asarray(u, dtype=float)), k))


def _minimise(objective, x: float) -> tuple[float, float]:
    """Global min over u >= 0 of a 1-D objective: dense grid, then bounded refinement around the best cell."""
    hi = 40.0 + 4.0 * x
    grid = np.unique(np.concatenate([[0.0], np.geomspace(1e-6, hi, 4000), np.linspace(0, hi, 4000)]))
    vals = objective(grid)
    i = int(np.argmin(vals))
    lo_b, hi_b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    best_u, best = float(grid[i]), float(vals[i])
    if hi_b > lo_b:
        res = minimize_scalar(lambda u: float(objective(np.array([u]))[0]), bounds=(lo_b, hi_b), method="bounded",
                              options={"xatol": 1e-10})
        if res.fun < best:
            best_u, best = float(res.x), float(res.fun)
    return best_u, best


@dataclass
class FrontierPoint:
    """Both systems' best draft time and time per token at one alpha*V (times in units of V)."""

    alpha_v: float
    k: int
    sd_best_t_over_v: float
    psd_best_t_over_v: float
    sd_time_per_token_over_v: float
    psd_time_per_token_over_v: float
    ratio: float
    saving: float
    meets_claim: bool

    def to_dict(self) -> dict:
        return asdict(self)


def frontier_point(alpha_v: float, k: int = 1) -> FrontierPoint:
    """Evaluate the model at one alpha*V: each system's own optimum, their ratio and saving."""
    if not (alpha_v > 0 and np.isfinite(alpha_v)):
        raise ValueError(f"alpha*V must be a finite number > 0, got {alpha_v!r}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    x = float(alpha_v)
    u_sd, t_sd = _minimise(lambda u: (u + x) / frontier_tokens(u, k), x)
    u_psd, t_psd = _minimise(lambda u: np.maximum(u, x) / frontier_tokens(u, k), x)
    ratio = t_sd / t_psd
    return FrontierPoint(x, k, u_sd / x, u_psd / x, t_sd / x, t_psd / x, ratio, 1.0 - 1.0 / ratio,
                         ratio >= MINEDRAFT_RATIO)


@dataclass
class FrontierSummary:
    """Where over alpha*V the claim holds, the best ratio, and the ratio at the range ends."""

    k: int
    alpha_v_range: tuple[float, float]
    max_ratio: float
    max_saving: float
    argmax_alpha_v: float
    claim_holds_from: float | None  # alpha*V interval where ratio >= 1.59, None if nowhere
    claim_holds_to: float | None
    ratio_at_low_end: float
    ratio_at_high_end: float
    assumptions: str = ASSUMPTIONS

    def to_dict(self) -> dict:
        return asdict(self)


def frontier_summary(k: int = 1, lo: float = 0.01, hi: float = 100.0, points: int = 121) -> FrontierSummary:
    """Sweep alpha*V over [lo, hi] (log-spaced); locate the maximum and the interval where ratio >= 1.59."""
    xs = np.geomspace(lo, hi, points)
    ratios = np.array([frontier_point(float(x), k).ratio for x in xs])
    i = int(np.argmax(ratios))
    best = minimize_scalar(lambda x: -frontier_point(x, k).ratio,
                           bounds=(xs[max(i - 1, 0)], xs[min(i + 1, len(xs) - 1)]), method="bounded",
                           options={"xatol": 1e-6})
    x_max, r_max = float(best.x), -float(best.fun)
    if r_max < ratios[i]:
        x_max, r_max = float(xs[i]), float(ratios[i])
    start = end = None
    if r_max >= MINEDRAFT_RATIO:
        g = lambda x: frontier_point(x, k).ratio - MINEDRAFT_RATIO  # noqa: E731
        start = lo if g(lo) >= 0 else float(brentq(g, lo, x_max, xtol=1e-8))
        end = hi if g(hi) >= 0 else float(brentq(g, x_max, hi, xtol=1e-8))
    return FrontierSummary(k, (lo, hi), r_max, 1.0 - 1.0 / r_max, x_max, start, end,
                           float(ratios[0]), float(ratios[-1]))
