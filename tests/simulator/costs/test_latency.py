"""Latency profiles: least-squares fit, table interpolation, files with provenance, bad input."""
from __future__ import annotations

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costs.latency import (LinearProfile, Measurement, Provenance, TableProfile, builtin_profiles, fit_linear,
                               load_profile, mape, resolve_profile, save_profile)
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
