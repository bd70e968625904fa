"""The calibration's own step-speed drift: how far the engine's measured time for the same work moved, against the
calibration profile's price of it, between cells of the calibration's steps, as a distribution of factors that a
predictive repeat's target step prices are scaled by.

A cell is one calibration group's steps at one batch size (sequences in the step): the groups are `calibrate
vllm`'s and `validate`'s (batch 1, 2, 4, 8, the staggered groups: each run alone, in its own tens of seconds) or
`--from-server`'s client runs. Cells carry two things a load level may differ by: the machine's speed while the
group ran, and the profile's misfit at that batch size (in experiments/validation/vllm-serve-smollm2/, the 0.9 x
level's AR decode steps took 11-14% less than the structured fit of the 0.3 x level priced at batch 3-5 and 19% more
at batch 8).
Client runs alone hide the second: each mixes every batch size, so their factors agree within 2% there, while a
level near capacity runs more of its steps at the largest batches.

Model (calibration data only; the load level being predicted never enters). Each cell b has the speed factor
f_b = M_b / P_b, its steps' total measured target seconds over the calibration profile's price of the same steps.
Its log x_b = ln f_b has a sampling variance from step-to-step jitter alone,
v_b = n_b / (n_b - 1) * sum_i (m_i - f_b p_i)^2 / M_b^2 (delta method, steps independent, one degree of freedom
spent on f_b; a cell of one step has no estimate and is left out, counted). The between-cell variance is
tau^2 = max(0, s^2(x) - mean(v_b)) (method of moments: the spread left once the steps' own jitter is taken out),
and a load level is a new cell:

    ln f = mean(x) + tau * sqrt(1 + 1/B) * T,   T ~ Student t with B - 1 degrees of freedom,

the prediction interval of one new draw from a normal sample of B cells (B >= 3). A level mixes batch sizes, so
one cell's factor for a whole level errs wide. Repeats draw f stratified (one draw per equal-probability stratum,
strata shuffled), so a few repeats span the distribution; every draw follows the seed.

The cells come from the profile itself: each kept step records the client group it ran in (`extra.group`) and its
batch, so `validate --drift` and `compare --drift` draw from the same rule.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from calibration.vllm_steps.fit import GROUP_FIELD
from simulator.costs.latency import LinearProfile, Measurement
from simulator.costs.step_model import StructuredProfile, measured_price
from traces.errors import TraceFormatError

MIN_CELLS = 3  # two cells leave one degree of freedom: a Cauchy draw, factors without bound


@dataclass(frozen=True)
class CellFactor:
    """One cell (a calibration group at one batch size): its steps, speed factor (measured / priced) and the
    jitter variance of ln factor."""

    name: str
    steps: int
    factor: float
    jitter_var: float


@dataclass(frozen=True)
class SpeedDrift:
    """The between-cell distribution of the speed factor (module doc): ln f = center + scale * T(df)."""

    groups: tuple[CellFactor, ...]  # the cells (the report's `groups`)
    center: float  # mean of the cells' ln factor
    between: float  # tau: the between-cell standard deviation of ln factor
    left_out_steps: int = 0  # steps that served requests of several groups at once (no one group's speed)
    lone_steps: int = 0  # steps alone in their cell (no jitter estimate)

    @property
    def df(self) -> int:
        return len(self.groups) - 1

    @property
    def scale(self) -> float:
        """tau * sqrt(1 + 1/B): a new group's spread around the estimated center."""
        return self.between * float(np.sqrt(1.0 + 1.0 / len(self.groups)))

    def factor(self, u: float | np.ndarray) -> float | np.ndarray:
        """The factor at quantile u in (0, 1)."""
        return np.exp(self.center + self.scale * stats.t.ppf(u, self.df))

    def draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n factors, one from each of n equal-probability strata in a shuffled order."""
        u = (rng.permutation(n) + rng.random(n)) / n
        return np.asarray(self.factor(np.clip(u, 1e-12, 1.0 - 1e-12)), dtype=float)

    def summary(self) -> dict[str, Any]:
        """For the report: each group's factor and the distribution's parameters and 5-95% range."""
        lo, hi = self.factor(np.array([0.05, 0.95]))
        return {"groups": [{"name": g.name, "steps": g.steps, "factor": round(g.factor, 4),
                            "jitter_sd": round(float(np.sqrt(g.jitter_var)), 4)} for g in self.groups],
                "center_factor": round(float(np.exp(self.center)), 4), "between_sd_log": round(self.between, 4),
                "df": self.df, "factor_5_95": [round(float(lo), 4), round(float(hi), 4)],
                "left_out_steps": self.left_out_steps, "lone_steps": self.lone_steps}


def cell_factor(profile, name: str, ms: list[Measurement]) -> CellFactor:
    """The cell's total measured target seconds over the profile's price of its steps, and ln factor's jitter
    variance (module doc; at least two steps)."""
    m = np.array([x.seconds for x in ms], dtype=float)
    p = np.array([measured_price(profile, x) for x in ms], dtype=float)
    if len(m) < 2 or m.sum() <= 0 or p.sum() <= 0:
        raise ValueError(f"calibration cell {name!r}: {len(m)} steps, {m.sum():.4g} s measured, priced "
                         f"{p.sum():.4g} s; expected at least 2 steps with positive times")
    f = float(m.sum() / p.sum())
    n = len(m)
    return CellFactor(name, n, f, float(n / (n - 1) * ((m - f * p) ** 2).sum() / m.sum() ** 2))


def speed_drift(profile, cells: list[tuple[str, list[Measurement]]]) -> SpeedDrift:
    """The drift distribution of the module doc from the cells' steps, priced by `profile`."""
    if len(cells) < MIN_CELLS:
        raise ValueError(f"speed drift: {len(cells)} calibration cell(s) of 2 steps or more ({[g for g, _ in cells]}"
                         f"); expected at least {MIN_CELLS} (calibration groups x batch sizes) to estimate a spread "
                         "between them")
    gs = tuple(cell_factor(profile, name, ms) for name, ms in cells)
    x = np.log([g.factor for g in gs])
    tau2 = max(0.0, float(np.var(x, ddof=1)) - float(np.mean([g.jitter_var for g in gs])))
    return SpeedDrift(gs, float(x.mean()), float(np.sqrt(tau2)))


