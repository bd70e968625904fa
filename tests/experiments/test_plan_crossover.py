"""The SD-vs-AR crossover search (experiments/plan/crossover.py): the bisection against known difference lines, the
paired comparison rule, and a plan's crossover against long plain runs on both sides of its interval."""
from __future__ import annotations

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.plan.crossover import CROSSOVER_LOW, Comparison, CrossoverSearch, compare


def _known(rate: float, cross: float, slope: float, noise: float = 0.0) -> Comparison:
    """SD - AR mean E2E = slope (rate - cross), decided when |difference| exceeds `noise`."""
    d = slope * (rate - cross)
    side = None if abs(d) <= noise else d < 0
    return Comparison(rate, d, d - noise, d + noise, side, 2, "")


@given(top=st.floats(1.0, 1000.0), where=st.floats(0.3, 0.97), slope=st.floats(0.001, 10.0),
       noise=st.floats(0.0, 0.2), tol=st.floats(0.01, 0.1))
@settings(max_examples=200, deadline=None)
def test_the_search_brackets_a_known_crossing(top, where, slope, noise, tol):
    cross = where * top
    s = CrossoverSearch(top, tol, 60)
    while not s.done:
        s.record(_known(s.next_rate(), cross, slope, noise * slope * top))
    got = s.result()
    lo, hi = got.interval_req_s
    if got.kind == "crossing":
        assert lo < cross < hi
        assert lo <= got.rate_req_s <= hi
        if noise == 0:  # a straight line: the interpolated sign change is the crossing itself
            assert got.rate_req_s == pytest.approx(cross, rel=1e-9)
        undecided = [c.rate for c in s.comparisons if c.sd_faster is None and lo < c.rate < hi]
        assert hi - lo <= tol * hi or undecided  # narrowed to rel_tol, or the undecided zone is the interval
    else:  # the zone where the difference is within its noise reaches an end of the range
        assert got.kind in ("faster_throughout", "slower_throughout", "undecided")
        assert abs(slope * (top - cross)) <= noise * slope * top or abs(slope * (CROSSOVER_LOW * top - cross)) <= \
            noise * slope * top


def test_faster_at_the_top_or_slower_at_the_bottom_ends_the_search():
    s = CrossoverSearch(40.0, 0.02, 8)
    s.record(_known(40.0, 100.0, 1.0))  # crossing above the range: faster at the top
    assert s.done and s.result().kind == "faster_throughout" and s.result().to_json()["sd_faster_up_to_req_s"] == 40.0
    s = CrossoverSearch(40.0, 0.02, 8)
    s.record(_known(40.0, 1.0, 1.0))
    s.record(_known(10.0, 1.0, 1.0))  # slower at the bottom (0.25 x the top)
    assert s.done and s.result().kind == "slower_throughout" and s.result().interval_req_s == (None, 10.0)
    with pytest.raises(ValueError, match="expected the comparison at 40.0"):
        CrossoverSearch(40.0, 0.02, 8).record(_known(10.0, 1.0, 1.0))


def test_reported_to_three_significant_digits():
    s = CrossoverSearch(40.0, 0.02, 20)
    while not s.done:
        s.record(_known(s.next_rate(), 21.3456789, 1.0))
    doc = s.result().to_json()
    assert doc["kind"] == "crossing" and doc["crossover_req_s"] == 21.3
    assert all(len(f"{x:g}".replace(".", "").lstrip("0")) <= 3 for x in doc["interval_req_s"])


def _run(batches, overloaded=False):
    return {"overloaded": overloaded, "e2e_batches": batches}


def test_compare_pairs_the_seeds_batch_by_batch():
    # AR's batches vary a lot between batches, SD's by the same amount plus 0.01 s: paired, the 0.01 s is decided
    ar = [_run([1.0, 2.0, 3.0, 4.0, 5.0]), _run([5.0, 1.0, 4.0, 2.0, 3.0])]
    sd = [_run([x - 0.01 + 1e-4 * i for i, x in enumerate(r["e2e_batches"])]) for r in ar]
    c = compare(10.0, sd, ar)
    assert c.sd_faster is True and c.diff_s == pytest.approx(-0.01 + 2e-4, rel=1e-6) and c.seeds == 2
    assert compare(10.0, ar, sd).sd_faster is False
    same = compare(10.0, [_run([1.0, 1.1, 0.9, 1.0, 1.0])], [_run([1.0, 1.0, 1.0, 1.05, 0.95])])
    assert same.sd_faster is None
    assert compare(10.0, [_run([], True)], [_run([1.0] * 5)]).sd_faster is False  # only SD overloaded
    assert compare(10.0, [_run([1.0] * 5)], [_run([], True)]).sd_faster is True
    assert compare(10.0, [_run([], True)], [_run([], True)]).sd_faster is None
    with pytest.raises(ValueError, match="paired runs"):
        compare(10.0, ar, ar[:1])


