"""The `sweep:` block of an experiment config: grid and random sweeps over dotted config keys.

    sweep:
      seed: 7                                   # default: the experiment's seed
      grid: {workload.arrival.rate: [8, 16, 32], server.max_num_seqs: [32, 64]}
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
    random: RandomSweep | None = None

    @model_validator(mode="after")
    def _something(self) -> "SweepSpec":
        if not self.grid and self.random is None:
            raise ValueError("sweep: give grid: {KEY: [values]} and/or random: {samples, params}")
        for key, values in self.grid.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"sweep.grid.{key}: expected a non-empty list of values, got {values!r}")
        if self.random is not None:
            both = sorted(set(self.grid) & set(self.random.params))
            if both:
                raise ValueError(f"sweep: key(s) {both} appear in both grid and random")
        if self.num_points() > MAX_SWEEP_POINTS:
            raise ValueError(f"sweep: {self.num_points():,} points (grid sizes x random samples); a sweep runs at "
                             f"most {MAX_SWEEP_POINTS:,}")
        return self

    def num_points(self) -> int:
        """How many points `expand` gives, counted without expanding them."""
        n = 1
        for values in self.grid.values():
            n *= len(values)
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
    if spec.random is None:
        return grid
    rng = np.random.default_rng(spec.seed if spec.seed is not None else seed)
    draws = [{key: _draw(rng, kind, args) for key, dist in spec.random.params.items() for kind, args in dist.items()}
             for _ in range(spec.random.samples)]
    return [{**g, **d} for g in grid for d in draws]
