"""Sweep points: expansion order, seeded random draws, hashes and seeds that ignore execution order."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from experiments.config import ConfigError, load_config
from experiments.sweep.experiment import sweep_points
from experiments.sweep.hashing import content_hash, derive_seed
from experiments.sweep.spec import SweepSpec, expand

BASE = {
    "name": "tiny", "traces": "builtin:default",
    "workload": {"num_requests": 12, "arrival": {"kind": "poisson", "rate": 8.0}, "sample": {"with_replacement": True}},
    "server": {"target_profile": "llama3.1-8b-h100-specbench", "kv_capacity_tokens": 100000},
    "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"}},
    "runs": [{"name": "AR", "mode": "ar"}, {"name": "sd", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3}}],
}


@given(st.dictionaries(st.sampled_from(["a", "b.c", "d.0.e"]), st.lists(st.integers(), min_size=1, max_size=3),
                       min_size=1), st.integers(1, 4), st.integers(0, 2**31 - 1))
@settings(max_examples=40, deadline=None)
def test_grid_times_random_points_in_fixed_order(grid, samples, seed):
    spec = SweepSpec(grid=grid, random={"samples": samples, "params": {"z": {"uniform": [0.0, 1.0]}}})
    points = expand(spec, seed)
    assert len(points) == math.prod(len(v) for v in grid.values()) * samples
    assert points == expand(spec, seed)  # same seed, same points
    assert all(0.0 <= p["z"] <= 1.0 for p in points)
    assert [{k: p[k] for k in grid} for p in points[::samples]] == \
        [dict(zip(grid, combo)) for combo in __import__("itertools").product(*grid.values())]


def test_random_draws_follow_the_sweep_seed():
    spec = {"random": {"samples": 5, "params": {"x": {"loguniform": [1, 100]}, "k": {"int": [1, 6]},
                                                "c": {"choice": ["a", "b"]}}}}
    a, b = expand(SweepSpec(**spec, seed=1), 0), expand(SweepSpec(**spec, seed=2), 0)
    assert a != b
    assert all(1 <= p["x"] <= 100 and p["k"] in range(1, 7) and p["c"] in ("a", "b") for p in a + b)


@pytest.mark.parametrize("bad, message", [
    ({}, "give grid"),
    ({"grid": {"a": []}}, "non-empty list"),
    ({"random": {"samples": 2, "params": {"a": {"normal": [0, 1]}}}}, "expected one of"),
    ({"random": {"samples": 2, "params": {"a": {"uniform": [2, 1]}}}}, "low <= high"),
    ({"random": {"samples": 2, "params": {"a": {"loguniform": [0, 1]}}}}, "> 0"),
    ({"random": {"samples": 2, "params": {"a": {"int": [0.5, 3]}}}}, "integers"),
    ({"grid": {"a": [1]}, "random": {"samples": 1, "params": {"a": {"int": [1, 2]}}}}, "both grid and random"),
])
def test_bad_sweep_blocks_name_the_key(bad, message):
    with pytest.raises(ValidationError, match=message):
        SweepSpec(**bad)


def test_point_seed_comes_from_the_config_hash_not_the_order():
    cfg = load_config({**BASE, "sweep": {"grid": {"workload.arrival.rate": [4, 8, 16]}}})
    rev = load_config({**BASE, "sweep": {"grid": {"workload.arrival.rate": [16, 8, 4]}}})
    fwd = {p.keys["workload.arrival.rate"]: (p.config_hash, p.seed) for p in sweep_points(cfg)}
    bwd = {p.keys["workload.arrival.rate"]: (p.config_hash, p.seed) for p in sweep_points(rev)}
    assert fwd == bwd
    assert len({s for _, s in fwd.values()}) == 3
    p = sweep_points(cfg)[0]
    assert p.seed == derive_seed(0, p.config_hash) and p.config_hash == content_hash(p.config)
    assert p.config["workload"]["arrival"]["rate"] == 4 and "sweep" not in p.config


def test_a_bad_point_fails_before_anything_runs():
    cfg = load_config({**BASE, "sweep": {"grid": {"runs.1.mode": ["sd", "warp"]}}})
    with pytest.raises(ConfigError, match=r"point 1 .*runs\.1\.mode"):
        sweep_points(cfg)
    cfg = load_config({**BASE, "sweep": {"grid": {"runs.7.mode": ["sd"]}}})
    with pytest.raises(ConfigError, match="index 7 out of range"):
        sweep_points(cfg)