# ---------------------------------------------------------------- a plan's crossover against long runs

STEP_S, PER_TOKEN_S, OUTPUT_LEN, PROMPT_LEN, SEQS = 0.01, 0.002, 10, 4, 8


def crossover_case(tmp_path):
    """A step costs 10 ms + 2 ms per batched token; 8 sequences at once; every verify of k = 3 drafts emits 2 tokens.
    One request alone: AR 12 ms per token, SD 9 ms (SD pays); a full batch: AR 3.25 ms per token, SD 4.6 ms (AR
    does): the mean E2E lines cross in between."""
    from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, save_bundle

    meta = BundleMeta(target="llama3.1-8b", drafters={"d": DrafterSpec("d", "ngram", "d")})
    reqs = [RequestTrace(id=f"r{i}", prompt_len=PROMPT_LEN, output_len=OUTPUT_LEN,
                         drafters={"d": DrafterTrace(acc_len=np.full(OUTPUT_LEN, 2, dtype=np.int32))})
            for i in range(4)]
    save_bundle(TraceBundle(meta, reqs), tmp_path / "bundle")
    (tmp_path / "lin.yaml").write_text(yaml.safe_dump(
        {"kind": "linear", "name": "lin", "coefficients": {"const": STEP_S, "batched_tokens": PER_TOKEN_S},
         "provenance": {"source": "test"}}))
    base = {"name": "base", "traces": str(tmp_path / "bundle"),
            "workload": {"num_requests": 100, "arrival": {"kind": "poisson", "rate": 1.0},
                         "sample": {"with_replacement": True}},
            "server": {"target_profile": str(tmp_path / "lin.yaml"), "max_num_seqs": SEQS,
                       "kv_capacity_tokens": 10_000},
            "drafters": {"d": {"kind": "constant", "seconds": 0.0}},
            "runs": [{"name": "AR", "mode": "ar"}]}
    return {"name": "cross", "base": base, "traffic": {"arrival": "poisson", "target_rate": 5.0},
            "slo": {"ttft_s": 2.0, "attainment": 0.8},
            "search": {"seeds": 2, "max_seeds": 2, "curve_fractions": [0.5], "requests_per_replica": 300},
            "candidates": {"target": "llama3.1-8b", "gpus": ["h100-80gb"], "tp": [1],
                           "modes": [{"name": "AR", "mode": "ar"},
                                     {"name": "sd", "mode": "sd", "policy": {"name": "fixed", "drafter": "d", "k": 3}}],
                           "profiles": {"h100-80gb": {1: str(tmp_path / "lin.yaml")}}}}


def test_a_plans_crossover_holds_in_long_runs_on_both_sides(tmp_path):
    from experiments.plan.config import load_plan_config
    from experiments.plan.planner import run_plan
    from experiments.run import run_experiment
    from simulator.measure.steady_state import measure

    case = crossover_case(tmp_path)
    doc = run_plan(load_plan_config(case), tmp_path / "plan", backend="serial", progress=False)
    sd = next(c for c in doc["candidates"] if c["mode"] == "sd")
    x = sd["sd_vs_ar"]
    assert x["kind"] == "crossing", x
    lo, hi = x["interval_req_s"]
    assert lo <= x["crossover_req_s"] <= hi and all(r["seeds"] == 2 for r in x["rates"])

    def mean_e2e(mode: dict, rate: float) -> float:
        """Mean steady-state E2E of one long plain run (20,000 requests, a seed the plan did not use)."""
        cfg = {**case["base"], "runs": [mode], "seed": 99,
               "workload": {**case["base"]["workload"], "num_requests": 20_000,
                            "arrival": {"kind": "poisson", "rate": rate}}}
        req = run_experiment(cfg).requests
        ss = measure(req["arrival_time"].to_numpy(float), req["finish_time"].to_numpy(float),
                     req["output_len"].to_numpy(), np.ones(len(req), bool))
        return float(req["e2e"].to_numpy(float)[ss.in_window].mean())

    ar_mode, sd_mode = case["candidates"]["modes"]
    below, above = 0.9 * lo, 1.1 * hi
    assert mean_e2e(sd_mode, below) < mean_e2e(ar_mode, below)
    assert mean_e2e(sd_mode, above) > mean_e2e(ar_mode, above)
