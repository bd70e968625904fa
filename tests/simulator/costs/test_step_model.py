"""Structured step-time model: the fit recovers the form it was made from, the form is chosen on held-back
steps, profile files round-trip and refuse bad fields, and the engine prices each step by its shape."""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costs.latency import Measurement, load_profile, save_profile
from simulator.costs.step_model import (LINEAR_TERMS, StepShape, StructuredProfile, fit_structured, holdout_split,
                                  phase_bias, phase_mape, select_form)
from traces.errors import TraceFormatError


def random_shapes(n: int, rng: np.random.Generator) -> list[StepShape]:
    """Shapes like a served stream's: decodes of 1-8 sequences, some with drafts, some with a prompt joining."""
    out = []
    for _ in range(n):
        dec = int(rng.integers(0, 9))
        drafts = int(rng.integers(0, 4 * dec + 1)) if rng.random() < 0.5 else 0
        pre = int(rng.integers(0, 3)) if rng.random() < 0.3 or dec == 0 else 0
        chunks = rng.integers(20, 400, size=pre)
        done = rng.integers(0, 50, size=pre)
        out.append(StepShape(dec, drafts, int(rng.integers(50, 300) * dec), pre, int(chunks.sum()),
                             int((done + chunks).sum()), int((chunks * (done + chunks)).sum())))
    return out


def measured(shapes: list[StepShape], seconds) -> list[Measurement]:
    return [Measurement(s.num_seqs, s.num_seqs + s.draft_tokens + s.prefill_tokens, s.decode_kv + s.prefill_kv,
                        float(t), extra={"shape": asdict(s)}) for s, t in zip(shapes, seconds)]


TRUE = {"const": 0.02, "num_seqs": 1e-3, "draft_tokens": 4e-4, "decode_kv": 2e-6, "prefill_tokens": 3e-4,
        "prefill_seqs": 2e-3, "prefill_attn": 1e-8, "prefill_step": 5e-3, "verify_step": 1e-3}


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_linear_fit_recovers_noiseless_steps(seed):
    rng = np.random.default_rng(seed)
    shapes = random_shapes(120, rng)
    truth = StructuredProfile("truth", TRUE)
    ms = measured(shapes, [truth.shape_time(s) for s in shapes])
    fit = fit_structured("fit", ms, "linear")
    for s in random_shapes(30, rng):
        assert math.isclose(fit.shape_time(s), truth.shape_time(s), rel_tol=1e-5, abs_tol=1e-9)


def test_absolute_fit_is_unbiased_in_total_under_noise():
    rng = np.random.default_rng(3)
    shapes = random_shapes(400, rng)
    truth = StructuredProfile("truth", TRUE)
    y = [truth.shape_time(s) * rng.lognormal(0, 0.15) for s in shapes]
    ms = measured(shapes, y)
    fit = fit_structured("fit", ms, "linear")
    assert fit.coefficients["const"] > 0  # with a free constant, least squares leaves residuals summing to zero
    assert abs(phase_bias(fit, ms)["all"]) < 1e-6
    assert sum(fit.shape_time(s) for s in shapes) == pytest.approx(sum(y), rel=1e-9)


@pytest.mark.parametrize("form", ["linear", "roofline"])
def test_relative_weighting_by_hand(form):
    # one step shape measured at 1 s and 3 s: absolute least squares predicts their mean, 2 s; relative least
    # squares minimises (c - 1)^2 + (c / 3 - 1)^2, so c (1 + 1/9) = 1 + 1/3: c = 1.2 s
    s = StepShape(decode_seqs=4, draft_tokens=0, decode_kv=400)
    ms = measured([s, s], [1.0, 3.0])
    assert fit_structured("a", ms, form).shape_time(s) == pytest.approx(2.0, rel=1e-4)
    assert fit_structured("r", ms, form, weighting="relative").shape_time(s) == pytest.approx(1.2, rel=1e-4)
    with pytest.raises(ValueError, match="weighting"):
        fit_structured("x", ms, form, weighting="squared")


def test_roofline_form_is_chosen_when_steps_are_compute_bound_past_a_knee():
    rng = np.random.default_rng(7)
    shapes = random_shapes(300, rng)
    truth = StructuredProfile("truth", {"const": 0.03, "decode_kv": 1e-6, "flop_tokens": 1.5e-4, "num_seqs": 5e-4},
                              form="roofline")
    ms = measured(shapes, [truth.shape_time(s) * rng.lognormal(0, 0.02) for s in shapes])
    prof, rep = select_form("t", ms, seed=0)
    assert rep["form"] == "roofline" and prof.form == "roofline"
    lin, roof = (rep["forms"][f]["held_back_mape_percent"]["all"] for f in ("linear", "roofline"))
    assert roof < lin and roof < 3.0
    assert rep["held_back_steps"] + rep["fit_steps"] == len(ms)


