"""The plan's early stop (experiments/plan/early_stop.py over simulator/measure/early_stop.py) and the saturated probe:
a stopped run's verdict equals the full run's, its records say it stopped, certain misses are certain, and the
search never tests above the probe's cap."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.plan.early_stop import PlanStop
from experiments.plan.search import (MAX_UTILIZATION, STRICT_CONFIDENCE, RateSearch, Verdict, judge,
                                     settled_by_first_seed, strict_high_end)
from simulator.measure.early_stop import Progress, exceeded_so_far, progress_frame
from simulator.measure.metrics import goodput_mask
from simulator.measure.steady_state import batch_means, mean_interval
from tests.experiments.test_plan import Q, TTFT_S, md1_threshold

SLO = {"ttft_s": 0.3, "tpot_s": 0.02, "e2e_s": None}


@st.composite
def runs(draw):
    """A finished run (arrivals, first tokens, finishes, lengths) and a moment `now` inside it."""
    n = draw(st.integers(1, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = np.sort(rng.uniform(0, 10, n))
    first = a + rng.exponential(0.3, n)
    out = rng.integers(1, 40, n)
    fin = first + rng.exponential(0.015, n) * (out - 1)
    now = draw(st.floats(0, 12))
    return a, first, fin, out, now


@given(runs())
@settings(max_examples=300, deadline=None)
def test_a_miss_certain_so_far_is_a_miss_of_the_finished_run(run):
    a, first, fin, out, now = run
    seen = Progress(now, 0, a, np.where(first <= now, first, np.nan), np.where(fin <= now, fin, np.nan), out)
    full = Progress(now, 0, a, first, fin, out)
    certain = exceeded_so_far(seen, SLO)
    good = goodput_mask(progress_frame(full), SLO)
    assert not (certain & good).any()
    assert not (certain & np.isfinite(seen.finish)).any()  # only requests still running are judged early


def test_mean_interval_by_rows_equals_one_row_at_a_time():
    rows = np.random.default_rng(1).uniform(0.8, 1.0, (50, 10))
    _, lo, hi = mean_interval(rows, STRICT_CONFIDENCE)
    for r, l, h in zip(rows, lo, hi):
        _, l1, h1 = mean_interval(r, STRICT_CONFIDENCE)
        assert (l, h) == pytest.approx((l1, h1), rel=1e-12)
    assert strict_high_end(rows[0]) == pytest.approx(hi[0], rel=1e-12)


@st.composite
def windows(draw):
    """Final per-request outcomes of a window (good or not), some revealed at a check, and arrivals in order."""
    n = draw(st.integers(40, 400))
    p_bad = draw(st.floats(0.0, 0.5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    good = rng.random(n) >= p_bad
    shown = rng.random(n) < draw(st.floats(0.3, 1.0))
    return good, shown


@given(windows())
@settings(max_examples=200, deadline=None)
def test_a_strict_fail_stop_is_a_strict_fail_of_every_completion(case):
    # the requests arrive 1 s apart; the window rule keeps the middle 80%; a revealed request is finished (good) or
    # past its TTFT bound (bad), an unrevealed one is still undecided: the rule must stop only when the finished
    # run fails strictly whatever the undecided requests do (here: whatever they turned out to be), and must stop
    # when every window request is decided and the batches fail strictly
    good, shown = case
    n = good.size
    a = np.arange(n, dtype=float)
    rule = PlanStop(a, {"ttft_s": 0.05}, 0.95, "settling", 1.0)
    if rule.window is None:
        return
    now = rule.window[1]  # the window's end itself: the other two rules (after it) do not fire
    first = np.where(shown & ~good, a + 0.06, a + 0.01)  # a revealed miss: first token 0.06 s > the 0.05 s bound
    fin = np.where(shown & good, a + 0.02, np.nan)  # a revealed success finished; the rest still run (1 token)
    p = Progress(now, int((shown & good).sum()), a, first, fin, np.ones(n, dtype=np.int64))
    why = rule(p)
    inside = np.concatenate(rule.chunks)
    final = batch_means(good[inside].astype(float), len(rule.chunks))
    seed = {"window_arrivals": inside.size, "window_departures": inside.size, "window_length_s": 1.0,
            "attainment_batches": list(final)}
    if why == "strict fail":
        assert judge(1.0, [seed], 0.95).strict_fail
        assert strict_high_end(final) <= strict_high_end(np.array(rule.decision["attainment_batches"])) + 1e-6
    if shown[inside].all() and strict_high_end(final) < 0.95 - 1e-6:  # all decided and failing: it must stop
        assert why == "strict fail"


# ---------------------------------------------------------------- the M/D/1 case, full run vs stopped run


@pytest.fixture(scope="module")
def md1(tmp_path_factory):
    from experiments.plan.config import load_plan_config
    from experiments.plan.candidates import base_experiment, build_candidates
    from experiments.plan.traffic import TrafficModel
    from experiments.plan.prices import price_table
    from tests.experiments.test_plan import make_known_case

    plan = load_plan_config(make_known_case(tmp_path_factory.mktemp("stop")))
    base = base_experiment(plan)
    traffic = TrafficModel.of(plan, base)
    (cand,) = build_candidates(plan, base, price_table(None, plan.prices.usd_per_gpu_hour))
    return plan, traffic, cand, md1_threshold(TTFT_S, Q)


def _both(md1, rate, level, n=400, seed=7):
    from experiments.plan.point import search_point, evaluate_plan_point

    plan, traffic, cand, _ = md1
    workload, replay = traffic.at_rate(rate, n)
    slo = plan.slo.bounds()
    full = evaluate_plan_point(search_point(cand, workload, seed, slo, replay).payload)
    stop = {"level": level, "target": Q, "rate": rate}
    early = evaluate_plan_point(search_point(cand, workload, seed, slo, replay, stop).payload)
    return full, early


@given(factor=st.floats(0.6, 1.6), level=st.sampled_from(["settling", "pooled"]), seed=st.integers(0, 3))
@settings(max_examples=10, deadline=None)
def test_a_stopped_run_gets_the_full_runs_verdict(md1, factor, level, seed):
    """A run the plan's early stop ends gets the full run's verdict: the kernel stops at the monitor's checks
    (simulator/engine/compiled_run.py)."""
    from simulator.engine.compiled_run import CompiledRun

    rate = factor * md1[3]
    asked: list[bool] = []
    real = CompiledRun.run

    def spy(self, stop=None, check_every=1, next_check=None):
        asked.append(next_check is not None)
        return real(self, stop, check_every, next_check)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CompiledRun, "run", spy)
        full, early = _both(md1, rate, level, seed=seed)
    assert asked == [False, True]  # the stopping run asked by the monitor
    _same_verdict(full, early, rate, level)


def _same_verdict(full, early, rate, level):
    v_full, v_early = judge(rate, [full], Q), judge(rate, [early], Q)
    stopped = early.get("stopped")
    assert stopped is not None and stopped["requests_finished"] < stopped["of"]  # it did stop before the end
    if level == "settling" and settled_by_first_seed(v_full):
        assert settled_by_first_seed(v_early)
    if stopped["rule"] == "strict fail":
        assert level == "settling" and v_full.strict_fail and not v_full.passed
        assert (v_early.strict_fail, v_early.decided, v_early.passed) == (True, True, False)
        assert early["window_final"] is False and early["overloaded"] is None
    else:  # window complete / overloaded: the verdict is the full run's
        assert v_early == v_full
    if stopped["rule"] == "window complete":  # every window figure is the full run's
        same = {k: v for k, v in full.items() if k.startswith(("steady_", "window_", "attainment"))}
        assert {k: early[k] for k in same} == same
    if stopped["rule"] == "overloaded":
        assert level == "settling" and full["overloaded"] and early["steady_slo_attainment"] is None
    # never reported as a full run's figures: whole-run throughput is not given
    assert early["throughput_tok_s"] is None and full["throughput_tok_s"] is not None


def test_far_above_the_threshold_the_first_seed_stops_before_the_window_ends(md1):
    full, early = _both(md1, 2.5 * md1[3], "settling")  # 17 req/s against a service rate of 10
    assert full["overloaded"] and early["stopped"]["rule"] in ("overloaded", "strict fail")
    assert early["stopped"]["at_s"] < full["window_length_s"] / 0.8  # before the last arrival


# ---------------------------------------------------------------- the saturated probe


@given(start=st.floats(0.1, 100), threshold=st.floats(0.01, 500), slack=st.floats(1.0, 3.0),
       tol=st.floats(0.01, 0.2))
@settings(max_examples=200, deadline=None)
def test_with_a_probed_service_rate_nothing_above_its_cap_is_tested(start, threshold, slack, tol):
    service = threshold * slack
    s = RateSearch(start, None, tol, 60, probe_service=service)
    while not s.done:
        r = s.next_rate()
        assert r <= MAX_UTILIZATION * service * (1 + 1e-12)
        ok = r <= threshold
        s.record(Verdict(r, ok, True, False, 1.0 if ok else 0.0, None, None, None, "", strict_pass=ok))
    effective = min(threshold, MAX_UTILIZATION * service)
    low, high = s.interval
    assert s.lo <= effective and low <= effective <= high
    assert s.service_rate == service


def test_plan_json_says_which_runs_stopped_and_what_the_probe_measured(tmp_path):
    from experiments.plan.config import load_plan_config
    from experiments.plan.planner import run_plan
    from tests.experiments.test_plan import SERVICE_S, make_known_case

    case = make_known_case(tmp_path)
    case["search"] = {**case["search"], "seeds": 1, "rel_tol": 0.1}
    doc = run_plan(load_plan_config(case), tmp_path / "p", backend="serial", progress=False)
    (c,) = doc["candidates"]
    assert c["service_probe"]["service_req_s"] == pytest.approx(1 / SERVICE_S, rel=0.01)
    assert doc["rule"]["early_stop"].startswith("runs stop once the verdict is decided")
    rows = [r for r in c["curve"] if r["sustainable"] is not None]
    assert all(r.get("stopped_early") for r in rows)  # every search run ended early, and says so
    assert all(r["attainment"] is None and r["attainment_at_most"] is not None
               for r in rows if "strict fail" in r["stopped_early"])
    points = [json.loads(p.read_text())["result"] for p in (tmp_path / "p" / "points").rglob("*.json")]
    assert points and all(("stopped" in p) or ("tok_s" in p) for p in points)  # a stop or the probe
