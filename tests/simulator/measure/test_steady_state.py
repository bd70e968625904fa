"""The steady-state window and the overload flag, against an independent single-server queue (Lindley recursion)
and through the engine (constant step time, one sequence at a time: an M/D/1 queue)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.measure.metrics import steady_state_summary
from simulator.measure.steady_state import WARMUP_FRACTION, batch_means, mean_interval, measure


def lindley(arrivals: np.ndarray, service: float) -> np.ndarray:
    """Finish times of a FIFO single server with constant service: start_i = max(arrival_i, finish_{i-1})."""
    finish = np.empty_like(arrivals)
    free = -np.inf
    for i, a in enumerate(arrivals):
        free = max(a, free) + service
        finish[i] = free
    return finish


def _table(rate: float, service: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))
    return arrivals, lindley(arrivals, service)


@settings(max_examples=30, deadline=None)
@given(rho=st.sampled_from([0.3, 0.6, 0.8, 0.9, 0.95]), seed=st.integers(0, 10_000))
def test_never_flags_a_stable_queue(rho, seed):
    a, f = _table(rho / 0.1, 0.1, 2000, seed)
    ss = measure(a, f, np.full(a.size, 10), np.ones(a.size, bool))
    assert not ss.overloaded, (rho, ss.backlog_growth, ss.overload_threshold)
    assert ss.departure_rate == pytest.approx(ss.arrival_rate, rel=0.1)


@settings(max_examples=30, deadline=None)
@given(rho=st.sampled_from([1.2, 1.5, 2.0, 4.0]), seed=st.integers(0, 10_000))
def test_flags_a_queue_above_its_service_rate(rho, seed):
    a, f = _table(rho / 0.1, 0.1, 2000, seed)
    ss = measure(a, f, np.full(a.size, 10), np.ones(a.size, bool))
    assert ss.overloaded, (rho, ss.backlog_growth)
    # the departure rate of an overloaded window is the service rate (10 req/s): what the plan brackets with
    assert ss.departure_rate == pytest.approx(10.0, rel=0.05)
    assert ss.backlog_growth == pytest.approx(1 - 1 / rho, abs=0.08)


def test_window_excludes_warm_up_and_drain():
    a = np.arange(100, dtype=float)  # one arrival per second, served instantly except the last ones
    f = a + 0.5
    f[-5:] = 500.0  # a drain tail after the last arrival does not enter the window
    ss = measure(a, f, np.full(100, 3), np.ones(100, bool))
    assert (ss.start_s, ss.end_s) == (WARMUP_FRACTION * 99, 99 - WARMUP_FRACTION * 99)
    assert ss.arrivals == int(((a >= ss.start_s) & (a <= ss.end_s)).sum())
    assert ss.departure_rate == pytest.approx(1.0, rel=0.03) and not ss.overloaded
    assert ss.output_tokens == 3 * ss.departures


def test_no_window_for_an_offline_batch():
    assert measure(np.zeros(50), np.arange(50.0), np.ones(50), np.ones(50, bool)) is None
    df = pd.DataFrame({"arrival_time": np.zeros(5), "finish_time": np.ones(5), "output_len": np.ones(5),
                       "ttft": np.ones(5), "tpot": np.ones(5), "e2e": np.ones(5)})
    assert set(steady_state_summary(df, {"ttft_s": 1.0}).values()) == {None}


def _requests(a: np.ndarray, f: np.ndarray) -> pd.DataFrame:
    e2e = f - a
    return pd.DataFrame({"arrival_time": a, "finish_time": f, "output_len": np.full(a.size, 4), "ttft": e2e,
                         "tpot": np.zeros(a.size), "e2e": e2e})


def test_the_goodput_share_counts_the_windows_arrivals_even_while_a_backlog_drains():
    a = np.arange(100, dtype=float)  # window [9.9, 89.1]: arrivals 10..89, 80 of them
    f = a + 0.5
    f[:10] = 15.0  # warm-up's 10 requests finish inside the window: 89 departures for 80 arrivals
    f[20:30] = a[20:30] + 2.0  # 10 of the window's arrivals miss e2e <= 1 s
    out = steady_state_summary(_requests(a, f), {"e2e_s": 1.0})
    assert out["steady_slo_attainment"] == 70 / 80
    # the rate ratio is no share: 69 good departures (10..88 less 20..29) per 79.2 s over 80 arrivals per 79.2 s
    assert out["steady_goodput_req_s"] / out["steady_arrival_rate_req_s"] == pytest.approx(69 / 80, rel=1e-6)
    assert out["steady_requests_per_s"] / out["steady_arrival_rate_req_s"] == pytest.approx(89 / 80, rel=1e-6)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(30, 300), seed=st.integers(0, 10_000), slo=st.floats(0.01, 10.0))
def test_the_goodput_share_is_a_share(n, seed, slo):
    rng = np.random.default_rng(seed)
    a = np.sort(rng.uniform(0, 100, n))
    f = a + rng.exponential(rng.uniform(0.1, 20.0), n)
    f[rng.random(n) < 0.05] = np.nan  # a few never finish
    out = steady_state_summary(_requests(a, f), {"e2e_s": slo})
    if out["steady_slo_attainment"] is None:
        return
    span = a[-1] - a[0]  # the stated rule: the middle of the arrival span
    lo, hi = a[0] + WARMUP_FRACTION * span, a[-1] - WARMUP_FRACTION * span
    inside = (a >= lo) & (a <= hi)
    want = float((np.isfinite(f) & (f - a <= slo))[inside].mean())
    assert 0.0 <= out["steady_slo_attainment"] <= 1.0
    assert out["steady_slo_attainment"] == pytest.approx(want, rel=1e-6)


def test_batch_means_interval_covers_the_mean():
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(200):
        m, lo, hi = mean_interval(batch_means(rng.random(1000) < 0.9, 10))
        covered += lo <= 0.9 <= hi
    assert 180 <= covered <= 200  # 95% nominal
    assert mean_interval(np.array([0.5]))[1:] == (-np.inf, np.inf)


@pytest.mark.parametrize("confidence, dof, table", [(0.95, 1, 12.706), (0.95, 10, 2.228), (0.99, 30, 2.750),
                                                     (0.99, 4, 4.604)])
def test_mean_interval_half_width_is_the_student_t_table_value(confidence, dof, table):
    """Half-width = t(1 - (1 - confidence) / 2, n - 1) x s / sqrt(n), t from a printed two-sided t table."""
    samples = np.arange(dof + 1, dtype=float)
    m, lo, hi = mean_interval(samples, confidence)
    se = samples.std(ddof=1) / np.sqrt(samples.size)
    assert m == pytest.approx(samples.mean())
    assert (hi - m) / se == pytest.approx(table, abs=5e-4)
    assert (m - lo) / se == pytest.approx(table, abs=5e-4)


def constant_mdl_run(rate: float, n: int, seed: int) -> dict:
    """The engine as an M/D/1 queue: one sequence at a time, every step 10 ms, 10 output tokens (0.1 s each)."""
    from simulator.measure.metrics import summarize
    from tests.simulator.engine.engine_fixtures import constant_profile, iid_traces, simulate, workload

    traces = iid_traces(1, out=(10, 11), prompt=(16, 17), rate=0.0)
    res = simulate(traces, workload(traces, n, rate=rate, seed=seed), mode="ar", target=constant_profile(0.01),
                   max_num_seqs=1)
    return summarize(res.requests, res.steps, res.itl, slo={"ttft_s": 1.0})


def test_engine_flags_overload_above_the_service_rate_and_never_below():
    service_rate = 10.0  # one sequence at a time, 10 steps of 10 ms
    for seed in range(3):
        below = constant_mdl_run(0.85 * service_rate, 1500, seed)
        above = constant_mdl_run(1.2 * service_rate, 1500, seed)
        assert below["overloaded"] is False and above["overloaded"] is True
        assert above["steady_requests_per_s"] == pytest.approx(service_rate, rel=0.03)
        # whole-run throughput of the overloaded run is the same service rate: only the flag tells them apart
        assert below["steady_requests_per_s"] == pytest.approx(below["steady_arrival_rate_req_s"], rel=0.1)
