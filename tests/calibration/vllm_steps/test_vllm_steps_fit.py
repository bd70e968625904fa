"""Profiles from vLLM step records: phases, measurements and per-phase MAPE on the recorded fixture."""
from pathlib import Path

import math

from calibration.latency_sweep import fit_profiles
from calibration.vllm_steps.fit import PHASES, draft_measurements, phase, target_measurements
from simulator.costs.step_model import phase_mape
from calibration.vllm_steps.records import RequestStep, StepRecord, load_steps
from simulator.costs.latency import Provenance

FIXTURE = Path(__file__).parent / "fixtures" / "vllm-ngram-k3"


def _step(*reqs):
    return StepRecord(step=0, wall_start=1.0, duration=0.02, num_running=len(reqs), num_waiting=0, kv_blocks_used=None,
                      kv_blocks_total=None, draft_seconds=0.001, requests=list(reqs))


def test_phase_rules():
    prefill = RequestStep("a", 40, 0, 40, 40, 0, 0, 0, 1, 1)
    decode = RequestStep("b", 1, 50, 51, 40, 0, 0, 0, 1, 1)
    verify = RequestStep("c", 4, 50, 51, 40, 3, 3, 1, 2, 2)
    assert phase(_step(decode)) == "decode"
    assert phase(_step(decode, verify)) == "verify"
    assert phase(_step(prefill, verify)) == "prefill"  # a mixed step is priced as the prefill it carries
    assert _step(prefill, verify).kv_tokens == 40 + 54


def test_fixture_fit_reports_every_phase():
    log = load_steps(FIXTURE / "steps.jsonl")
    ms = target_measurements(log, "ngram-k3")
    assert len(ms) == len(log.steps)
    seen = {m.extra["phase"] for m in ms}
    assert seen <= set(PHASES) and {"decode", "verify", "prefill"} <= seen
    # the target's time excludes the drafter's propose call
    for m, st in zip(ms, log.steps):
        assert math.isclose(m.seconds, st.duration - (st.draft_seconds or 0.0))
        assert m.batched_tokens == sum(r.scheduled for r in st.requests)
    fitted = fit_profiles("t", "smollm2", ms, Provenance("measured"))
    rep = phase_mape(fitted.linear, ms)  # the three-number profile on each phase's steps
    assert set(rep) == seen | {"all"}
    assert all(math.isfinite(v) and v >= 0 for v in rep.values())
    assert math.isclose(rep["all"], fitted.report["mape_percent"], abs_tol=0.01)
    assert all(m.extra["shape"]["decode_seqs"] + m.extra["shape"]["prefill_seqs"] == m.num_seqs for m in ms)


def test_warmup_steps_are_skipped_and_drafts_need_timings():
    log = load_steps(FIXTURE / "steps.jsonl")
    cut = log.steps[3].wall_start
    assert len(target_measurements(log, "x", after=cut)) == len(log.steps) - 3
    dms = draft_measurements(log, "x")
    assert dms and all(m.seconds == st.draft_seconds for m, st in
                       zip(dms, [s for s in log.steps if s.draft_seconds is not None and any(r.emitted for r in s.requests)]))


def test_modes_and_plans():
    from calibration.vllm_steps.calibrate import VllmCalibration, parse_mode

    assert parse_mode("ar").method is None
    ng = parse_mode("ngram:4")
    assert (ng.label, ng.k) == ("ngram-k4", 4)
    assert parse_mode("draft_model:3:layers:24").draft_model == "layers:24"
    import pytest

    with pytest.raises(ValueError, match="expected ar, ngram:K or draft_model:K:PATH"):
        parse_mode("eagle:3")
    cal = VllmCalibration("/m", "m", [[1, 2], [3]], [ng], batch_sizes=[1, 2], staggered=[2], gaps_s=[0.3],
                          max_tokens=8)
    plan = cal.plan(ng)
    assert [g["name"] for g in plan["calibration"]] == ["warmup", "batch1", "batch2", "stagger2"]
    assert plan["calibration"][2]["prompts"] == [[3], [1, 2]]  # prompts taken in turn, cycling
    assert plan["calibration"][3]["gap_s"] == 0.3 and plan["load"]["fractions"] == []  # no load levels
    assert plan["spec"]["num_speculative_tokens"] == 4 and plan["max_num_seqs"] == 2
    with pytest.raises(ValueError, match="at least one mode"):
        VllmCalibration("/m", "m", [[1]], [])
