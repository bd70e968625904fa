"""The search rule of `draftsim plan`: the highest arrival rate at which a candidate is stable and meets the SLO.

Judging one rate (stated in every plan.json): every seed's run is measured in its steady-state window
(simulator/measure/steady_state.py). The rate FAILS when the pooled window backlog says the queue grows (overloaded:
arrivals above the service rate), whatever the latencies. Otherwise the SLO attainment (share of window requests
within every bound) is estimated by batch means (BATCHES consecutive groups of window requests per seed, pooled
over seeds). The rate PASSES (is SUSTAINABLE) only when the LOW end of the STRICT_CONFIDENCE (99.99%) Student-t
interval of the attainment clears the target; it FAILS DECIDEDLY when the high end of the CONFIDENCE (95%) interval
is below the target (or it is overloaded); in between it is undecided (counted as not sustainable). The strict low
end makes the answer a lower confidence bound: batch means of a queue are serially correlated, so a 95% interval
covers the true attainment less often than it says (about 86% at 2 seeds x 500 window requests of the M/D/1 test
case, by a Lindley recursion), and the answer is the highest of several tested rates.

Seeds, one at a time (FIRST_SEED_RULE, `SeedSchedule`): a rate's first seed runs alone; when that one run is
overloaded, or its own 99.99% interval lies wholly on one side of the target, it settles the rate (the other seeds
are not run); otherwise the remaining seeds run and the verdict is the pooled one above; while it is still
undecided (neither a pass nor a decided fail) the seeds are doubled, up to search.max_seeds: the runs go to the
rates near the answer, where they move it.

Confidence (ANSWER_CONFIDENCE_RULE): the answer exceeds the rate where the true attainment falls to the target with
probability at most 1 - ANSWER_CONFIDENCE. Each look at a rate passes a rate whose true attainment is below the
target with nominal probability (1 - 0.9999) / 2, and a search looks at most max_tests x (1 + log2(max_seeds /
seeds)) times; but misses come in clusters (a queue that builds up misses many requests in a row), so batch means
are skewed and a t interval covers less than it says. The stated bound is therefore the one a Monte Carlo of
many plans on M/D/1 and M/G/1 queues with known thresholds checks (tests/experiments/test_plan_confidence.py),
not a proof; BATCHES = 5 (fewer, longer batches: less skew per batch), the 99.99% level and the seed doubling up to
search.max_seeds (48) are what that check tuned.

Search: start at the target rate, or at BELOW_SERVICE x an analytic upper bound on the candidate's service rate
when that is lower (experiments/plan/bounds.py: a target above it cannot be sustained, so nothing above it is
worth a first run), or at BELOW_SERVICE x the service rate a saturated probe run measured (`probe_service`,
experiments/plan/point.py SERVICE_PROBE_RULE) when that is lower; while every tested rate is sustainable, double
it (up to search.rate_max, and never past MAX_UTILIZATION x a measured service rate); a failing
overloaded run measures the service rate (its window departure rate), and the next rate tried is just below it,
and no rate above MAX_UTILIZATION (0.95) x that measured service rate counts as passing (a finite run can meet the
SLO there, even above the service rate, while the true tail misses it); then bisect between the highest sustainable and the lowest other rate until they are within
search.rel_tol; then, while tests remain, bisect between the highest undecided and the lowest decided failing rate
until they are within search.rel_tol too (the top of the interval).
The answer is the highest sustainable rate; its interval runs from the answer to the lowest DECIDED fail (or the
measured service rate) among the tested rates (sustainability assumed monotone in the rate; seeds are shared
across rates: each seed's arrivals are one draw scaled in time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from simulator.measure.steady_state import is_overloaded, mean_interval

BATCHES = 5  # batch means per seed (longer batches: clustered misses skew short ones; see Confidence above)
MAX_UTILIZATION = 0.95  # no rate above this fraction of a measured service rate is sustainable: finite runs do
# not resolve the SLO tail that close to saturation (a 12,000-request run of plan_llama70b's 2-replica AR at 0.97 x
# its measured service rate missed the p99 that a 6,250-request search run had met)
BELOW_SERVICE = MAX_UTILIZATION  # after an overloaded run: try this fraction of its measured service rate
CONFIDENCE = 0.95  # attainment interval whose high end below the target decides a fail
STRICT_CONFIDENCE = 0.9999  # attainment interval whose low end must clear the target for a pass (see above)
FIRST_SEED_RULE = ("a rate's first seed runs alone and settles the rate when it is overloaded or its own "
                   f"{STRICT_CONFIDENCE:.2%} attainment interval lies wholly on one side of the target; otherwise "
                   "every seed runs and the pooled verdict decides; while that is undecided the seeds are doubled, "
                   "up to search.max_seeds")
ANSWER_CONFIDENCE = 0.95  # P(answer <= the true threshold) the plan states; checked by Monte Carlo (see above)
ANSWER_CONFIDENCE_RULE = (f"P(answer > the true threshold) <= {1 - ANSWER_CONFIDENCE:.0%}: the answer is the highest "
                          f"rate passing the {STRICT_CONFIDENCE:.2%} rule, a lower confidence bound on the rate where "
                          "the SLO attainment falls to the target; the per-look nominal error does not hold for "
                          "clustered misses, so the bound is the one a Monte Carlo of many plans on an M/D/1 queue "
                          "with a known threshold checks (tests/experiments/test_plan_confidence.py; measured there "
                          "with the plan's default search: answer above the threshold in 2.0% of 300 plans, median "
                          "answer 4.5% below it; M/G/1: 2.0%, 5.0% below), not a proof")


@dataclass(frozen=True)
class Verdict:
    """One rate judged from its seeds' steady-state measurements."""

    rate: float
    passed: bool
    decided: bool
    overloaded: bool
    attainment: float | None
    attainment_low: float | None
    attainment_high: float | None
    service_rate: float | None  # pooled window departure rate when overloaded (the service rate's estimate)
    why: str
    strict_pass: bool = False  # the STRICT_CONFIDENCE interval lies above the target (the pass rule)
    strict_fail: bool = False  # ... lies below it
    seeds_run: int = 0


