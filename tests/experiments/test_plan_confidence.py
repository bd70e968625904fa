"""The confidence the plan states for its answer (experiments/plan/search.py ANSWER_CONFIDENCE_RULE), checked by
Monte Carlo on a queue whose threshold is known in closed form.

The known case of test_plan.py (one sequence at a time, 10 ms steps, 10 output tokens, Poisson arrivals) is an
M/D/1 queue with service D = 0.1 s: a request's TTFT is its wait plus the first (prefill) step. Its SLO threshold
(P(TTFT <= 0.3 s) = 0.9) comes from the M/D/1 waiting-time distribution in closed form (Erlang 1909; Crommelin
1932): P(W <= t) = (1 - rho) sum_{k=0}^{floor(t/D)} (lambda (k D - t))^k / k! exp(-lambda (k D - t)), solved for
lambda with scipy's brentq. A plan is the planner's own search (RateSearch, SeedSchedule, judge; the point record's
window and batch means) with the plan's defaults, each run drawn by the Lindley recursion; a test checks that the
engine's runs of this config are that recursion, request by request."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from experiments.plan.bounds import service_rate_bound
from experiments.plan.config import load_plan_config
from experiments.plan.planner import TrafficModel, base_experiment
from experiments.plan.search import ANSWER_CONFIDENCE, BATCHES, RateSearch, SeedSchedule
from simulator.measure.steady_state import batch_means, measure
from tests.experiments.test_plan import OUTPUT_LEN, Q, SERVICE_S, STEP_S, TTFT_S, make_known_case

PLANS = 300  # Monte Carlo plans in CI


def md1_wait_cdf(t: float, rate: float, d: float = SERVICE_S) -> float:
    """P(W <= t) of an M/D/1 queue (arrival rate `rate`, service d): the closed form above."""
    rho = rate * d
    return (1 - rho) * sum((rate * (k * d - t)) ** k / math.factorial(k) * math.exp(-rate * (k * d - t))
                           for k in range(int(math.floor(t / d)) + 1))


def md1_threshold(wait_s: float, q: float) -> float:
    """The arrival rate at which P(W <= wait_s) = q."""
    return brentq(lambda r: md1_wait_cdf(wait_s, r) - q, 1e-6, (1 - 1e-9) / SERVICE_S, xtol=1e-12)


TRUTH = md1_threshold(TTFT_S - STEP_S, Q)  # 6.858 req/s


def lindley_waits(arrival: np.ndarray, service_s: float = SERVICE_S) -> np.ndarray:
    """FCFS waits of one server, W_{n+1} = max(0, W_n + S - gap): the random walk's excess over its running
    minimum (W = S_n - min(0, min_k<=n S_k))."""
    walk = np.cumsum(np.concatenate([[0.0], service_s - np.diff(arrival)]))
    return walk - np.minimum(np.minimum.accumulate(walk), 0.0)


def md1_run(gaps: np.ndarray, rate: float) -> dict:
    """One run's point record from the Lindley recursion, with the window and batch-means functions the planner's
    record (planner._point_figures) uses: arrivals are the unit draw `gaps` scaled in time, as every seed's arrivals
    are across the search's rates."""
    arrival = np.cumsum(gaps) / rate
    wait = lindley_waits(arrival)
    ok = wait + STEP_S <= TTFT_S
    ss = measure(arrival, arrival + wait + SERVICE_S, np.full(arrival.size, OUTPUT_LEN), ok)
    return {"window_arrivals": ss.arrivals, "window_departures": ss.departures, "window_length_s": ss.length_s,
            "attainment_batches": batch_means(ok[ss.in_window], BATCHES)}  # arrivals are in order already


@pytest.fixture(scope="module")
def known_plan(tmp_path_factory):
    """The known case's plan config with the plan's default search (seeds, rel_tol, max_tests, max_seeds)."""
    case = make_known_case(tmp_path_factory.mktemp("conf"))
    case["search"] = {"curve_fractions": [0.5]}
    plan = load_plan_config(case)
    return plan, TrafficModel(plan, base_experiment(plan)["workload"])


def one_plan(plan, n: int, seed: int) -> float:
    """The answer of one plan of the known case: the planner's search and seed schedule, runs by Lindley."""
    from simulator.costs.latency import LinearProfile

    s = plan.search
    rng = np.random.default_rng(seed)
    gaps = [rng.exponential(1.0, n) for _ in range(s.max_seeds)]
    bound = service_rate_bound(LinearProfile("c", {"const": STEP_S}), 1, 0, OUTPUT_LEN - 1)
    # the saturated probe of a constant-service queue measures 1/S exactly (test_plan_early_stop.py checks it)
    search = RateSearch(plan.traffic.target_rate, s.rate_max, s.rel_tol, s.max_tests, bound,
                        probe_service=1.0 / SERVICE_S)
    sched = SeedSchedule(s.seeds, s.max_seeds, s.first_seed_settles)
    while not search.done:
        rate = search.next_rate()
        settled = sched.give(rate, [md1_run(gaps[j], rate) for j in sched.wanted()], plan.slo.attainment)
        if settled is not None:
            search.record(settled[0])
    return search.lo


def test_the_threshold_closed_form_agrees_with_a_long_lindley_run():
    # two independent routes to one number: the closed form, and 400,000 simulated waits (exceedance within 0.005)
    rng = np.random.default_rng(7)
    arrival = np.cumsum(rng.exponential(1.0 / TRUTH, 400_000))
    attained = np.mean(lindley_waits(arrival) + STEP_S <= TTFT_S)
    assert attained == pytest.approx(Q, abs=0.005)
    assert 6.8 < TRUTH < 6.9 and md1_wait_cdf(TTFT_S - STEP_S, TRUTH) == pytest.approx(Q)
    # Pollaczek-Khinchine for the mean wait, rho D / (2 (1 - rho)), against the same run
    rho = TRUTH * SERVICE_S
    assert np.mean(lindley_waits(arrival)) == pytest.approx(rho * SERVICE_S / (2 * (1 - rho)), rel=0.03)


def test_the_engine_runs_the_known_case_as_the_lindley_recursion(known_plan):
    from experiments.run import run_experiment

    plan, traffic = known_plan
    workload, _ = traffic.at_rate(6.5, 400)
    req = run_experiment({**base_experiment(plan), "workload": workload, "seed": 3}).requests.sort_values(
        "arrival_time")
    arrival = req["arrival_time"].to_numpy(float)
    wait = lindley_waits(arrival)
    np.testing.assert_allclose(req["ttft"].to_numpy(float), wait + STEP_S, rtol=0, atol=1e-9)
    np.testing.assert_allclose(req["finish_time"].to_numpy(float), arrival + wait + SERVICE_S, rtol=0, atol=1e-9)


def test_the_stated_confidence_holds_over_many_plans(known_plan):
    plan, traffic = known_plan
    n = traffic.requests_for(1)
    assert n == math.ceil(plan.search.tail_requests / (1 - Q) / 0.8)  # sized from the quantile, as every plan
    answers = np.array([one_plan(plan, n, seed) for seed in range(PLANS)])
    above = float(np.mean(answers > TRUTH))
    assert above <= 1 - ANSWER_CONFIDENCE, (above, np.sort(answers)[-10:])
    # the answer is useful as well as safe: the median within 5% below the threshold
    assert 0.95 * TRUTH <= float(np.median(answers)) <= TRUTH, np.median(answers) / TRUTH
