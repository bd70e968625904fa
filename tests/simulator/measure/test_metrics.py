"""Summary metrics from hand-built per-request and per-step tables (schemas of simulator/engine/records.py)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.measure.metrics import (
    goodput_mask,
    percentile_summary,
    round_sig,
    str_values,
    summarize,
    union_length,
)
from simulator.engine.records import REQUEST_COLUMNS, STEP_COLUMNS, ColumnBuffer

NAN = float("nan")


def request_table(rows: list[dict]) -> pd.DataFrame:
    """Per-request table with the engine's schema; unspecified columns are 0 / ''."""
    buf = ColumnBuffer(REQUEST_COLUMNS)
    for i, r in enumerate(rows):
        base = {"request_id": f"r{i}", "trace_id": f"r{i}", "category": "", "sub_batch": -1}
        buf.append(**{**base, **r})
    return buf.frame()


def step_table(rows: list[dict]) -> pd.DataFrame:
    """Per-step table with the engine's schema; unspecified columns are 0 / ''."""
    buf = ColumnBuffer(STEP_COLUMNS)
    for r in rows:
        buf.append(**{"device": "target", "sub_batch": -1, "drafters": "", **r})
    return buf.frame()


def req(arrival, out, first, finish, steps=0, proposed=0, accepted=0, preempt=0):
    """One request row with its derived latency columns."""
    tpot = (finish - first) / (out - 1) if out > 1 else NAN
    return dict(arrival_time=arrival, output_len=out, prompt_len=10, first_scheduled_time=arrival,
                first_token_time=first, finish_time=finish, ttft=first - arrival, tpot=tpot,
                e2e=finish - arrival, queue_delay=0.0, decode_steps=steps, proposed_tokens=proposed,
                accepted_tokens=accepted, preemptions=preempt)


def sl(step, phase, start, end, n=1, kv=1, device="target"):
    return dict(step=step, phase=phase, start=start, end=end, num_seqs=n, kv_blocks_used=kv, device=device)


# Three requests; every expected number below is worked out by hand in the comments.
REQS = request_table([
    req(0.0, 5, 0.5, 1.3, steps=2, proposed=6, accepted=2),   # ttft .5, tpot .8/4 = .2, e2e 1.3, 4/2 = 2 tok/step
    req(1.0, 1, 1.2, 1.2),                                     # ttft .2, tpot NaN, e2e .2, no decode step
    # ttft .5, tpot 1.5/8, e2e 2; preempted once, so its recompute prefill emitted a token: 7 tokens in 3 steps.
    req(2.0, 9, 2.5, 4.0, steps=3, proposed=9, accepted=4, preempt=1),
])
STEPS = step_table([
    sl(0, "prefill", 0.0, 0.5), sl(1, "draft", 0.5, 0.6), sl(1, "verify", 0.6, 1.0),
    sl(2, "prefill", 1.0, 1.2, kv=2), sl(3, "draft", 1.2, 1.22, kv=2), sl(3, "verify", 1.22, 1.3, kv=2),
    sl(4, "prefill", 2.0, 2.5), sl(5, "verify", 2.5, 3.0), sl(6, "verify", 3.0, 3.5), sl(7, "verify", 3.5, 4.0),
])
ITL = np.array([0.4, 0.1, 0.5])


