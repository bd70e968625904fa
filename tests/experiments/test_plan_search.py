"""The rate search on its own: where it lands against a known monotone threshold, how it uses an overloaded run's
service rate, and the verdict rule (overload, attainment interval)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.plan.search import BELOW_SERVICE, MAX_UTILIZATION, RateSearch, Verdict, judge, settled_by_first_seed


def _verdict(rate: float, threshold: float, service: float) -> Verdict:
    if rate > service:  # above the service rate: overloaded, departures at the service rate
        return Verdict(rate, False, True, True, None, None, None, service, "overloaded")
    ok = rate <= threshold
    return Verdict(rate, ok, True, False, 1.0 if ok else 0.0, None, None, None, "", strict_pass=ok)


@given(start=st.floats(0.1, 100), threshold=st.floats(0.01, 500), slack=st.floats(1.0, 3.0),
       tol=st.floats(0.01, 0.2))
@settings(max_examples=300, deadline=None)
def test_search_brackets_a_monotone_threshold(start, threshold, slack, tol):
    service = threshold * slack  # the SLO threshold lies at or below the service rate
    s = RateSearch(start, None, tol, 60)
    while not s.done:
        s.record(_verdict(s.next_rate(), threshold, service))
    # once an overloaded run measured the service rate, nothing above MAX_UTILIZATION x it passes
    effective = min(threshold, MAX_UTILIZATION * s.service_rate) if s.service_rate else threshold
    assert s.lo <= effective
    assert s.hi is not None and s.hi > effective and s.hi - s.lo <= tol * s.hi
    # the answer's interval holds the true sustainable rate, and is no wider than the bracket
    low, high = s.interval
    assert low <= effective < high and high - low <= s.hi - s.lo
    assert all(not v.passed for v in s.verdicts if v.overloaded)


def test_an_overloaded_run_sends_the_search_just_below_its_service_rate():
    s = RateSearch(100.0, None, 0.01, 20)
    s.record(_verdict(100.0, 9.0, 10.0))
    assert s.next_rate() == pytest.approx(BELOW_SERVICE * 10.0)  # not 50: the measured service rate bounds it


def test_rate_max_caps_the_growth():
    s = RateSearch(4.0, 10.0, 0.05, 20)
    while not s.done:
        s.record(_verdict(s.next_rate(), 100.0, 200.0))
    assert s.at_ceiling and s.lo == 10.0 and [v.rate for v in s.verdicts] == [4.0, 8.0, 10.0]


def test_record_must_answer_the_asked_rate():
    s = RateSearch(8.0, None, 0.05, 4)
    with pytest.raises(ValueError, match="expected the verdict at 8.0"):
        s.record(_verdict(4.0, 1.0, 2.0))
    with pytest.raises(ValueError, match="positive finite rate"):
        RateSearch(0.0, None, 0.05, 4)


def _seed(arrivals, departures, batches, length=10.0):
    return {"window_arrivals": arrivals, "window_departures": departures, "window_length_s": length,
            "attainment_batches": batches}


def test_judge_overload_beats_attainment():
    v = judge(5.0, [_seed(1000, 800, [1.0] * 10)] * 2, 0.99)
    assert v.overloaded and not v.passed and v.decided and v.service_rate == pytest.approx(80.0)


def test_judge_decides_only_when_the_interval_is_on_one_side():
    clear = judge(5.0, [_seed(1000, 1000, [0.995, 0.997, 0.996, 0.998] * 3)], 0.99)
    assert clear.passed and clear.decided and clear.attainment_low >= 0.99
    close = judge(5.0, [_seed(1000, 1000, [0.98, 1.0, 0.985, 1.0, 0.99, 0.995])], 0.99)
    assert not close.passed and not close.decided and close.attainment_low < 0.99 < close.attainment_high
    fail = judge(5.0, [_seed(1000, 1000, [0.5, 0.6, 0.55, 0.52])], 0.99)
    assert not fail.passed and fail.decided


def test_a_pass_needs_the_strict_interval_above_the_target():
    # the 95% interval clears 0.99 but the 99.9% one does not: not sustainable, and not a decided fail either
    v = judge(5.0, [_seed(1000, 1000, [0.991, 0.999, 0.993, 0.998, 0.992, 0.997, 0.994, 0.999])], 0.99)
    assert v.attainment_low >= 0.99 and not v.passed and not v.decided and not v.strict_fail


def test_the_first_seed_settles_only_clear_rates():
    assert settled_by_first_seed(judge(5.0, [_seed(1000, 800, [1.0] * 10)], 0.99))  # overloaded
    assert settled_by_first_seed(judge(5.0, [_seed(1000, 1000, [1.0] * 10)], 0.99))  # no miss in 10 batches
    assert settled_by_first_seed(judge(5.0, [_seed(1000, 1000, [0.5, 0.6, 0.55, 0.52] * 2)], 0.99))
    unclear = judge(5.0, [_seed(1000, 1000, [0.98, 1.0, 0.985, 1.0, 0.99, 0.995])], 0.99)
    assert not settled_by_first_seed(unclear)
    # a decided fail at 95% that the strict interval does not settle: the other seeds must run
    near = judge(5.0, [_seed(1000, 1000, [0.97, 0.985, 0.975, 0.99, 0.98, 0.972, 0.988, 0.979])], 0.99)
    assert near.decided and not near.passed and not settled_by_first_seed(near)


@given(start=st.floats(0.1, 100), threshold=st.floats(0.01, 500), slack=st.floats(1.0, 3.0),
       bound_factor=st.floats(0.2, 5.0))
@settings(max_examples=200, deadline=None)
def test_a_service_bound_moves_only_the_start(start, threshold, slack, bound_factor):
    # even a wrong bound (below the true service rate) leaves the search bracketing the threshold
    service = threshold * slack
    bound = service * bound_factor
    s = RateSearch(start, None, 0.05, 60, bound)
    assert s.next_rate() == pytest.approx(min(start, BELOW_SERVICE * bound))
    while not s.done:
        s.record(_verdict(s.next_rate(), threshold, service))
    effective = min(threshold, MAX_UTILIZATION * s.service_rate) if s.service_rate else threshold
    assert s.lo <= effective and s.hi is not None and s.hi > effective and s.hi - s.lo <= 0.05 * s.hi


def test_service_rate_bound_by_hand():
    from experiments.plan.bounds import service_rate_bound
    from simulator.costs.latency import LinearProfile

    prof = LinearProfile("p", {"const": 0.01, "num_seqs": 1e-4, "batched_tokens": 2e-5, "kv_tokens": 1e-7})
    t = 0.01 + 64 * 1e-4 + 64 * 4 * 2e-5  # a full batch of 64 verifying k + 1 = 4 tokens each, no context
    assert service_rate_bound(prof, 64, 3, 199.0, replicas=2) == pytest.approx(2 * 64 * 4 / (t * 199.0))
    assert service_rate_bound(prof, 64, 0, 0.0) is None


def test_the_seed_schedule_runs_one_seed_then_the_rest_then_doubles_while_undecided():
    from experiments.plan.search import SeedSchedule

    clear = _seed(1000, 1000, [1.0] * 5)  # no miss: a strict pass on its own
    unclear = _seed(1000, 1000, [0.98, 1.0, 0.985, 1.0, 0.99])  # around the 0.99 target
    s = SeedSchedule(3, 12)
    assert list(s.wanted()) == [0] and s.settling
    v, runs = s.give(5.0, [clear], 0.99)  # settled by the first seed alone
    assert v.passed and len(runs) == 1 and list(s.wanted()) == [0]
    assert s.give(5.0, [unclear], 0.99) is None and list(s.wanted()) == [1, 2] and not s.settling
    assert s.give(5.0, [unclear] * 2, 0.99) is None and list(s.wanted()) == [3, 4, 5]  # undecided: doubled
    assert s.give(5.0, [unclear] * 3, 0.99) is None and list(s.wanted()) == list(range(6, 12))
    v, runs = s.give(5.0, [unclear] * 6, 0.99)  # max_seeds reached: the verdict as it stands
    assert len(runs) == 12 and not v.decided and list(s.wanted()) == [0]
    # a decided fail after every seed ran is not doubled; without the first-seed rule every seed runs at once
    every = SeedSchedule(2, 8, first_seed_settles=False)
    assert list(every.wanted()) == [0, 1]
    v, runs = every.give(5.0, [_seed(1000, 1000, [0.5, 0.6, 0.55, 0.52, 0.5])] * 2, 0.99)
    assert v.decided and not v.passed and len(runs) == 2
    with pytest.raises(ValueError, match="seeds <= max_seeds"):
        SeedSchedule(4, 2)
