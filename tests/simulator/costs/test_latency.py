"""Latency profiles: least-squares fit, table interpolation, files with provenance, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costs.latency import (TABLE_HEAD, LinearProfile, Measurement, Provenance, TableProfile, builtin_profiles,
                                     fit_linear, load_profile, mape, resolve_profile, save_profile)
from traces.errors import TraceFormatError


def _grid(coef, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for bs in (1, 2, 4, 8, 16, 32):
        for q in (1, 2, 4):
            for ctx in (128, 512, 2048):
                t = coef[0] * bs * ctx + coef[1] * bs * q + coef[2] * bs + coef[3]
                out.append(Measurement(bs, bs * q, bs * ctx, t * (1 + noise * rng.standard_normal())))
    return out


@settings(max_examples=25, deadline=None)
@given(a=st.floats(1e-9, 1e-7), b=st.floats(1e-6, 1e-4), c=st.floats(0, 1e-4), d=st.floats(1e-4, 1e-2))
def test_fit_recovers_exact_coefficients(a, b, c, d):
    fit = fit_linear("t", _grid((a, b, c, d)))
    got = fit.profile.coefficients
    assert got["kv_tokens"] == pytest.approx(a, rel=1e-4, abs=1e-12)
    assert got["batched_tokens"] == pytest.approx(b, rel=1e-4, abs=1e-10)
    assert got["const"] == pytest.approx(d, rel=1e-4, abs=1e-9)
    assert fit.mape < 1e-3


def test_fit_reports_mape_and_term_shares_on_noisy_data():
    meas = _grid((4e-8, 2e-5, 0.0, 6e-3), noise=0.05, seed=1)
    fit = fit_linear("noisy", meas)
    # the reported MAPE is the fitted profile's own error on the points, worked out here from its predictions
    errs = [abs(fit.profile.step_time(m.num_seqs, m.batched_tokens, m.kv_tokens) - m.seconds) / m.seconds
            for m in meas]
    assert fit.mape == pytest.approx(100 * float(np.mean(errs)), rel=1e-9)
    assert fit.profile.fit["mape_percent"] == pytest.approx(fit.mape)  # and the saved profile carries it
    assert 1.0 < fit.mape < 10.0
    assert sum(fit.per_term_share.values()) == pytest.approx(1.0, rel=1e-6)


def test_table_profile_hits_measured_points_and_falls_back_outside():
    meas = _grid((4e-8, 2e-5, 0.0, 6e-3), noise=0.03, seed=2)
    table = TableProfile("tab", meas)
    for m in meas[::5]:
        assert table.step_time(m.num_seqs, m.batched_tokens, m.kv_tokens) == pytest.approx(m.seconds, rel=1e-6)
    far = table.step_time(512, 512, 10**7)  # outside the measured hull: the linear fit answers
    lin = fit_linear("tab", meas).profile.step_time(512, 512, 10**7)
    assert far == pytest.approx(lin)
    assert mape(table, meas) < 1e-6


def _log_affine(c, seqs, tokens, kv):
    """An affine function of the table's coordinates (log1p of each batch dimension)."""
    return c[0] + c[1] * math.log1p(seqs) + c[2] * math.log1p(tokens) + c[3] * math.log1p(kv)


@settings(max_examples=60, deadline=None)
@given(c=st.tuples(st.floats(1e-3, 1e-2), st.floats(0, 1e-2), st.floats(0, 1e-2), st.floats(0, 1e-2)),
       seqs=st.integers(1, 32), tokens=st.integers(1, 4000), kv=st.integers(128, 300_000), flat=st.booleans())
def test_table_profile_reproduces_an_affine_function_of_its_coordinates(c, seqs, tokens, kv, flat):
    """Piecewise-linear interpolation is exact for a function affine in the coordinates it interpolates over
    (log1p of sequences, tokens, KV), in every simplex of the triangulation: any point of the measured grid's box
    prices as the function itself. `flat`: one sequence throughout, a 2-axis table."""
    seqs = 1 if flat else seqs
    grid = [(b, q, ctx) for b in ((1,) if flat else (1, 4, 32)) for q in (1, 100, 4000) for ctx in (128, 4096, 300_000)]
    table = TableProfile("affine", [Measurement(*g, _log_affine(c, *g)) for g in grid])
    assert len(table.data) > TABLE_HEAD
    assert table.step_time(seqs, tokens, kv) == pytest.approx(_log_affine(c, seqs, tokens, kv), rel=1e-9)