def profile_groups(profile, where: str) -> tuple[list[tuple[str, list[Measurement]]], int]:
    """A profile's kept measurements by the calibration group each step ran in (`extra.group`, written by
    `calibrate vllm`, `--from-server` and `validate`), groups in order of first appearance; and how many steps
    ran in several groups at once (`group: null`), left out. A step without the field is an error: the profile
    predates the tags, so no drift can be measured from it."""
    groups: dict[str, list[Measurement]] = {}
    mixed = 0
    for i, m in enumerate(profile.measurements):
        if not isinstance(m.extra, dict) or GROUP_FIELD not in m.extra:
            raise TraceFormatError(where, f"profile {profile.name!r}: step {i} does not record its calibration group; "
                                   "expected profiles written by `draftsim calibrate vllm` (or --from-server) of "
                                   "this version: calibrate again to measure the drift",
                                   field=f"measurements[{i}].extra.{GROUP_FIELD}")
        g = m.extra[GROUP_FIELD]
        if g is None:
            mixed += 1
        else:
            groups.setdefault(str(g), []).append(m)
    return list(groups.items()), mixed


def profile_cells(profile, where: str) -> tuple[list[tuple[str, list[Measurement]]], int, int]:
    """A profile's kept measurements by cell, `GROUP:SEQUENCES` (profile_groups' groups split by the step's batch),
    in order of first appearance; the steps of several groups at once and the steps alone in their cell, left
    out."""
    groups, mixed = profile_groups(profile, where)
    cells: dict[str, list[Measurement]] = {}
    for name, ms in groups:
        for m in ms:
            cells.setdefault(f"{name}:{m.num_seqs}", []).append(m)
    kept = [(name, ms) for name, ms in cells.items() if len(ms) >= 2]
    return kept, mixed, sum(len(ms) for ms in cells.values() if len(ms) < 2)


def profile_drift(profile, where: str) -> SpeedDrift:
    """The drift distribution between the cells of a profile's kept steps (profile_cells); a ValueError when they
    are too few (speed_drift)."""
    cells, mixed, lone = profile_cells(profile, where)
    return dataclasses.replace(speed_drift(profile, cells), left_out_steps=mixed, lone_steps=lone)


def scaled_profile(profile, factor: float):
    """The profile with every step priced `factor` times (linear and structured forms are homogeneous in their
    coefficients, roofline's max included)."""
    if not (np.isfinite(factor) and factor > 0):
        raise ValueError(f"speed factor: expected a finite number > 0, got {factor!r}")
    if isinstance(profile, (LinearProfile, StructuredProfile)):
        return dataclasses.replace(profile, name=f"{profile.name} x{factor:.4f}",
                                   coefficients={k: v * factor for k, v in profile.coefficients.items()})
    raise ValueError(f"profile {profile.name!r}: cannot scale a {type(profile).__name__}")


def drifted(profiles, factor: float):
    """Profiles (validate_compare.Profiles) with the target's step prices scaled by `factor`; the drafter cost
    and the step overhead are kept (the factor is measured on target step time only)."""
    return dataclasses.replace(profiles, target=scaled_profile(profiles.target, factor))
