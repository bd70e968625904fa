"""The SD-vs-AR crossover of `draftsim plan`: the arrival rate at which a drafting candidate's mean steady-state E2E
latency stops beating AR's on the same GPUs (same TP, replicas and scheduler), found by its own search.

Rule (CROSSOVER_RULE): at a rate both modes run the plan's seeds with runs of the SLO search's size; a seed gives
both modes the same arrivals and request draws (common random numbers), so their steady-state windows hold the same
requests, and the paired differences of the window's E2E batch means (SD minus AR, BATCHES per seed, pooled over
the seeds) have a CROSSOVER_CONFIDENCE Student-t interval. SD is decidedly faster when that interval lies below 0,
decidedly slower when above; a mode that is overloaded while the other is not is the slower one. The search runs
over [CROSSOVER_LOW x top, top], top = MAX_UTILIZATION x the lower of the two measured service rates (both stable
below it): the top first (faster there: SD pays at every rate both sustain), then the bottom (slower there: it never
pays), then bisection between the highest decidedly faster and the lowest decidedly slower rate (an undecided rate
between them: the wider of the gaps beside the undecided ones is halved) until they are within rel_tol of the upper.
The crossover is where the pooled mean difference, interpolated linearly between the tested rates, changes sign;
its interval is [highest decidedly faster, lowest decidedly slower] (the mean E2E difference assumed to rise with
the rate); both are reported to 3 significant digits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from experiments.plan.search import MAX_UTILIZATION
from simulator.measure.metrics import round_sig
from simulator.measure.steady_state import mean_interval

CROSSOVER_CONFIDENCE = 0.99  # interval of the paired E2E difference that decides a side
CROSSOVER_LOW = 0.25  # the range's bottom as a fraction of its top
DIGITS = 3  # significant digits of the reported rates
CROSSOVER_RULE = ("SD-vs-AR crossover: at each rate both modes run the plan's seeds at the SLO search's run size on "
                  "common random numbers (a seed: the same arrivals and requests for both); SD is decidedly faster "
                  f"(slower) when the {CROSSOVER_CONFIDENCE:.0%} interval of the paired differences of the window's "
                  "mean E2E (batch means, pooled over the seeds) lies below (above) 0, or when only AR (only SD) is "
                  f"overloaded; searched over [{CROSSOVER_LOW:g}, 1] x {MAX_UTILIZATION:g} x the lower measured "
                  "service rate of the two: the top, the bottom, then bisection between the highest decidedly faster and the "
                  "lowest decidedly slower rate to search.rel_tol; the crossover is where the interpolated mean "
                  "difference changes sign, its interval those two rates (3 significant digits)")
Kind = Literal["crossing", "faster_throughout", "slower_throughout", "undecided", "no_range"]


@dataclass(frozen=True)
class Comparison:
    """SD against AR at one rate, from paired runs."""

    rate: float
    diff_s: float | None  # pooled mean of (SD - AR) window E2E batch means; None when a mode is overloaded
    low_s: float | None
    high_s: float | None
    sd_faster: bool | None  # True / False: decided; None: undecided
    seeds: int
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"rate": round_sig(self.rate, DIGITS), "sd_minus_ar_e2e_s": _sig(self.diff_s),
                "interval_s": [_sig(self.low_s), _sig(self.high_s)], "sd_faster": self.sd_faster,
                "seeds": self.seeds, "why": self.why}


def _sig(x: float | None) -> float | None:
    return None if x is None else round_sig(float(x), DIGITS)


def compare(rate: float, sd_runs: list[dict[str, Any]], ar_runs: list[dict[str, Any]]) -> Comparison:
    """Judge one rate from per-seed point records of both modes (the same seeds, in the same order): `overloaded`
    and `e2e_batches` (the window's E2E batch means in arrival order)."""
    if len(sd_runs) != len(ar_runs) or not sd_runs:
        raise ValueError(f"crossover: expected paired runs of both modes, got {len(sd_runs)} and {len(ar_runs)}")
    n = len(sd_runs)
    sd_over = any(r.get("overloaded") for r in sd_runs)
    ar_over = any(r.get("overloaded") for r in ar_runs)
    if sd_over or ar_over:
        faster = None if sd_over and ar_over else ar_over
        why = {None: "both overloaded", True: "AR overloaded, SD stable", False: "SD overloaded, AR stable"}[faster]
        return Comparison(rate, None, None, None, faster, n, why)
    diffs = []
    for s, a in zip(sd_runs, ar_runs):
        sb, ab = np.asarray(s.get("e2e_batches") or [], float), np.asarray(a.get("e2e_batches") or [], float)
        if sb.size == 0 or sb.shape != ab.shape:
            return Comparison(rate, None, None, None, None, n, "no paired steady-state window")
        diffs.append(sb - ab)
    m, lo, hi = mean_interval(np.concatenate(diffs), CROSSOVER_CONFIDENCE)
    faster = True if hi < 0 else False if lo > 0 else None
    side = {True: "SD faster", False: "SD slower", None: "undecided"}[faster]
    return Comparison(rate, m, lo, hi, faster, n, f"{side}: SD - AR mean E2E {m:.4g} s [{lo:.4g}, {hi:.4g}]")


@dataclass(frozen=True)
class Crossover:
    """The search's answer for one drafting candidate (plan.json `sd_vs_ar`)."""

    kind: Kind
    rate_req_s: float | None  # the crossing's estimate ("crossing" only)
    interval_req_s: tuple[float | None, float | None]  # highest decidedly faster, lowest decidedly slower
    range_req_s: tuple[float, float] | None
    comparisons: tuple[Comparison, ...]
    why: str

    def to_json(self) -> dict[str, Any]:
        lo, hi = self.interval_req_s
        doc: dict[str, Any] = {"kind": self.kind, "crossover_req_s": _sig(self.rate_req_s),
                               "interval_req_s": [_sig(lo), _sig(hi)],
                               "range_req_s": [_sig(x) for x in self.range_req_s] if self.range_req_s else None,
                               "why": self.why, "rule": CROSSOVER_RULE,
                               "rates": [c.to_json() for c in sorted(self.comparisons, key=lambda c: c.rate)]}
        if self.kind == "faster_throughout":
            doc["sd_faster_up_to_req_s"] = _sig(lo)
        return doc


def no_crossover(why: str) -> Crossover:
    return Crossover("no_range", None, (None, None), None, (), why)


@dataclass
class CrossoverSearch:
    """Search state of one SD-vs-AR pair: `next_rate()` is the rate to compare, `record()` its comparison."""

    top: float
    rel_tol: float
    max_tests: int
    comparisons: list[Comparison] = field(default_factory=list)
    _next: float | None = None

    def __post_init__(self) -> None:
        if not self.top > 0 or not np.isfinite(self.top):
            raise ValueError(f"crossover search: the range's top must be a positive finite rate, got {self.top!r}")
        self._next = self.top

    @property
    def bottom(self) -> float:
        return CROSSOVER_LOW * self.top

    @property
    def done(self) -> bool:
        return self._next is None

    def next_rate(self) -> float | None:
        return self._next

    @property
    def faster_up_to(self) -> float | None:
        """Highest rate decidedly faster below every decidedly slower one."""
        slow = self.slower_from
        return max((c.rate for c in self.comparisons if c.sd_faster is True and (slow is None or c.rate < slow)),
                   default=None)

    @property
    def slower_from(self) -> float | None:
        return min((c.rate for c in self.comparisons if c.sd_faster is False), default=None)

    def record(self, c: Comparison) -> None:
        if c.rate != self._next:
            raise ValueError(f"crossover search: expected the comparison at {self._next!r}, got {c.rate!r}")
        self.comparisons.append(c)
        self._next = self._choose()

    def _choose(self) -> float | None:
        tested = {c.rate for c in self.comparisons}
        if len(self.comparisons) >= self.max_tests:
            return None
        first = self.comparisons[0]
        if first.sd_faster is True:  # faster at the top: at every rate both sustain
            return None
        if self.bottom not in tested:
            return self.bottom
        if next(c for c in self.comparisons if c.rate == self.bottom).sd_faster is False:
            return None  # slower already at the bottom
        lo = self.faster_up_to if self.faster_up_to is not None else self.bottom
        hi = self.slower_from if self.slower_from is not None else self.top
        if hi - lo <= self.rel_tol * hi:
            return None
        inside = sorted(c.rate for c in self.comparisons if c.sd_faster is None and lo < c.rate < hi)
        if not inside:
            return (lo + hi) / 2
        gaps = [(inside[0] - lo, lo, inside[0]), (hi - inside[-1], inside[-1], hi)]
        width, a, b = max(gaps)
        if width <= self.rel_tol * hi:  # the undecided zone itself is the interval
            return None
        return (a + b) / 2

    def result(self) -> Crossover:
        comps = tuple(self.comparisons)
        rng = (self.bottom, self.top)
        lo, hi = self.faster_up_to, self.slower_from
        if lo is None and hi is None:
            return Crossover("undecided", None, (None, None), rng, comps,
                             "no tested rate decided a side (the difference is within its interval everywhere)")
        if hi is None:
            return Crossover("faster_throughout", None, (lo, None), rng, comps,
                             f"faster than AR at every rate decided, up to {round_sig(lo, DIGITS):g} req/s (the "
                             "range's top is below both modes' service rates)")
        if lo is None:
            return Crossover("slower_throughout", None, (None, hi), rng, comps,
                             f"no faster than AR from {round_sig(hi, DIGITS):g} req/s, the lowest rate decided")
        return Crossover("crossing", self._sign_change(lo, hi), (lo, hi), rng, comps,
                         f"faster at {round_sig(lo, DIGITS):g} req/s, slower at {round_sig(hi, DIGITS):g}")

    def _sign_change(self, lo: float, hi: float) -> float:
        """Where the pooled mean difference, linear between tested rates in [lo, hi], first reaches 0 (an
        overloaded SD counts as slower, an overloaded AR as faster: their differences are unknown, so such a rate
        is placed at the interval's edge)."""
        pts = sorted((c.rate, c.diff_s) for c in self.comparisons if lo <= c.rate <= hi and c.diff_s is not None)
        for (r0, d0), (r1, d1) in zip(pts, pts[1:]):
            if d0 < 0 <= d1:
                return r0 + (r1 - r0) * (-d0) / (d1 - d0)
        return (lo + hi) / 2  # no sign change among measured differences (an edge was decided by overload)
