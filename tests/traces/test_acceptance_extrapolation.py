"""Level-1/2 acceptance carried to another k: the geometric tail against hand-worked closed forms, the draws
against their expectation, and a held-back k of the SpecDecode-Bench reference traces."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.traces.synth_helpers import bundle_from
from traces.acceptance_levels import (AcceptanceSource, AcceptanceWarning, check_k, extrapolated_mean_length,
                                      extrapolated_survival, resolve_levels, source_from_bundle, tail_rate,
                                      with_level)
from traces.synthetic.common import drafter_traces, tokens_per_step
from traces.synthetic.iid import IidAcceptance

REF = Path(__file__).resolve().parents[2].parent / "shared" / "reference-traces" / "specbench-llama3.1-8b-h100"


def _cubic_root(mean: float) -> float:
    """The a in [0, 1] with 1 + a + a^2 + a^3 = mean, from numpy's polynomial roots (not the bisection)."""
    roots = np.roots([1.0, 1.0, 1.0, 1.0 - mean])
    real = [r.real for r in roots if abs(r.imag) < 1e-9 and -1e-12 <= r.real <= 1 + 1e-12]
    assert len(real) == 1
    return real[0]


def test_mean_length_extrapolates_by_the_leviathan_closed_form():
    src = AcceptanceSource(measured_k=3, mean_length=2.4)
    a = _cubic_root(2.4)
    assert tail_rate("mean_length", src) == pytest.approx(a, abs=1e-10)
    # at k = 5: (1 - a^6) / (1 - a), written out by hand
    assert extrapolated_mean_length("mean_length", src, 5) == pytest.approx((1 - a ** 6) / (1 - a), abs=1e-9)
    assert extrapolated_mean_length("mean_length", src, 5) > 2.4  # no longer capped at the measured length
    assert extrapolated_mean_length("mean_length", src, 3) == pytest.approx(2.4, abs=1e-9)
    assert extrapolated_mean_length("mean_length", src, 2) == pytest.approx(1 + a + a * a, abs=1e-9)


def test_per_position_keeps_its_positions_and_adds_a_geometric_tail():
    src = AcceptanceSource(measured_k=3, per_position=[0.8, 0.6, 0.3])
    a = _cubic_root(1 + 0.8 + 0.6 + 0.3)  # the rate solved from the level's own mean length, 2.7
    s = extrapolated_survival("per_position", src, 5)
    assert s == pytest.approx([1.0, 0.8, 0.6, 0.3, 0.3 * a, 0.3 * a * a], abs=1e-10)
    assert extrapolated_survival("per_position", src, 2) == pytest.approx([1.0, 0.8, 0.6])


def test_draws_follow_the_tail_and_leave_the_measured_k_untouched():
    bundle = bundle_from(IidAcceptance(rate=0.5), n=300, length=300)
    src = AcceptanceSource(measured_k=3, mean_length=2.4)
    capped = with_level(bundle, "d", src, "mean_length", seed=3)
    carried = with_level(bundle, "d", src, "mean_length", seed=3, extrapolate="geometric")
    for k in (1, 2, 3):  # the same draws up to the measured k
        assert tokens_per_step(drafter_traces(capped, "d"), k)[0][k] == tokens_per_step(drafter_traces(carried, "d"),
                                                                                        k)[0][k]
    t, _ = tokens_per_step(drafter_traces(carried, "d"), 6)
    expect = extrapolated_mean_length("mean_length", src, 6)
    steps = 300 * 300 / expect
    assert abs(t[6] - expect) < 4 * np.sqrt(6 * 7 / 4) / np.sqrt(steps) + 0.02
    assert tokens_per_step(drafter_traces(capped, "d"), 6)[0][6] == pytest.approx(2.4, abs=0.05)  # the old cap


def test_config_extrapolates_by_default_warns_and_check_k_follows():
    bundle = bundle_from(IidAcceptance(rate=0.5), n=20, length=50)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        b = resolve_levels(bundle, {"d": {"mean_length": 2.4, "k": 3}}, seed=1)
    msgs = [str(x.message) for x in w if issubclass(x.category, AcceptanceWarning)]
    assert any("measured at k = 3" in m and "extrapolated" in m for m in msgs), msgs
    info = b.meta.extra["acceptance_levels"]["d"]
    assert info["extrapolation"]["model"] == "geometric" and info["measured_k"] == 3
    check_k(b, "d", 5, "here")  # allowed: the extrapolation is stated
    capped = resolve_levels(bundle, {"d": {"mean_length": 2.4, "k": 3, "extrapolate": "none"}}, seed=1)
    with pytest.raises(ValueError, match="measured at k = 3"):
        check_k(capped, "d", 5, "here")
    with pytest.raises(ValueError, match="extrapolate"):
        resolve_levels(bundle, {"d": {"mean_length": 2.4, "k": 3, "extrapolate": "linear"}}, seed=1)


# The held-back k: measured at k = 3 (what vLLM's counters report there), predicted at k = 5, compared with the
# counters the same traces give at k = 5. Bounds: the errors measured when this was written (docs/workloads.md)
# rounded up: per_position <= 1.7%, mean_length <= 5.1% (InstructCoder n-gram).
BOUND = {"per_position": 0.02, "mean_length": 0.06}


@pytest.mark.parametrize("name", ["combined_gsm8k", "combined_instructcoder"])
def test_held_back_k_of_the_reference_traces(name):
    if not REF.is_dir():
        pytest.skip(f"reference traces not found at {REF} (../shared/reference-traces beside the repo)")
    from traces.importers.specbench import import_specbench

    bundle, _ = import_specbench(REF / f"{name}.jsonl", on_mismatch="shortest")
    for d in bundle.meta.drafters:
        at3, at5 = source_from_bundle(bundle, d, 3), source_from_bundle(bundle, d, 5)
        for level, bound in BOUND.items():
            pred = extrapolated_mean_length(level, at3, 5)
            assert abs(pred / at5.mean_length - 1) <= bound, (name, d, level, pred, at5.mean_length)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), st.integers(0, 8))
def test_extrapolation_invariants(conds, extra):
    """For any measured per-position rates: the measured positions are kept, survival never rises, the mean length
    grows with k and stays below the geometric series' limit."""
    surv, s = [], 1.0
    for c in conds:
        s *= c
        surv.append(s)
    src = AcceptanceSource(measured_k=len(surv), per_position=surv)
    k = len(surv) + extra
    ext = extrapolated_survival("per_position", src, k)
    assert ext[: len(surv) + 1] == pytest.approx([1.0, *surv])
    assert np.all(np.diff(ext) <= 1e-12)
    means = [extrapolated_mean_length("per_position", src, j) for j in range(1, k + 1)]
    assert np.all(np.diff(means) >= -1e-12)
    a = tail_rate("per_position", src)
    if a < 1:
        assert means[-1] <= 1 + sum(surv) + surv[-1] * a / (1 - a) + 1e-9
