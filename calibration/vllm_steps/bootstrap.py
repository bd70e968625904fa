"""The calibration's own uncertainty: a step profile refit on a with-replacement resample of the steps it was fitted
on (same model, same form: the fit's sampling error, not a new form choice), and the step overhead as the mean
of a resample of the busy gaps. `validate --bootstrap` prices each predictive repeat with one such refit, so its
interval spans the fit's uncertainty as well as the borrowed acceptance."""
from __future__ import annotations

import dataclasses

import numpy as np

from simulator.costs.latency import LinearProfile, fit_linear
from simulator.costs.step_model import StructuredProfile, fit_structured


def resample(items: list, rng: np.random.Generator) -> list:
    """len(items) draws with replacement."""
    idx = rng.integers(0, len(items), len(items))
    return [items[i] for i in idx]


def refit_target(profile, rng: np.random.Generator):
    """The profile refit on a bootstrap resample of its own measurements (structured: the same form; linear:
    absolute-error least squares, `fit_target`'s)."""
    ms = profile.measurements
    if len(ms) < 2:
        raise ValueError(f"profile {profile.name!r} keeps {len(ms)} measurement(s): nothing to resample")
    if isinstance(profile, StructuredProfile):
        return fit_structured(profile.name, resample(ms, rng), profile.form, model=profile.model,
                              provenance=profile.provenance)
    if isinstance(profile, LinearProfile):
        return fit_linear(profile.name, resample(ms, rng), model=profile.model, weighting="absolute",
                          provenance=profile.provenance).profile
    raise ValueError(f"profile {profile.name!r}: cannot resample a {type(profile).__name__}")


def bootstrap_profiles(profiles, gaps: np.ndarray, rng: np.random.Generator):
    """Profiles (validate_compare.Profiles) with the target refit on a resample and the overhead the mean of a
    resample of the busy gaps; the drafter cost is kept."""
    overhead = float(np.mean(resample(list(gaps), rng))) if len(gaps) else profiles.step_overhead_s
    return dataclasses.replace(profiles, target=refit_target(profiles.target, rng), step_overhead_s=overhead)
