"""TPOT_FLOOR_RULE (experiments/plan/bounds.py): no simulated request beats step_time(1, 1, 0) / (k + 1), on AR, SD
and PSD (hypothesis over linear profiles and loads); a plan whose TPOT bound lies below it answers 0 without a
simulation and says why; one just above it is still searched."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.plan.bounds import tpot_floor
from simulator.costs.latency import LinearProfile, Provenance
from tests.simulator.engine.engine_fixtures import PSDConfig, iid_traces, simulate, workload
from tests.experiments.test_plan import OUTPUT_LEN, STEP_S, make_known_case, _plan


@given(mode=st.sampled_from(["ar", "sd", "psd"]), k=st.integers(1, 5), seed=st.integers(0, 1000),
       rate=st.floats(1.0, 400.0), a=st.floats(0, 1e-6), b=st.floats(0, 1e-4), s=st.floats(0, 1e-3),
       d=st.floats(1e-4, 2e-2), seqs=st.integers(1, 16))
@settings(max_examples=15, deadline=None)
def test_no_request_beats_the_tpot_floor(mode, k, seed, rate, a, b, s, d, seqs):
    prof = LinearProfile("t", {"kv_tokens": a, "batched_tokens": b, "num_seqs": s, "const": d},
                         provenance=Provenance("test"))
    traces = iid_traces(30, seed=seed)
    wl = workload(traces, 40, rate=rate, seed=seed)
    res = simulate(traces, wl, mode=mode, k=k, target=prof, max_num_seqs=seqs, psd=PSDConfig() if mode == "psd" else None)
    floor = tpot_floor(prof, 0 if mode == "ar" else k)
    tpot = res.requests["tpot"].to_numpy(dtype=float)
    tpot = tpot[np.isfinite(tpot)]
    assert tpot.size and tpot.min() >= floor * (1 - 1e-9)  # (finish - first) / (n - 1) rounds


def test_a_tpot_bound_below_the_floor_answers_zero_without_simulating(tmp_path):
    case = make_known_case(tmp_path)  # constant 10 ms steps, 10 output tokens, AR: every TPOT >= 10 ms
    case["slo"] = {**case["slo"], "tpot_s": 0.9 * STEP_S}
    doc = _plan(case, tmp_path / "p", backend="serial")
    (c,) = doc["candidates"]
    assert c["simulations"] == 0 and c["max_rate_req_s"] == 0 and c["interval_req_s"] == [0, 0]
    assert "no rate meets the SLO" in c["reason"] and doc["rule"]["tpot_floor"].startswith("TPOT floor")
    assert not list((tmp_path / "p" / "points").rglob("*.json"))
    assert OUTPUT_LEN >= 2


def test_a_tpot_bound_above_the_floor_is_searched(tmp_path):
    case = make_known_case(tmp_path)
    case["slo"] = {**case["slo"], "tpot_s": 1.1 * STEP_S}
    case["search"] = {**case["search"], "seeds": 1, "rel_tol": 0.2}
    (c,) = _plan(case, tmp_path / "p", backend="serial")["candidates"]
    assert c["simulations"] > 0 and c["max_rate_req_s"] > 0


def test_the_floor_covers_only_linear_and_roofline_profiles():
    """The rule is stated for linear fits (their coefficients non-negative: refused otherwise when made) and rooflines;
    any other profile kind (here a structured step model) gets no floor."""
    from simulator.costs.step_model import StructuredProfile

    assert tpot_floor(StructuredProfile("s", {"const": 1e-2}), 0) is None
    ok = LinearProfile("o", {"batched_tokens": 1e-4, "const": 1e-2}, provenance=Provenance("test"))
    assert tpot_floor(ok, 3) == pytest.approx((1e-2 + 1e-4) / 4)


def _progress_counts(case, out) -> tuple[int, int]:
    """(points done, points planned) on the plan's last plain progress line."""
    import io

    from rich.console import Console

    from experiments.plan.config import load_plan_config
    from experiments.plan.planner import run_plan

    buf = io.StringIO()
    run_plan(load_plan_config(case), out, backend="serial", console=Console(file=buf, force_terminal=False))
    done, total = buf.getvalue().strip().splitlines()[-1].split(": ")[1].split(" points")[0].split("/")
    return int(done), int(total)


@pytest.mark.parametrize("bound", [0.9, 1.1])
def test_the_progress_total_ends_at_the_points_run(tmp_path, bound):
    """A candidate the floor rule answers runs nothing, its curve points included (the bar counted them out twice:
    '1392/1389 points'); one searched ends with every planned point done."""
    case = make_known_case(tmp_path)
    case["slo"] = {**case["slo"], "tpot_s": bound * STEP_S}
    case["search"] = {**case["search"], "seeds": 1, "rel_tol": 0.2}
    done, total = _progress_counts(case, tmp_path / "p")
    assert done == total and (total == 0) == (bound < 1)
