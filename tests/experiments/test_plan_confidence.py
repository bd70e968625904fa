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
from experiments.plan.candidates import base_experiment
from experiments.plan.traffic import TrafficModel
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


def lindley_waits(arrival: np.ndarray, service_s: float | np.ndarray = SERVICE_S) -> np.ndarray:
    """FCFS waits of one server, W_{n+1} = max(0, W_n + S_n - gap): the random walk's excess over its running
    minimum (W = S_n - min(0, min_k<=n S_k)); `service_s` one time for all or one per request."""
    service = np.broadcast_to(np.asarray(service_s, float), arrival.shape)
    walk = np.cumsum(np.concatenate([[0.0], service[:-1] - np.diff(arrival)]))
    return walk - np.minimum(np.minimum.accumulate(walk), 0.0)


def md1_run(gaps: np.ndarray, rate: float, lengths: np.ndarray | None = None) -> dict:
    """One run's point record from the Lindley recursion, with the window and batch-means functions the planner's
    record (experiments/plan/point.py _point_figures) uses: arrivals are the unit draw `gaps` scaled in time, as every seed's arrivals
    are across the search's rates; `lengths`: output lengths per request (M/G/1), else OUTPUT_LEN each (M/D/1)."""
    arrival = np.cumsum(gaps) / rate
    out = np.full(arrival.size, OUTPUT_LEN) if lengths is None else lengths
    service = STEP_S * out
    wait = lindley_waits(arrival, service)
    ok = wait + STEP_S <= TTFT_S
    ss = measure(arrival, arrival + wait + service, out, ok)
    return {"window_arrivals": ss.arrivals, "window_departures": ss.departures, "window_length_s": ss.length_s,
            "attainment_batches": batch_means(ok[ss.in_window], BATCHES)}  # arrivals are in order already


@pytest.fixture(scope="module")
def known_plan(tmp_path_factory):
    """The known case's plan config with the plan's default search (seeds, rel_tol, max_tests, max_seeds)."""
    case = make_known_case(tmp_path_factory.mktemp("conf"))
    case["search"] = {"curve_fractions": [0.5]}
    plan = load_plan_config(case)
    return plan, TrafficModel.of(plan, base_experiment(plan))


def one_plan(plan, n: int, seed: int, lengths: np.ndarray | None = None) -> float:
    """The answer of one plan of the known case: the planner's search and seed schedule, runs by Lindley (M/G/1:
    each seed's output lengths drawn from `lengths`, uniformly)."""
    from simulator.costs.latency import LinearProfile

    s = plan.search
    rng = np.random.default_rng(seed)
    gaps = [rng.exponential(1.0, n) for _ in range(s.max_seeds)]
    outs = [None if lengths is None else rng.choice(lengths, n) for _ in range(s.max_seeds)]
    bound = service_rate_bound(LinearProfile("c", {"const": STEP_S}), 1, 0, OUTPUT_LEN - 1)
    # the saturated probe of a constant-service queue measures 1/S exactly (test_plan_early_stop.py checks it); for
    # M/G/1, 1/E[S] (the mean of the lengths is OUTPUT_LEN)
    search = RateSearch(plan.traffic.target_rate, s.rate_max, s.rel_tol, s.max_tests, bound,
                        probe_service=1.0 / SERVICE_S)
    sched = SeedSchedule(s.seeds, s.max_seeds, s.first_seed_settles)
    while not search.done:
        rate = search.next_rate()
        settled = sched.give(rate, [md1_run(gaps[j], rate, outs[j]) for j in sched.wanted()], plan.slo.attainment)
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


# ---------------------------------------------------------------- M/G/1: output lengths 5..15 (mean 10)

MG1_LENGTHS = np.arange(5, 16)  # uniform: service STEP_S x L, mean SERVICE_S


def mg1_wait_cdf(t: float, rate: float, grid: float = 1e-4) -> float:
    """P(W <= t) of the M/G/1 queue above by the Pollaczek-Khinchine (Benes) series: W is a Geometric(rho) sum of
    residual service times (density P(S > x) / E[S]), each convolution on a grid of `grid` seconds."""
    service = STEP_S * MG1_LENGTHS
    mean = service.mean()
    rho = rate * mean
    x = (np.arange(int(round(t / grid))) + 0.5) * grid  # cell midpoints up to t
    resid = np.array([np.mean(service > v) for v in x]) / mean * grid  # residual-time mass per cell
    total, term, k = 1.0 - rho, np.zeros(x.size), 0  # k = 0: no wait
    term[0] = 1.0  # the k-fold convolution's mass per cell (k = 0: all at 0)
    while True:
        k += 1
        term = np.convolve(term, resid)[: x.size]
        add = (1 - rho) * rho ** k * term.sum()
        total += add
        if add < 1e-12 or k > 2000:
            return total


MG1_TRUTH = brentq(lambda r: mg1_wait_cdf(TTFT_S - STEP_S, r) - Q, 1.0, 9.9, xtol=1e-9)


def test_the_mg1_threshold_agrees_with_a_long_lindley_run():
    rng = np.random.default_rng(11)
    arrival = np.cumsum(rng.exponential(1.0 / MG1_TRUTH, 400_000))
    wait = lindley_waits(arrival, STEP_S * rng.choice(MG1_LENGTHS, arrival.size))
    assert np.mean(wait + STEP_S <= TTFT_S) == pytest.approx(Q, abs=0.005)


@pytest.mark.slow  # 300 plans: about a minute of CPU
def test_the_stated_confidence_holds_over_many_mg1_plans(known_plan):
    plan, traffic = known_plan
    answers = np.array([one_plan(plan, traffic.requests_for(1), seed, MG1_LENGTHS) for seed in range(PLANS)])
    assert float(np.mean(answers > MG1_TRUTH)) <= 1 - ANSWER_CONFIDENCE
    assert 0.95 * MG1_TRUTH <= float(np.median(answers)) <= MG1_TRUTH, np.median(answers) / MG1_TRUTH
