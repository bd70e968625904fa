"""The search rule of `draftsim plan`: bisection on the arrival rate with repeated seeds.

Rule (stated in every plan.json): a rate is sustainable when at least m of S seeds meet the SLO (a seed meets
it when at least `attainment` of its requests finish within every latency bound). The search first tests the
ceiling; if the ceiling is sustainable the answer is "at least the ceiling". Otherwise it bisects [0, ceiling]
`steps` times, keeping the highest rate found sustainable as `lo` and the lowest found unsustainable as `hi`:
the answer is `lo`, within `hi - lo` = ceiling / 2^steps of the true threshold, provided sustainability is
monotone in the rate (the search assumes it; seeds are shared across rates, so each seed's arrivals are one
Poisson/gamma draw scaled in time, which keeps the comparison between rates free of resampling noise).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def sustainable(passed: list[bool], required: int) -> bool:
    """The rule: at least `required` of the seeds met the SLO."""
    return sum(bool(p) for p in passed) >= required


def false_accept_probability(seeds: int, required: int, p: float = 0.5) -> float:
    """P(at least `required` of `seeds` pass) when each seed passes independently with probability p:
    how often the rule accepts a rate whose workloads meet the SLO only with probability p."""
    return sum(math.comb(seeds, k) * p ** k * (1 - p) ** (seeds - k) for k in range(required, seeds + 1))


@dataclass
class Bisection:
    """Search state of one candidate; `next_rate()` is the rate to test, `record()` its outcome."""

    ceiling: float
    steps: int
    lo: float = 0.0
    hi: float = 0.0
    ceiling_checked: bool = False
    at_ceiling: bool = False
    steps_done: int = 0

    def __post_init__(self) -> None:
        if not self.ceiling > 0 or not math.isfinite(self.ceiling):
            raise ValueError(f"search ceiling must be a positive finite rate, got {self.ceiling!r}")
        self.hi = self.ceiling

    @property
    def done(self) -> bool:
        return self.at_ceiling or (self.ceiling_checked and self.steps_done >= self.steps)

    def next_rate(self) -> float | None:
        if self.done:
            return None
        if not self.ceiling_checked:
            return self.ceiling
        return (self.lo + self.hi) / 2.0

    def record(self, rate: float, ok: bool) -> None:
        if rate != self.next_rate():
            raise ValueError(f"bisection: expected the outcome at {self.next_rate()!r}, got {rate!r}")
        if not self.ceiling_checked:
            self.ceiling_checked = True
            if ok:
                self.lo = self.hi = rate
                self.at_ceiling = True
            return
        if ok:
            self.lo = rate
        else:
            self.hi = rate
        self.steps_done += 1

    @property
    def tolerance(self) -> float:
        """Width of the final bracket: the true threshold lies in [lo, lo + tolerance] (monotone case)."""
        return self.hi - self.lo
