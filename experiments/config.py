"""Experiment configs: one typed object, validated early, errors naming the file and the key."""
from __future__ import annotations

import copy
import importlib.resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from experiments.sweep.spec import SweepSpec
from simulator.cluster_config import ClusterSpec
from simulator.server_config import RunSpec, ServerConfig


class SLO(BaseModel):
    """Per-request service-level objective used for goodput."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ttft_s: float = Field(2.0, gt=0)
    tpot_s: float = Field(0.1, gt=0)


class ExperimentConfig(BaseModel):
    """A whole experiment: traces, workload, server, drafter costs and the runs to compare."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    description: str = ""
    seed: int = 0
    traces: str | dict[str, dict[str, Any]] = Field(
        "builtin:default",
        description="bundle folder, builtin:NAME, {pool: {...}} (synthetic drafter pool) or "
                    "{specbench: {file, on_mismatch, prompt_lookup}} (import a SpecDecode-Bench trace)")
    workload: dict[str, Any] = Field(description="traces.workload.WorkloadSpec fields")
    server: ServerConfig
    drafters: dict[str, dict[str, Any]] = Field(default_factory=dict, description="draft cost per drafter")
    runs: list[RunSpec] = Field(min_length=1)
    cluster: ClusterSpec | None = Field(None, description="replicas of the server behind a router (default: one "
                                                          "server, no router); a run's own cluster block replaces it")
    baseline: str | None = Field(None, description="run that speedups are relative to (default: the first)")
    slo: SLO = SLO()
    timeline_max_steps: int = Field(2000, ge=0, description="steps per run written to the Perfetto timeline")
    sweep: SweepSpec | None = Field(None, description="grid/random sweep over config keys (draftsim sweep)")

    @model_validator(mode="after")
    def _names(self) -> "ExperimentConfig":
        if isinstance(self.traces, dict) and (len(self.traces) != 1 or set(self.traces) - {"pool", "specbench"}):
            raise ValueError(f"traces: a generated source is one of {{pool: ...}} or {{specbench: ...}}, "
                             f"got keys {sorted(self.traces)}")
        names = [r.name for r in self.runs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"runs: names must be unique, repeated: {sorted(dup)}")
        if self.baseline is not None and self.baseline not in names:
            raise ValueError(f"baseline: {self.baseline!r} is not one of the runs {names}")
        return self

    @property
    def baseline_run(self) -> str:
        return self.baseline or self.runs[0].name


class ConfigError(ValueError):
    """A config that fails validation; the message names the file and every bad key."""


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid experiment config"]
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "required key is missing"
        got = e.get("input")
        tail = f" (got {got!r})" if e["type"] not in ("missing", "extra_forbidden") and not isinstance(got, dict) else ""
        lines.append(f"  {loc}: {msg}{tail}")
    return "\n".join(lines)


def builtin_config_dir() -> Path:
    return Path(str(importlib.resources.files("experiments") / "configs"))


def builtin_configs() -> dict[str, Path]:
    folder = builtin_config_dir()
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def read_config_doc(source: str | Path) -> tuple[dict[str, Any], str]:
    """YAML mapping of a config file or built-in config name, and a label naming where it came from."""
    builtin = builtin_configs()
    path = builtin.get(str(source)) or Path(source)
    if not path.is_file():
        raise ConfigError(f"{source}: no such config file or built-in config (built-ins: {', '.join(builtin)})")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return doc, str(path)


def apply_overrides(doc: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`--set a.b.c=value` (value parsed as YAML; list items by index: runs.1.policy.k=5)."""
    doc = copy.deepcopy(doc)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. workload.arrival.rate=12")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw != "" else ""
        parts = key.strip().split(".")
        node: Any = doc
        for j, part in enumerate(parts[:-1]):
            node = _child(node, part, key, create=True)
        last = parts[-1]
        if isinstance(node, list):
            idx = _index(node, last, key)
            node[idx] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(f"--set {key}: {'.'.join(parts[:-1])} is not a mapping or list")
    return doc


def _index(node: list, part: str, key: str) -> int:
    try:
        idx = int(part)
    except ValueError:
        raise ConfigError(f"--set {key}: {part!r} must be a list index") from None
    if not -len(node) <= idx < len(node):
        raise ConfigError(f"--set {key}: index {idx} out of range (list has {len(node)} items)")
    return idx


def _child(node: Any, part: str, key: str, create: bool) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, key)]
    if isinstance(node, dict):
        if part not in node or node[part] is None:
            if not create:
                raise ConfigError(f"--set {key}: no key {part!r}")
            node[part] = {}
        return node[part]
    raise ConfigError(f"--set {key}: cannot descend into {part!r}")


def load_config(source: "str | Path | dict[str, Any] | ExperimentConfig", overrides=(), seed: int | None = None,
                label: str | None = None) -> ExperimentConfig:
    """Validate a config given as a path, built-in name, dict or object; apply --set and --seed."""
    if isinstance(source, ExperimentConfig):
        if not overrides and seed is None:
            return source
        doc, where = source.model_dump(mode="json"), label or f"config {source.name!r}"
    elif isinstance(source, dict):
        doc, where = source, label or "<dict config>"
    else:
        doc, where = read_config_doc(source)
    doc = apply_overrides(doc, list(overrides))
    if seed is not None:
        doc["seed"] = seed
    try:
        return ExperimentConfig.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, where)) from None