def settled_by_first_seed(v: Verdict) -> bool:
    """FIRST_SEED_RULE on the first seed's verdict: overloaded, or its strict interval on one side of the target."""
    return v.overloaded or v.strict_pass or v.strict_fail


def strict_high_end(batches: np.ndarray) -> Any:
    """High end of the STRICT_CONFIDENCE interval of batch means (per row of a 2-D array): below the target, the
    rate fails strictly (`judge`; the early stop of experiments/plan/early_stop.py asks it of every completion)."""
    return mean_interval(batches, STRICT_CONFIDENCE)[2]


def judge(rate: float, seeds: list[dict[str, Any]], target: float) -> Verdict:
    """Judge `rate` from per-seed results carrying window arrivals/departures/length and attainment batch means.

    A seed stopped before its window ended (`window_final` false: experiments/plan/early_stop.py, a decided strict
    fail) has departures that are not final: the overload test is skipped and its batches are the most favourable
    completion of its window (every completion fails strictly)."""
    arrivals = sum(int(s["window_arrivals"]) for s in seeds)
    departures = sum(int(s["window_departures"]) for s in seeds)
    n = len(seeds)
    final = all(s.get("window_final", True) for s in seeds)
    if arrivals == 0:
        return Verdict(rate, False, False, False, None, None, None, None, "no steady-state window", seeds_run=n)
    if final and is_overloaded(arrivals, departures):
        service = departures / sum(float(s["window_length_s"]) for s in seeds)
        return Verdict(rate, False, True, True, None, None, None, service,
                       f"overloaded: departures {departures} < arrivals {arrivals} in the window", seeds_run=n)
    batches = np.concatenate([np.asarray(s["attainment_batches"], float) for s in seeds])
    m, lo, hi = mean_interval(batches, CONFIDENCE)
    _, s_lo, s_hi = mean_interval(batches, STRICT_CONFIDENCE)
    passed, failed = s_lo >= target, hi < target
    why = (f"attainment {m:.4g} [{max(lo, 0):.4g}, {min(hi, 1):.4g}] ({STRICT_CONFIDENCE:.2%} low end "
           f"{max(s_lo, 0):.4g}) vs {target:g}")
    if not final:
        why = (f"stopped early: every completion of the window fails the {STRICT_CONFIDENCE:.2%} interval (most "
               f"favourable: {why}; overload not measured)")
    return Verdict(rate, passed, passed or failed, False, m, max(lo, 0.0), min(hi, 1.0), None, why,
                   strict_pass=passed, strict_fail=s_hi < target, seeds_run=n)


@dataclass
class SeedSchedule:
    """FIRST_SEED_RULE at one candidate's current rate: `wanted()` says which seed indices run next, `give(runs)`
    takes their results and returns the rate's verdict once it is settled (None: more seeds first)."""

    seeds: int
    max_seeds: int
    first_seed_settles: bool = True
    runs: list[dict[str, Any]] = field(default_factory=list)  # results at the current rate so far

    def __post_init__(self) -> None:
        if not 1 <= self.seeds <= self.max_seeds:
            raise ValueError(f"seed schedule: need 1 <= seeds <= max_seeds, got {self.seeds}, {self.max_seeds}")

    def wanted(self) -> range:
        """Seed indices to run next at the current rate."""
        have = len(self.runs)
        if have == 0:
            return range(1 if self.first_seed_settles else self.seeds)
        if have < self.seeds:
            return range(have, self.seeds)
        return range(have, min(2 * have, self.max_seeds))

    @property
    def settling(self) -> bool:
        """The next run is a rate's first seed under FIRST_SEED_RULE (it may settle the rate alone)."""
        return self.first_seed_settles and not self.runs

    def give(self, rate: float, runs: list[dict[str, Any]], target: float
             ) -> tuple[Verdict, list[dict[str, Any]]] | None:
        """The runs of `wanted()`; (verdict, every run at this rate) once the rate is settled, else None."""
        runs = self.runs + list(runs)
        v = judge(rate, runs, target)
        n = len(runs)
        if n < self.seeds:  # only a lone first seed can settle a rate before every seed ran
            more = not (n == 1 and self.first_seed_settles and settled_by_first_seed(v))
        else:  # every seed ran: double them while undecided
            more = n < self.max_seeds and not v.decided
        if more:
            self.runs = runs
            return None
        self.runs = []
        return v, runs


