"""The `sweep:` block of an experiment config: grid and random sweeps over dotted config keys.

    sweep:
      seed: 7                                   # default: the experiment's seed
      grid: {workload.arrival.rate: [8, 16, 32], server.max_num_seqs: [32, 64]}
      zip: {drafters.d.fraction: [0.5, 1.0], server.target_profile.coefficients.const: [0.02, 0.01]}
                                                # optional; keys that move together (the i-th value of each
                                                # key makes the i-th zip point), crossed with the grid
      random:                                   # optional; crossed with the grid
        samples: 4
        params: {runs.1.policy.k: {int: [1, 6]}, workload.arrival.rate: {loguniform: [4, 64]}}

Keys are the dotted paths `--set` takes. Points are expanded in a fixed order (grid in key order, then the
random draws from the sweep seed), so the point list never depends on how the points are later executed.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from traces.config_base import StrictModel as _Strict
from traces.limits import MAX_SWEEP_POINTS

DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")


class RandomSweep(_Strict):
    """`samples` points, each key drawn from its distribution: {uniform|loguniform: [lo, hi]}, {int: [lo, hi]}
    (inclusive), {choice: [values...]}."""

    samples: int = Field(ge=1, le=MAX_SWEEP_POINTS)
    params: dict[str, dict[str, list[Any]]] = Field(min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _dists(self) -> "RandomSweep":
        for key, dist in self.params.items():
            if len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
                raise ValueError(f"sweep.random.params.{key}: expected one of {{{', '.join(DISTRIBUTIONS)}: [...]}}, "
                                 f"got {dist!r}")
            (kind, args), = dist.items()
            if kind == "choice":
                if not args:
                    raise ValueError(f"sweep.random.params.{key}.choice: expected a non-empty list")
                continue
            if len(args) != 2 or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args) \
                    or not args[0] <= args[1]:
                raise ValueError(f"sweep.random.params.{key}.{kind}: expected [low, high] numbers with low <= high, "
                                 f"got {args!r}")
            if kind == "loguniform" and args[0] <= 0:
                raise ValueError(f"sweep.random.params.{key}.loguniform: bounds must be > 0, got {args!r}")
            if kind == "int" and not all(isinstance(a, int) for a in args):
                raise ValueError(f"sweep.random.params.{key}.int: bounds must be integers, got {args!r}")
        return self


class SweepSpec(_Strict):
    """Which config keys a sweep varies and how."""

    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="seed of the random draws and of every point (default: the config's)")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted key -> values; the cross product")
    zip: dict[str, list[Any]] = Field(default_factory=dict, description=(
        "dotted key -> values, all lists of one length: the i-th values of every key make one point (keys that "
        "must move together, e.g. a draft time and a verify time); crossed with the grid"))
    random: RandomSweep | None = None

    @model_validator(mode="after")
    def _something(self) -> "SweepSpec":
        if not self.grid and not self.zip and self.random is None:
            raise ValueError("sweep: give grid: {KEY: [values]}, zip: {KEY: [values]} and/or random: {samples, params}")
        for block, keys in (("grid", self.grid), ("zip", self.zip)):
            for key, values in keys.items():
                if not isinstance(values, list) or not values:
                    raise ValueError(f"sweep.{block}.{key}: expected a non-empty list of values, got {values!r}")
        lengths = {key: len(values) for key, values in self.zip.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"sweep.zip: every key needs the same number of values, got {lengths}")
        blocks = {"grid": set(self.grid), "zip": set(self.zip),
                  "random": set(self.random.params) if self.random is not None else set()}
        for a, b in (("grid", "zip"), ("grid", "random"), ("zip", "random")):
            both = sorted(blocks[a] & blocks[b])
            if both:
                raise ValueError(f"sweep: key(s) {both} appear in both {a} and {b}")
        if self.num_points() > MAX_SWEEP_POINTS:
            raise ValueError(f"sweep: {self.num_points():,} points (grid sizes x zip length x random samples); a "
                             f"sweep runs at most {MAX_SWEEP_POINTS:,}")
        return self

    def num_points(self) -> int:
        """How many points `expand` gives, counted without expanding them."""
        n = 1
        for values in self.grid.values():
            n *= len(values)
        if self.zip:
            n *= len(next(iter(self.zip.values())))
        return n * (self.random.samples if self.random is not None else 1)


def _draw(rng: np.random.Generator, kind: str, args: list[Any]) -> Any:
    if kind == "uniform":
        return float(rng.uniform(args[0], args[1]))
    if kind == "loguniform":
        return float(np.exp(rng.uniform(np.log(args[0]), np.log(args[1]))))
    if kind == "int":
        return int(rng.integers(args[0], args[1], endpoint=True))
    return args[int(rng.integers(0, len(args)))]


def expand(spec: SweepSpec, seed: int) -> list[dict[str, Any]]:
    """Every point of the sweep as {dotted key: value}, in a fixed order."""
    keys = list(spec.grid)
    grid = [dict(zip(keys, combo)) for combo in itertools.product(*(spec.grid[k] for k in keys))] or [{}]
    if spec.zip:
        zipped = [dict(zip(spec.zip, values)) for values in zip(*spec.zip.values())]
        grid = [{**g, **z} for g in grid for z in zipped]
    if spec.random is None:
        return grid
    rng = np.random.default_rng(spec.seed if spec.seed is not None else seed)
    draws = [{key: _draw(rng, kind, args) for key, dist in spec.random.params.items() for kind, args in dist.items()}
             for _ in range(spec.random.samples)]
    return [{**g, **d} for g in grid for d in draws]
