"""The calibration bootstrap: a refit on a resample of noise-free steps gives the same coefficients (any resample
of exact data fits exactly), resamples follow the seed, and `validate --bootstrap` keeps the point prediction and
only widens the predictive interval (repeat 0 is the unresampled fit)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibration.vllm_steps.bootstrap import bootstrap_profiles, refit_target, resample
from calibration.vllm_steps.validate_compare import Profiles, validate_all
from calibration.vllm_steps.validate_run import load_config
from simulator.costs.latency import Measurement
from simulator.costs.step_model import fit_structured

FIX = Path(__file__).parent / "fixtures" / "vllm-validate"


def _steps(noise: float, seed: int = 0) -> list[Measurement]:
    """Decode steps of 1-8 sequences priced 10 ms + 2 ms per sequence + 1 us per KV token (+ noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(200):
        n, kv = int(rng.integers(1, 9)), int(rng.integers(100, 4000))
        t = 0.010 + 0.002 * n + 1e-6 * kv
        shape = {"decode_seqs": n, "draft_tokens": 0, "decode_kv": kv, "prefill_seqs": 0, "prefill_tokens": 0,
                 "prefill_kv": 0, "prefill_attn": 0}
        out.append(Measurement(num_seqs=n, batched_tokens=n, kv_tokens=kv, seconds=t * (1 + noise * rng.normal()),
                               extra={"phase": "decode", "shape": shape}))
    return out


def test_refit_of_exact_steps_is_the_same_profile():
    prof = fit_structured("p", _steps(0.0), "linear")
    again = refit_target(prof, np.random.default_rng(1))
    for k, v in prof.coefficients.items():
        assert again.coefficients[k] == pytest.approx(v, abs=1e-9), k
    assert prof.coefficients["const"] == pytest.approx(0.010, abs=1e-6)


def test_resamples_follow_the_seed_and_vary_with_noise():
    prof = fit_structured("p", _steps(0.1), "linear")
    a, b = (refit_target(prof, np.random.default_rng(7)) for _ in range(2))
    assert a.coefficients == b.coefficients
    c = refit_target(prof, np.random.default_rng(8))
    assert c.coefficients != a.coefficients
    assert sorted(resample([1, 2, 3], np.random.default_rng(0))) != [] and \
        set(resample([1, 2, 3], np.random.default_rng(0))) <= {1, 2, 3}
    p = bootstrap_profiles(Profiles(prof, None, 0.005), np.full(10, 0.004), np.random.default_rng(0))
    assert p.step_overhead_s == pytest.approx(0.004) and p.drafter is None


@pytest.mark.slow
def test_validate_bootstrap_keeps_the_point_prediction_and_widens_the_interval():
    cfg = load_config(FIX / "validate.yaml")
    plain = validate_all(cfg, FIX, model_name="smollm2", repeats=3)
    boot = validate_all(cfg, FIX, model_name="smollm2", repeats=3, bootstrap=True)
    pairs = [(a, b) for a, b in zip(plain.rows, boot.rows) if a["kind"] == "predictive"]
    assert pairs and all(a["metric"] == b["metric"] and a["predicted"] == b["predicted"] for a, b in pairs)
    assert all(b["interval"][0] <= b["predicted"] <= b["interval"][1] for _, b in pairs if b["predicted"] is not None)
    assert any(b["interval"] != a["interval"] for a, b in pairs)  # the refits priced the repeats differently