@dataclass
class RateSearch:
    """Search state of one candidate: `next_rate()` is the rate to test, `record()` its verdict."""

    start: float
    rate_max: float | None
    rel_tol: float
    max_tests: int
    service_bound: float | None = None  # an analytic upper bound on the service rate: where to start at most
    probe_service: float | None = None  # the service rate a saturated probe run measured (planner SERVICE_PROBE_RULE)
    verdicts: list[Verdict] = field(default_factory=list)
    _next: float | None = None

    def __post_init__(self) -> None:
        if not self.start > 0 or not math.isfinite(self.start):
            raise ValueError(f"search start must be a positive finite rate, got {self.start!r}")
        start = self.start
        if self.service_bound is not None:
            start = min(start, BELOW_SERVICE * self.service_bound)
        if self.probe_service is not None:  # no rate above MAX_UTILIZATION x a measured service rate passes
            start = min(start, BELOW_SERVICE * self.probe_service)
        self._next = min(start, self.rate_max) if self.rate_max else start

    @property
    def lo(self) -> float:
        """Highest rate tested that passed (0: none): the answer."""
        return max((v.rate for v in self.verdicts if v.passed and v.decided), default=0.0)

    @property
    def hi(self) -> float | None:
        """Lowest rate tested that did not pass decidedly (None: none)."""
        return min((v.rate for v in self.verdicts if not (v.passed and v.decided)), default=None)

    @property
    def at_ceiling(self) -> bool:
        return self.rate_max is not None and self.lo >= self.rate_max

    @property
    def done(self) -> bool:
        return self._next is None

    def next_rate(self) -> float | None:
        return self._next

    def stop(self) -> None:
        """End the search here (the plan's scope needs no more of it)."""
        self._next = None

    def record(self, v: Verdict) -> None:
        if v.rate != self._next:
            raise ValueError(f"rate search: expected the verdict at {self._next!r}, got {v.rate!r}")
        self.verdicts.append(v)
        service = self.service_rate
        if service is not None:  # a finite run can pass just below or even above the service rate
            cap = MAX_UTILIZATION * service
            self.verdicts = [replace(x, passed=False, decided=True,
                                     why=f"above {MAX_UTILIZATION:g} x the service rate {service:.4g} req/s "
                                         "measured (an overloaded run or the saturated probe)")
                             if x.passed and x.rate > cap else x for x in self.verdicts]
        self._next = self._choose()

    @property
    def service_rate(self) -> float | None:
        """The lowest service rate measured: window departure rates of overloaded runs and the saturated probe's
        (None: neither)."""
        rates = [v.service_rate for v in self.verdicts if v.service_rate]
        if self.probe_service:
            rates.append(self.probe_service)
        return min(rates, default=None)

    def _choose(self) -> float | None:
        lo, hi = self.lo, self.hi
        if len(self.verdicts) >= self.max_tests or self.at_ceiling:
            return None
        service = self.service_rate
        if hi is None:  # everything passed so far: grow (never past MAX_UTILIZATION x a measured service rate)
            nxt = 2.0 * lo
            if service is not None:
                cap = MAX_UTILIZATION * service
                if lo >= cap:  # the cap passed: no higher rate can
                    return None
                nxt = min(nxt, cap)
            return min(nxt, self.rate_max) if self.rate_max else nxt
        if hi - lo <= self.rel_tol * hi:  # answer found; now narrow its interval's top (the lowest decided fail)
            top = self.interval[1]
            if top is None:
                nxt = 2.0 * hi
                return None if self.rate_max and hi >= self.rate_max else min(nxt, self.rate_max or nxt)
            undecided = max((v.rate for v in self.verdicts if not v.decided and v.rate < top), default=hi)
            if top - undecided <= self.rel_tol * top:  # the edge of the decided fails is located to rel_tol
                return None
            return (undecided + top) / 2.0
        tested = {v.rate for v in self.verdicts}
        if service is not None:
            below = BELOW_SERVICE * service
            if lo < below < hi and below not in tested and (hi - below) > self.rel_tol * hi:
                return below
        if lo == 0.0:
            return hi / 2.0
        return (lo + hi) / 2.0

    @property
    def interval(self) -> tuple[float, float | None]:
        """[the answer, lowest decided fail or measured service rate] (None: neither)."""
        low = self.lo
        fails = [v.rate for v in self.verdicts if not v.passed and v.decided]
        if self.service_rate is not None:
            fails.append(self.service_rate)
        return low, min(fails, default=None)