def test_hand_worked_example():
    s = summarize(REQS, STEPS, ITL, slo={"ttft_s": 0.4, "tpot_s": 0.19})
    assert s["num_requests"] == 3 and s["num_finished"] == 3
    assert s["makespan_s"] == 4.0 and s["output_tokens"] == 15
    assert s["throughput_tok_s"] == 3.75 and s["requests_per_s"] == 0.75
    assert s["ttft_mean_s"] == pytest.approx(0.4) and s["ttft_p50_s"] == 0.5
    # TPOT of the one-token request is undefined and left out: mean of .2 and .1875.
    assert s["tpot_mean_s"] == pytest.approx(0.19375) and s["tpot_p50_s"] == pytest.approx(0.19375)
    # E2E sorted [.2, 1.3, 2.0]; linear interpolation: p90 at rank 1.8 -> 1.3 + .8 * .7, p99 at 1.98.
    assert s["e2e_mean_s"] == pytest.approx(3.5 / 3, rel=1e-6)
    assert s["e2e_p50_s"] == 1.3
    assert s["e2e_p90_s"] == pytest.approx(1.86)
    assert s["e2e_p99_s"] == pytest.approx(1.986)
    assert s["itl_mean_s"] == pytest.approx(1 / 3, rel=1e-6) and s["itl_p50_s"] == 0.4
    # SLO ttft <= .4: only the one-token request (ttft .2, no TPOT) meets it.
    assert s["goodput_fraction"] == pytest.approx(1 / 3, rel=1e-6) and s["goodput_req_s"] == 0.25
    # Acceptance: per request 2 and 7/3 -> mean 13/6; pooled 11 tokens / 5 steps; accepted 6 of 15 proposed.
    assert s["mean_acceptance_length"] == pytest.approx(13 / 6, rel=1e-6)
    assert s["pooled_acceptance_length"] == 2.2
    assert s["acceptance_rate"] == 0.4
    # Target slices cover 3.3 s of 4; verify 1.98 s, draft .12 s, prefill 1.2 s.
    assert s["busy_fraction_target"] == pytest.approx(0.825)
    assert s["busy_fraction_drafter"] is None
    assert s["verify_share"] == pytest.approx(0.6)
    assert s["draft_share"] == pytest.approx(0.12 / 3.3, rel=1e-6)
    assert s["prefill_share"] == pytest.approx(1.2 / 3.3, rel=1e-6)
    assert s["decode_share"] == 0.0 and s["mixed_share"] == 0.0
    assert s["kv_peak_blocks"] == 2 and s["preemptions"] == 1 and s["preempted_requests"] == 1
    assert s["num_steps"] == 8 and s["mean_batch_size"] == 1.0


def test_goodput_other_slo_and_tpot_of_one_token_request():
    # ttft <= .6 passes everyone; tpot <= .19 fails r0 (.2) only; r1 has no TPOT and passes.
    s = summarize(REQS, STEPS, ITL, slo={"ttft_s": 0.6, "tpot_s": 0.19})
    assert s["goodput_fraction"] == pytest.approx(2 / 3, rel=1e-6) and s["goodput_req_s"] == 0.5
    assert summarize(REQS, STEPS, ITL, slo=None)["goodput_fraction"] == 1.0
    assert summarize(REQS, STEPS, ITL, slo={"e2e_s": 1.5})["goodput_fraction"] == pytest.approx(2 / 3, rel=1e-6)


def test_per_gpu_and_drafter_device():
    psd_steps = pd.concat([STEPS, step_table([
        sl(1, "draft", 0.5, 1.0, device="drafter"), sl(2, "draft", 0.8, 1.5, device="drafter"),
    ])], ignore_index=True)
    s = summarize(REQS, psd_steps, ITL, slo=None, num_target_gpus=4, num_draft_gpus=1)
    assert s["num_gpus"] == 5 and s["throughput_tok_s_per_gpu"] == 0.75
    assert s["busy_fraction_drafter"] == 0.25  # union [0.5, 1.5] over a 4 s makespan
    # A dedicated draft GPU that never worked is 0 busy, not absent.
    assert summarize(REQS, STEPS, ITL, slo=None, num_draft_gpus=1)["busy_fraction_drafter"] == 0.0


def test_autoregressive_run_has_acceptance_length_one_and_no_rate():
    reqs = request_table([req(0.0, 4, 0.1, 0.4, steps=3), req(0.2, 2, 0.3, 0.5, steps=1)])
    steps = step_table([sl(0, "prefill", 0, 0.1), sl(1, "decode", 0.1, 0.2, n=2), sl(2, "decode", 0.2, 0.5)])
    s = summarize(reqs, steps, np.array([0.1, 0.1]), slo=None)
    assert s["mean_acceptance_length"] == 1.0 and s["pooled_acceptance_length"] == 1.0
    assert s["acceptance_rate"] is None and s["proposed_tokens"] == 0
    assert s["decode_share"] == pytest.approx(0.4 / 0.5) and s["verify_share"] == 0.0
    # Batch size weighted by time: decode slices (2 seqs for .1 s, 1 seq for .3 s).
    assert s["mean_batch_size"] == pytest.approx((2 * 0.1 + 1 * 0.3) / 0.4)


