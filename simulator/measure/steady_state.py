"""Steady-state measurement of one run: the stated window rule, window throughput/goodput and the overload flag.

Rule (one place for `run` summaries, sweeps and `plan`): the measurement window is the middle of the arrival
span, [t_first + w T, t_last - w T] with T = t_last - t_first and w = WARMUP_FRACTION (warm-up: the first w of
the arrivals' time; drain: everything after the last w, including the tail after the last arrival). Latency
percentiles and SLO attainment are taken over the requests ARRIVING in the window; throughput, requests/s and
goodput count the requests FINISHING in the window, per second of window.

Overload: in steady state departures keep up with arrivals, so the backlog (arrived - finished) changes only by
noise over the window. A run is flagged overloaded when the window's backlog growth exceeds
max(OVERLOAD_MIN_GROWTH, OVERLOAD_Z / sqrt(arrivals in window)) of its arrivals, i.e. the departure rate is
clearly below the arrival rate (arrival rate above the service rate). No speedup, capacity or sustainable rate
may be read from an overloaded run.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

WARMUP_FRACTION = 0.1  # of the arrival span, excluded at each end
OVERLOAD_MIN_GROWTH = 0.03  # backlog growth (fraction of window arrivals) below which a run is never flagged
OVERLOAD_Z = 3.0  # ... and noise allowance: OVERLOAD_Z / sqrt(window arrivals)
MIN_WINDOW_REQUESTS = 20  # fewer arrivals in the window: no steady-state figures (None)
WINDOW_RULE = (f"requests arriving in the middle {1 - 2 * WARMUP_FRACTION:.0%} of the arrival span (first and last "
               f"{WARMUP_FRACTION:.0%} excluded: warm-up and drain); rates count completions inside that window")
OVERLOAD_RULE = (f"overloaded when the backlog (arrived - finished) grows over the window by more than "
                 f"max({OVERLOAD_MIN_GROWTH:g}, {OVERLOAD_Z:g}/sqrt(n)) of the n window arrivals")


@dataclass(frozen=True)
class SteadyState:
    """What one run measured in its steady-state window."""

    start_s: float
    end_s: float
    arrivals: int  # requests arriving in the window
    departures: int  # requests finishing in the window
    good_departures: int  # ... of which within the SLO
    output_tokens: int  # output tokens of the requests finishing in the window
    in_window: np.ndarray  # boolean per request: arrived in the window

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def arrival_rate(self) -> float:
        return self.arrivals / self.length_s

    @property
    def departure_rate(self) -> float:
        return self.departures / self.length_s

    @property
    def backlog_growth(self) -> float:
        """(arrivals - departures) in the window over its arrivals: ~0 in steady state, 1 - mu/lambda above mu."""
        return (self.arrivals - self.departures) / self.arrivals

    @property
    def overload_threshold(self) -> float:
        return overload_threshold(self.arrivals)

    @property
    def overloaded(self) -> bool:
        return is_overloaded(self.arrivals, self.departures)


def overload_threshold(arrivals: int) -> float:
    """Backlog growth (fraction of the window's arrivals) above which a window is overloaded."""
    return max(OVERLOAD_MIN_GROWTH, OVERLOAD_Z / math.sqrt(arrivals))


def is_overloaded(arrivals: int, departures: int) -> bool:
    """The overload rule on window counts (one run, or several seeds pooled)."""
    return arrivals > 0 and (arrivals - departures) / arrivals > overload_threshold(arrivals)


def steady_window(arrival: np.ndarray, finish: np.ndarray) -> tuple[float, float] | None:
    """The window [start, end] of the rule above, or None when the arrivals span no time."""
    a = np.asarray(arrival, dtype=float)
    if a.size == 0:
        return None
    t0, t1 = float(a.min()), float(a.max())
    span = t1 - t0
    if not span > 0:
        return None
    return t0 + WARMUP_FRACTION * span, t1 - WARMUP_FRACTION * span


def measure(arrival: np.ndarray, finish: np.ndarray, output_len: np.ndarray, good: np.ndarray) -> SteadyState | None:
    """The run's steady state (None when its window holds fewer than MIN_WINDOW_REQUESTS arrivals)."""
    a = np.asarray(arrival, dtype=float)
    f = np.asarray(finish, dtype=float)  # NaN/inf: not finished
    w = steady_window(a, f)
    if w is None:
        return None
    lo, hi = w
    in_window = (a >= lo) & (a <= hi)
    n = int(in_window.sum())
    if n < MIN_WINDOW_REQUESTS:
        return None
    done_in = np.isfinite(f) & (f >= lo) & (f <= hi)
    return SteadyState(lo, hi, n, int(done_in.sum()), int((done_in & np.asarray(good, bool)).sum()),
                       int(np.asarray(output_len)[done_in].sum()), in_window)


def batch_means(values: np.ndarray, batches: int = 10) -> np.ndarray:
    """Means of `batches` consecutive equal-size groups of `values` (in arrival order); fewer when too short."""
    v = np.asarray(values, dtype=float)
    b = min(batches, v.size)
    if b == 0:
        return np.empty(0)
    return np.array([chunk.mean() for chunk in np.array_split(v, b)])


@functools.lru_cache(maxsize=256)
def _t_quantile(p: float, dof: int) -> float:
    """Student-t quantile, computed once per (p, dof) (the plan's early stop asks it at every check): scipy's
    inverse t CDF, the function scipy.stats.t.ppf calls, imported alone (a plain run does not import scipy, and
    scipy.stats would cost every plan worker the import of all its distributions)."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, p))


def mean_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean of independent samples (batch means); one sample:
    the interval is unbounded on the side it cannot resolve ([-inf, inf] around it). A 2-D array holds one sample
    set per row (the last axis), and the three come back as arrays, one value per row."""
    s = np.asarray(samples, dtype=float)
    n = s.shape[-1]
    if s.ndim == 1:
        m = float(s.mean())
        if n < 2:
            return m, -math.inf, math.inf
        half = float(_t_quantile(0.5 + confidence / 2, n - 1) * s.std(ddof=1) / math.sqrt(n))
        return m, m - half, m + half
    m = s.mean(axis=-1)
    if n < 2:
        return m, np.full_like(m, -math.inf), np.full_like(m, math.inf)
    half = _t_quantile(0.5 + confidence / 2, n - 1) * s.std(axis=-1, ddof=1) / math.sqrt(n)
    return m, m - half, m + half


SATURATED_TRIM_FRACTION = 0.1  # the saturated window drops this share of the finishes at each end


def saturated_window(requests_df, steps_df, trim: int) -> tuple[float, float] | None:
    """The second rule, for saturated closed loops (the PSD bound studies, where every arrival follows a finish):
    output tokens/s and mean E2E inside the window between the `trim`-th finish and the `trim`-th
    from last (standard deletion of warm-up and drain): tokens the target emitted in the window over its length,
    and the mean E2E of the requests that both arrived and finished in it. None when the window is empty (or the
    steps table has no `emitted_tokens`, as hand-made tables in tests)."""
    fin = np.sort(requests_df["finish_time"].to_numpy(dtype=float))
    fin = fin[np.isfinite(fin)]
    if trim < 1 or len(fin) <= 2 * trim + 1 or "emitted_tokens" not in steps_df.columns:
        return None
    t_a, t_b = fin[trim], fin[len(fin) - 1 - trim]
    tgt = steps_df[steps_df["device"] == "target"]
    inside = (tgt["end"] > t_a) & (tgt["end"] <= t_b)
    sel = (requests_df["arrival_time"] >= t_a) & (requests_df["finish_time"] <= t_b)
    if t_b <= t_a or not sel.any():
        return None
    return float(tgt.loc[inside, "emitted_tokens"].sum()) / (t_b - t_a), float(requests_df.loc[sel, "e2e"].mean())