def test_every_shipped_table_profile_passes_through_each_measured_point():
    """Each measurement prices as measured, the hull's vertices included (scipy's LinearNDInterpolator, which read
    these tables before, gave some of those the linear fit: its directed walk stopped at the hull)."""
    names = [n for n in builtin_profiles() if resolve_profile(n).kind == "table"]
    assert len(names) >= 5
    for name in names:
        table = resolve_profile(name)
        if len(table.data) == TABLE_HEAD:  # points that span no volume: the linear fit answers everywhere
            for m in table.measurements:
                assert table.step_time(m.num_seqs, m.batched_tokens, m.kv_tokens) == \
                    table.fallback.step_time(m.num_seqs, m.batched_tokens, m.kv_tokens)
            continue
        for m in table.measurements:
            assert table.step_time(m.num_seqs, m.batched_tokens, m.kv_tokens) == pytest.approx(m.seconds, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["smollm2-135m-instruct-cpu-table", "qwen3-8b-h200-hf-bf16-table"]),
       u=st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)))
def test_table_profile_is_scipys_linear_interpolation_inside_the_hull(name, u):
    """Inside the measured points' hull, where scipy's LinearNDInterpolator (on the same log1p coordinates) finds a
    simplex, the same value up to rounding; where neither it nor scipy's brute-force search finds one, the linear
    fit."""
    from scipy.interpolate import LinearNDInterpolator

    table = resolve_profile(name)
    pts = np.array([[math.log1p(m.num_seqs), math.log1p(m.batched_tokens), math.log1p(m.kv_tokens)]
                    for m in table.measurements])
    scipy_table = LinearNDInterpolator(pts, [m.seconds for m in table.measurements])
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    q = [int(round(math.expm1(lo[i] + u[i] * (hi[i] - lo[i])))) for i in range(3)]
    x = np.array([[math.log1p(v) for v in q]])
    want = float(scipy_table(x)[0])
    got = table.step_time(*q)
    if np.isfinite(want):
        assert got == pytest.approx(want, rel=1e-12)
    elif scipy_table.tri.find_simplex(x, bruteforce=True)[0] == -1:
        assert got == table.fallback.step_time(*q)


def test_save_load_round_trip_keeps_provenance_and_measurements(tmp_path):
    fit = fit_linear("x", _grid((4e-8, 2e-5, 1e-6, 6e-3)), model="m",
                     provenance=Provenance("measured", backend="hf", device="cpu", dtype="fp32", date="2026-11-29"))
    path = save_profile(fit.profile, tmp_path / "x.yaml")
    back = load_profile(path)
    assert isinstance(back, LinearProfile) and back.coefficients == pytest.approx(fit.profile.coefficients)
    assert back.provenance.backend == "hf" and len(back.measurements) == len(fit.profile.measurements)
    assert back.step_time(8, 32, 4096) == pytest.approx(fit.profile.step_time(8, 32, 4096))


def test_builtin_specbench_profile_matches_published_formula():
    prof = resolve_profile("llama3.1-8b-h100-specbench")
    assert "llama3.1-8b-h100-specbench" in builtin_profiles()
    expected = 3.92645679e-08 * 10000 + 2.10103129e-05 * 64 + 5.88590713e-03
    assert prof.step_time(16, 64, 10000) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("doc,field", [
    ({"kind": "cubic", "name": "a"}, "kind"),
    ({"kind": "linear", "name": "a", "coefficients": {"kv": 1.0}}, "coefficients.kv"),
    ({"kind": "linear", "name": "a", "coefficients": {"const": -1.0}}, "coefficients.const"),
    ({"kind": "linear", "name": ""}, "name"),
    ({"kind": "table", "name": "a", "measurements": []}, "measurements"),
])
def test_bad_profile_files_name_the_field(tmp_path, doc, field):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(TraceFormatError) as e:
        load_profile(p)
    assert str(p) in str(e.value) and field in str(e.value)


def test_missing_profile_is_clear(tmp_path):
    with pytest.raises(TraceFormatError, match="not found"):
        load_profile(tmp_path / "none.yaml")
    with pytest.raises(TraceFormatError, match="no such latency profile"):
        resolve_profile("no-such-profile")


def test_builtin_profile_file_is_what_the_listing_maps_every_name_to():
    """The direct look-up gives the listing's file for every shipped profile and None for any other name."""
    from simulator.costs.latency import builtin_profile_file, builtin_profiles

    listed = builtin_profiles()
    assert listed
    for name, path in listed.items():
        assert builtin_profile_file(name) == path
    for bad in ("", ".", "..", "no-such-profile", "../profiles/" + next(iter(listed)), next(iter(listed)) + ".yaml"):
        assert builtin_profile_file(bad) is None