def test_unfinished_request_counts_against_goodput_but_not_latency():
    reqs = request_table([req(0.0, 5, 0.5, 1.3, steps=4), {**req(0.5, 5, 0.8, NAN), "finish_time": NAN}])
    s = summarize(reqs, STEPS, ITL, slo={"ttft_s": 10.0})
    assert s["num_requests"] == 2 and s["num_finished"] == 1
    assert s["output_tokens"] == 5 and s["makespan_s"] == 1.3
    assert s["goodput_fraction"] == 0.5
    assert s["e2e_p99_s"] == 1.3


def test_empty_tables_give_nulls_and_valid_json():
    s = summarize(request_table([]), step_table([]), np.array([]), slo={"ttft_s": 1.0})
    assert s["num_requests"] == 0 and s["throughput_tok_s"] is None and s["ttft_p50_s"] is None
    assert s["goodput_fraction"] is None and s["kv_peak_blocks"] == 0
    json.dumps(s, allow_nan=False)


def test_same_keys_in_same_order_and_json_ready():
    a = summarize(REQS, STEPS, ITL, slo=None)
    b = summarize(request_table([]), step_table([]), np.array([]), slo=None)
    assert list(a) == list(b)
    for v in a.values():
        assert v is None or type(v) in (int, float)
    text = json.dumps(a, allow_nan=False)
    assert json.dumps(summarize(REQS, STEPS, ITL, slo=None), allow_nan=False) == text


def test_row_order_does_not_change_the_summary():
    rng = np.random.default_rng(0)
    shuffled_r = REQS.iloc[rng.permutation(len(REQS))].reset_index(drop=True)
    shuffled_s = STEPS.iloc[rng.permutation(len(STEPS))].reset_index(drop=True)
    assert summarize(shuffled_r, shuffled_s, ITL[::-1], slo={"ttft_s": 0.4}) == summarize(
        REQS, STEPS, ITL, slo={"ttft_s": 0.4})


