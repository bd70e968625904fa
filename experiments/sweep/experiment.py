"""A sweep of an experiment config: every point is the config with some keys set (its `sweep:` block),
simulated by run_experiment with a seed derived from the sweep seed and the point's config hash.

Outputs under the sweep's folder: `points/` (the per-point cache), `sweep.json` (every point: its keys,
config hash, seed and per-run summary; byte-identical whichever backend ran it) and `table.csv`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.config import ConfigError, ExperimentConfig, apply_overrides, load_config, override_path
from experiments.sweep.cache import write_json_atomic
from experiments.sweep.hashing import canonical_json, content_hash, derive_seed
from experiments.sweep.runner import Point, ProgressBar, SweepRunner
from experiments.sweep.spec import expand

EVALUATOR = "experiment-summary/1"  # bump when what a point returns changes (invalidates caches)
TABLE_METRICS = ("throughput_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s",
                 "e2e_p99_s", "goodput_req_s", "goodput_fraction", "mean_acceptance_length")


def as_override(key: str, value: Any) -> str:
    """`--set` text for a Python value (JSON is YAML), so sweeps and --set share one key-path rule."""
    return f"{key}={json.dumps(value)}"


def json_ready(doc: Any) -> Any:
    """Plain JSON types only (numpy scalars and other leaves through str), as the cache stores them."""
    return json.loads(canonical_json(doc))


def point_config(base: dict[str, Any], keys: dict[str, Any], where: str) -> dict[str, Any]:
    """The base config doc (no sweep block) with the point's keys set; ConfigError names the point."""
    try:
        return apply_overrides(base, [as_override(k, v) for k, v in keys.items()])
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def check_distinct_keys(base: dict[str, Any], keys: list[str], where: str = "sweep") -> None:
    """Refuse two sweep keys that name one value (`runs.1` and `runs.-1`) or one inside the other
    (`runs.1.policy` and `runs.1.policy.k`): the point would depend on the order the keys are applied."""
    paths: dict[tuple, str] = {}
    for key in keys:
        try:
            path = override_path(base, key)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        for other_path, other in paths.items():
            short = min(len(path), len(other_path))
            if path[:short] == other_path[:short]:
                rel = "name the same value" if len(path) == len(other_path) else "overlap (one is inside the other)"
                raise ConfigError(f"{where}: keys {other!r} and {key!r} {rel}; give each value once")
        paths[path] = key


def evaluate_experiment(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: simulate one point's config, return its per-run summary (JSON-ready)."""
    from experiments.run import run_experiment

    res = run_experiment(payload["config"])
    return {"summary": json_ready(res.summary)}


@dataclass
class SweepPoint:
    keys: dict[str, Any]
    config_hash: str
    seed: int
    config: dict[str, Any]

    def point(self) -> Point:
        return Point({"evaluator": EVALUATOR, "config": {**self.config, "seed": self.seed}})


def sweep_points(cfg: ExperimentConfig, where: str = "sweep") -> list[SweepPoint]:
    """Every point of `cfg.sweep`, validated before anything runs."""
    if cfg.sweep is None:
        raise ValueError(f"{where}: the config has no sweep: block")
    base = cfg.model_dump(mode="json", exclude={"sweep"})
    check_distinct_keys(base, [*cfg.sweep.grid, *(cfg.sweep.random.params if cfg.sweep.random else {})], where)
    sweep_seed = cfg.sweep.seed if cfg.sweep.seed is not None else cfg.seed
    points = []
    for i, keys in enumerate(expand(cfg.sweep, sweep_seed)):
        label = f"{where} point {i} ({', '.join(f'{k}={v!r}' for k, v in keys.items())})"
        doc = point_config(base, keys, label)
        load_config(doc, label=label)  # validate now: a bad point fails before the first one runs
        unseeded = {k: v for k, v in doc.items() if k != "seed"}
        h = content_hash(unseeded)
        points.append(SweepPoint(keys, h, derive_seed(sweep_seed, h), unseeded))
    return points


def run_sweep(cfg: ExperimentConfig, out: str | Path, backend: str = "pool", workers: int | None = None,
              address: str | None = None, progress: bool = True, console=None) -> dict[str, Any]:
    """Simulate every point (cached under out/points), write sweep.json and table.csv, return sweep.json's doc."""
    from experiments.output_folder import SWEEP_ENTRIES, claim_output_folder

    points = sweep_points(cfg)  # a bad point fails before the folder is touched
    out = claim_output_folder(out, SWEEP_ENTRIES)
    with ProgressBar(f"sweep {cfg.name}", len(points), console, progress) as bar, \
            SweepRunner(evaluate_experiment, out / "points", backend, workers, address, bar) as runner:
        results = runner.run([p.point() for p in points])
    doc = {"name": cfg.name, "seed": cfg.sweep.seed if cfg.sweep.seed is not None else cfg.seed,
           "sweep": cfg.sweep.model_dump(mode="json"),
           "points": [{"keys": p.keys, "config_hash": p.config_hash, "seed": p.seed, "summary": r["summary"]}
                      for p, r in zip(points, results)]}
    write_json_atomic(out / "sweep.json", doc, indent=1)
    _write_table(out / "table.csv", doc["points"])
    return {**doc, "computed": runner.stats.computed, "cached": runner.stats.cached}


def _write_table(path: Path, points: list[dict[str, Any]]) -> None:
    import pandas as pd

    from traces.atomic import atomic_write_text

    rows = []
    for p in points:
        for run, s in p["summary"].items():
            row = {**p["keys"], "run": run, "config_hash": p["config_hash"][:12], "seed": p["seed"],
                   "fits": s.get("fits", True)}
            row.update({m: s.get(m) for m in TABLE_METRICS})
            rows.append(row)
    atomic_write_text(path, pd.DataFrame(rows).to_csv(index=False))