def test_holdout_split_is_seeded_and_disjoint():
    ms = measured(random_shapes(50, np.random.default_rng(0)), np.ones(50))
    a1, b1 = holdout_split(ms, 0.25, 5)
    a2, b2 = holdout_split(ms, 0.25, 5)
    assert [id(m) for m in b1] == [id(m) for m in b2] and len(a1) + len(b1) == 50
    assert not {id(m) for m in a1} & {id(m) for m in b1}
    with pytest.raises(ValueError, match="held-back fraction"):
        holdout_split(ms, 1.0, 0)


def test_phase_mape_splits_by_step_phase():
    shapes = [StepShape(2, 0, 100), StepShape(2, 4, 100), StepShape(1, 0, 50, 1, 30, 30, 900)]
    prof = StructuredProfile("p", {"const": 0.01})
    ms = measured(shapes, [0.01, 0.02, 0.005])
    assert phase_mape(prof, ms) == {"all": round((0 + 50 + 100) / 3, 2), "decode": 0.0, "verify": 50.0,
                                    "prefill": 100.0}


def test_uniform_batch_reads_as_decoding():
    prof = StructuredProfile("p", {"num_seqs": 1.0, "draft_tokens": 10.0, "decode_kv": 100.0, "prefill_tokens": 1e3})
    assert prof.step_time(3, 7, 2) == 3 + 4 * 10 + 200


def test_profile_file_round_trip_and_errors(tmp_path):
    rng = np.random.default_rng(1)
    shapes = random_shapes(40, rng)
    prof = fit_structured("rt", measured(shapes, [StructuredProfile("t", TRUE).shape_time(s) for s in shapes]),
                          "roofline")
    back = load_profile(save_profile(prof, tmp_path / "p.yaml"))
    assert isinstance(back, StructuredProfile) and back.form == "roofline"
    assert all(back.shape_time(s) == prof.shape_time(s) for s in shapes)
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: structured\nname: b\nform: cubic\ncoefficients: {const: 0.1}\n")
    with pytest.raises(TraceFormatError, match="form"):
        load_profile(bad)
    bad.write_text("kind: structured\nname: b\ncoefficients: {flop_tokens: 0.1}\n")  # a roofline term, linear form
    with pytest.raises(TraceFormatError, match=r"coefficients\.flop_tokens"):
        load_profile(bad)
    bad.write_text("kind: structured\nname: b\ncoefficients: {const: -1}\n")
    with pytest.raises(TraceFormatError, match=r"coefficients\.const"):
        load_profile(bad)
    assert set(LINEAR_TERMS) == set(StepShape(1, 0, 1).features()) - {"flop_tokens"}


def test_engine_prices_prefill_and_decode_steps_by_shape():
    """One request alone under vLLM V1 scheduling: a prefill step at const + prefill price, then decode steps at
    const + per-sequence price; first token and finish are those sums exactly."""
    from simulator.scenario import inputs_from_traces, make_scenario, simulate
    from simulator.server_config import RunSpec, ServerConfig
    from traces.bundle import RequestTrace

    prof = StructuredProfile("p", {"const": 0.01, "num_seqs": 0.002, "prefill_tokens": 0.001, "prefill_step": 0.004,
                                   "decode_kv": 1e-5})
    prompt, out = 40, 6
    traces = [RequestTrace("r", prompt, out, {})]
    inputs = inputs_from_traces(traces, (), arrival=np.array([0.0]), request_ids=["r"], categories=[""],
                                with_acceptance=False)
    server = ServerConfig(target_profile=prof, scheduler="vllm-v1", max_num_seqs=4, max_num_batched_tokens=2048,
                          block_size=16, kv_capacity_tokens=4096)
    res = simulate(make_scenario(RunSpec(name="ar", mode="ar"), server, {}, 0), inputs)
    r = res.requests.iloc[0]
    first = 0.01 + 0.002 + 0.001 * prompt + 0.004
    assert r.ttft == pytest.approx(first, abs=1e-12)
    decode_kv = sum(prompt + g for g in range(1, out))  # context before each decode step's new token
    decodes = (out - 1) * (0.01 + 0.002) + 1e-5 * decode_kv
    assert r.finish_time == pytest.approx(first + decodes, rel=1e-9)