@pytest.mark.parametrize("kwargs, match", [
    ({"slo": {"ttft": 1.0}}, "unknown key"),
    ({"slo": {"ttft_s": -1.0}}, "slo.ttft_s"),
    ({"slo": {"tpot_s": "fast"}}, "slo.tpot_s"),
    ({"slo": None, "num_target_gpus": 0}, "num_target_gpus"),
    ({"slo": None, "num_draft_gpus": -1}, "num_draft_gpus"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        summarize(REQS, STEPS, ITL, **kwargs)


def test_missing_columns_and_unknown_phase_are_named():
    with pytest.raises(ValueError, match=r"requests table lacks column\(s\) \['tpot'\]"):
        summarize(REQS.drop(columns="tpot"), STEPS, ITL, slo=None)
    with pytest.raises(ValueError, match=r"steps table lacks column\(s\) \['kv_blocks_used'\]"):
        summarize(REQS, STEPS.drop(columns="kv_blocks_used"), ITL, slo=None)
    bad = STEPS.copy()
    bad.loc[0, "phase"] = "warmup"
    with pytest.raises(ValueError, match="unknown phase"):
        summarize(REQS, bad, ITL, slo=None)


def test_round_sig():
    assert round_sig(1234.56789) == 1234.568
    assert round_sig(0.000123456789) == 0.0001234568
    assert round_sig(NAN) is None and round_sig(math.inf) is None


def _union_by_merging(intervals, lo, hi):
    """Independent reference: clip, sort, merge, sum."""
    clipped = sorted((min(max(s, lo), hi), min(max(e, lo), hi)) for s, e in intervals)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in clipped:
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


intervals = st.lists(
    st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 20, allow_nan=False)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=30,
)


@given(intervals, st.floats(0, 50), st.floats(0, 80))
def test_union_length_matches_merging(ivs, lo, width):
    hi = lo + width
    got = union_length(np.array([s for s, _ in ivs]), np.array([e for _, e in ivs]), lo, hi)
    assert got == pytest.approx(_union_by_merging(ivs, lo, hi), abs=1e-9)
    assert 0.0 <= got <= hi - lo + 1e-9


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_are_ordered_and_within_range(vals):
    s = percentile_summary(np.array(vals), "x")
    lo, hi = min(vals), max(vals)
    slack = 1e-6 * max(abs(lo), abs(hi))  # the 7-significant-digit rounding, and float sums in the mean
    p = [s["x_p50_s"], s["x_p90_s"], s["x_p99_s"]]
    assert lo - slack <= p[0] and p[2] <= hi + slack
    assert p[0] <= p[1] + slack and p[1] <= p[2] + slack
    assert lo - slack <= s["x_mean_s"] <= hi + slack


def _percentile_by_hand(sorted_vals: list[float], p: float) -> float:
    """Linear interpolation between closest ranks: rank (n - 1) p / 100 of the sorted values."""
    rank = (len(sorted_vals) - 1) * p / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (rank - lo)


@given(st.lists(st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from([NAN, math.inf, -math.inf])),
                max_size=60))
def test_percentiles_of_the_finite_entries_leave_the_input_as_it_was(vals):
    arr = np.array(vals, dtype=float)
    before = arr.copy()
    s = percentile_summary(arr, "x")
    np.testing.assert_array_equal(arr, before)  # the caller's array (a run's ITLs) is neither reordered nor filtered
    finite = sorted(v for v in vals if math.isfinite(v))
    if not finite:
        assert s == {"x_mean_s": None, "x_p50_s": None, "x_p90_s": None, "x_p99_s": None}
        return
    for p in (50, 90, 99):
        assert s[f"x_p{p}_s"] == pytest.approx(_percentile_by_hand(finite, p), rel=1e-6, abs=1e-9)
    assert s["x_mean_s"] == pytest.approx(math.fsum(finite) / len(finite), rel=1e-6, abs=1e-9)


def test_percentiles_hand_worked():
    # sorted finite entries 1, 2, 4, 10 (NaN and inf left out): p50 at rank 1.5 -> 3; p90 at rank 2.7 -> 4 + 0.7 * 6
    s = percentile_summary(np.array([10.0, NAN, 2.0, math.inf, 4.0, 1.0]), "itl", unit="")
    assert s == {"itl_mean": 4.25, "itl_p50": 3.0, "itl_p90": 8.2, "itl_p99": 9.82}


@st.composite
def request_tables(draw):
    """Random finished/unfinished requests with consistent latency columns."""
    n = draw(st.integers(1, 25))
    rows = []
    for _ in range(n):
        arrival = draw(st.floats(0, 10))
        out = draw(st.integers(1, 50))
        ttft = draw(st.floats(0.001, 3))
        tpot = draw(st.floats(0.001, 0.3))
        finish = arrival + ttft + tpot * (out - 1)
        row = req(arrival, out, arrival + ttft, finish, steps=max(out - 1, 0))
        if draw(st.booleans()) and draw(st.booleans()):
            row.update(finish_time=NAN, e2e=NAN, tpot=NAN)
        rows.append(row)
    return request_table(rows)


slo_bound = st.one_of(st.none(), st.floats(0.001, 5))


@settings(max_examples=60, deadline=None)
@given(request_tables(), slo_bound, slo_bound, st.floats(0, 2), st.floats(0, 0.2))
def test_goodput_fraction_bounded_and_monotone_in_slo(reqs, ttft, tpot, dttft, dtpot):
    steps = step_table([])
    tight = {"ttft_s": ttft, "tpot_s": tpot}
    loose = {"ttft_s": None if ttft is None else ttft + dttft, "tpot_s": None if tpot is None else tpot + dtpot}
    a = summarize(reqs, steps, np.array([]), slo=tight)
    b = summarize(reqs, steps, np.array([]), slo=loose)
    assert 0.0 <= a["goodput_fraction"] <= b["goodput_fraction"] <= 1.0
    finished = int(np.isfinite(reqs["finish_time"]).sum())
    assert goodput_mask(reqs, {}).sum() == finished
    if a["goodput_req_s"] is not None:
        # goodput per second times the makespan gives back the count of good requests.
        good = goodput_mask(reqs, tight).sum()
        assert a["goodput_req_s"] * a["makespan_s"] == pytest.approx(good, rel=1e-5, abs=1e-5)


def test_engine_tables_autoregressive_acceptance_is_exactly_one_even_with_preemption():
    """On the real engine's tables: AR emits one token per decode step, preempted (recomputed) or not;
    the same simulation gives the same summary text."""
    from tests.simulator.engine.engine_fixtures import iid_traces, simulate, workload

    traces = iid_traces(20, seed=1)
    res = simulate(traces, workload(traces, 40, rate=40.0), mode="ar", kv_tokens=1000)
    s = summarize(res.requests, res.steps, res.itl, slo=None)
    assert s["preemptions"] > 0
    assert s["mean_acceptance_length"] == 1.0 and s["pooled_acceptance_length"] == 1.0
    assert s["num_finished"] == 40 and s["output_tokens"] == int(res.requests["output_len"].sum())
    assert s["kv_peak_blocks"] <= res.extras["kv_peak_blocks"]
    again = simulate(traces, workload(traces, 40, rate=40.0), mode="ar", kv_tokens=1000)
    assert json.dumps(summarize(again.requests, again.steps, again.itl, slo=None)) == json.dumps(s)
    with_extras = summarize(res.requests, res.steps, res.itl, slo=None, extras=res.extras)
    assert with_extras["kv_peak_blocks"] == res.extras["kv_peak_blocks"]
    assert 0 < with_extras["kv_peak_fraction"] <= 1.0


def test_extras_fill_kv_capacity_and_psd_fallback():
    plain = summarize(REQS, STEPS, ITL, slo=None)
    assert plain["kv_capacity_blocks"] is None and plain["kv_peak_fraction"] is None
    assert plain["psd_fallback_steps"] is None
    s = summarize(REQS, STEPS, ITL, slo=None, extras={"kv_peak_blocks": 3, "kv_total_blocks": 12,
                                                      "psd_fallback_steps": 2, "other": "ignored"})
    assert s["kv_peak_blocks"] == 3 and s["kv_capacity_blocks"] == 12 and s["kv_peak_fraction"] == 0.25
    assert s["psd_fallback_steps"] == 2 and list(s) == list(plain)


def test_a_cluster_counts_steps_per_replica_and_averages_busy_fractions_over_replicas():
    # the same steps on two replicas (replica 1 shifted by 0.5 s); hand-worked: makespan 0..4 s
    one = summarize(REQS, STEPS, ITL, slo={})
    two_steps = pd.concat([STEPS.assign(replica=0),
                           STEPS.assign(replica=1, start=STEPS.start + 0.5, end=(STEPS.end + 0.5).clip(upper=4.0))],
                          ignore_index=True)
    two = summarize(REQS, two_steps, ITL, slo={}, extras={"replicas": 2})
    assert one["num_steps"] == 8 and two["num_steps"] == 16
    # replica 0 busy 3.3 s of 4 (as one server); replica 1: its slices end at 4.0 at the latest: 0.5..1.5 (1.0),
    # 1.5..1.8 (0.3), 2.5..4.0 (1.5) = 2.8 s; mean (3.3 + 2.8) / 2 / 4
    assert one["busy_fraction_target"] == pytest.approx(3.3 / 4)
    assert two["busy_fraction_target"] == pytest.approx((3.3 + 2.8) / 8)
    # without the replica column the union across replicas would hide that both were busy
    merged = summarize(REQS, two_steps.drop(columns="replica"), ITL, slo={})
    assert merged["busy_fraction_target"] != two["busy_fraction_target"]


@pytest.mark.parametrize("rate", [4.0, 200.0])  # below capacity, and overloaded (a warm-up queue drains late)
def test_every_fraction_share_and_attainment_in_a_summary_is_at_most_one(rate):
    from experiments.run import run_experiment

    runs = "runs=[{name: AR, mode: ar}, {name: sd, mode: sd, policy: {name: fixed, drafter: eagle3, k: 3}}]"
    res = run_experiment("default", overrides=[runs, "workload.num_requests=120", f"workload.arrival.rate={rate}"],
                         seed=3)
    checked = 0
    for run, s in res.summary.items():
        for key, v in s.items():
            if key.endswith(("_fraction", "_share", "_attainment")) or "_fraction_" in key:
                if v is not None:
                    assert 0.0 <= v <= 1.0, (run, key, v)
                    checked += 1
    assert checked >= 2 * 8


@pytest.mark.parametrize("col", [
    pd.Series(["target", "drafter", "target"], dtype=object),  # the engine's: returned as they are
    pd.Series(["a", 3, None, 2.5], dtype=object),  # not all str: converted as astype(str) does
    pd.Series(["x", "y"], dtype="str"),
    pd.Series(pd.Categorical(["decode", "verify", "decode"])),
    pd.Series([1, 2, 3]),
])
def test_str_values_are_astype_str_values(col):
    got, want = str_values(col), col.astype(str).to_numpy()
    assert got.dtype == object and got.tolist() == want.tolist()
