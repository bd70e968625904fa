"""Experiment configs: one typed object, validated early, errors naming the file and the key."""
from __future__ import annotations

import copy
import importlib.resources
import re
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

import oracle.registry  # noqa: F401  (registers the ground-truth policies before runs' policies are parsed)
from experiments.sweep.spec import SweepSpec
from simulator.cluster.config import ClusterSpec
from simulator.costs.draft_cost import DraftCostConfig
from simulator.costs.profile_spec import InlineProfile
from simulator.server_config import RunSpec, ServerConfig, check_replica_overrides, server_for
from traces.config_base import ConfigError, StrictModel, error_lines, validate_model
from traces.errors import TraceFormatError
from traces.parsing import check_plain_data, parse_yaml, read_text
from traces.source import TraceSource
from traces.workload import WorkloadSpec

# A config name becomes a folder under results/: a plain name, never a path.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
MAX_SEED = 2**63 - 1


def check_plain_name(name: str, where: str = "name") -> str:
    """`name` if it is a plain folder name (letters, digits, . _ + -; no separators, not `..`); else ValueError."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or set(name) == {"."}:
        raise ValueError(f"{where}: expected a plain name (letters, digits, '.', '_', '+', '-'; no path "
                         f"separators; at most 128 characters), got {name!r}")
    return name


def plain_name_from(text: str, fallback: str = "run") -> str:
    """A plain name (check_plain_name) made from `text` taken from a file's content: every character outside
    letters, digits and . _ + - becomes '_', leading dots and underscores go, at most 100 characters; a name that
    is left empty is `fallback`. A folder named so never leaves the folder it is created in."""
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", str(text)).lstrip("._")[:100]
    return name if name and NAME_PATTERN.fullmatch(name) else fallback


# Largest SLO values that are plausible in seconds: a bigger one was almost surely typed in milliseconds
SLO_PLAUSIBLE_MAX_S = {"ttft_s": 60.0, "tpot_s": 2.0, "itl_s": 2.0}


def check_slo_seconds(values: dict[str, Any], where: str = "slo") -> None:
    """ValueError when an SLO given in seconds is implausibly large (e.g. ttft_s: 250, meant as 250 ms)."""
    for key, limit in SLO_PLAUSIBLE_MAX_S.items():
        v = values.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > limit:
            raise ValueError(f"{where + '.' if where else ''}{key}: {v:g} s is implausible (more than {limit:g} s); SLO values are in "
                             f"seconds: did you mean {v / 1000:g} ({v:g} ms)?")


class SLO(StrictModel):
    """Per-request service-level objective used for goodput (seconds; a value that only makes sense in ms is
    refused, see SLO_PLAUSIBLE_MAX_S)."""

    ttft_s: float = Field(2.0, gt=0, le=1e6)
    tpot_s: float = Field(0.1, gt=0, le=1e6)

    @model_validator(mode="after")
    def _seconds_not_ms(self) -> "SLO":
        check_slo_seconds(self.model_dump(), "")  # the config error adds the "slo." in front
        return self


class ExperimentConfig(StrictModel):
    """A whole experiment: traces, workload, server, drafter costs and the runs to compare."""

    name: str = Field(min_length=1, description="plain name; results go to results/<name>")
    description: str = ""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    traces: TraceSource = Field(
        "builtin:default", validate_default=True,
        description="bundle folder, builtin:NAME, {pool: {...}} (synthetic drafter pool), {synthetic: SynthSpec} "
                    "(acceptance models and length distributions, traces/synthetic/spec.py), "
                    "{specbench: {file, on_mismatch, dataset, prompt_lookup}} (import a SpecDecode-Bench trace) or "
                    "{acceptance: {base, drafters}}; parsed once into a typed source (traces/source.py)")
    workload: WorkloadSpec
    server: ServerConfig
    drafters: dict[str, DraftCostConfig] = Field(default_factory=dict, description="draft cost per drafter")
    runs: list[RunSpec] = Field(min_length=1)
    cluster: ClusterSpec | None = Field(None, description="replicas of the server behind a router (default: one "
                                                          "server, no router); a run's own cluster block replaces it")
    baseline: str | None = Field(None, description="run that speedups are relative to (default: the first)")
    slo: SLO = SLO()
    timeline_max_steps: int = Field(2000, ge=0, description="steps per run written to the Perfetto timeline")
    sweep: SweepSpec | None = Field(None, description="grid/random sweep over config keys (draftsim sweep)")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        return check_plain_name(v, "name")

    @model_validator(mode="after")
    def _parts_resolve(self) -> "ExperimentConfig":
        """Latency profiles named by the config exist before anything is simulated; the error names the key (each
        run's policy was parsed and built once by RunSpec)."""
        _check_server(self.server, "server")
        _check_profile_name(self.server.target_profile, "server.target_profile")
        check_replica_overrides(self.cluster, "cluster.")
        for name, spec in self.drafters.items():
            if spec.profile is not None:
                _check_profile_name(spec.profile, f"drafters.{name}.profile")
            if isinstance(spec.profile, InlineProfile):  # an inline profile: built now, once (kept)
                spec.cost(where=f"drafters.{name}")
        for i, run in enumerate(self.runs):
            if run.server:
                server = server_for(self.server, run, f"runs.{i}.server")
                _check_server(server, f"runs.{i}.server")
                _check_profile_name(server.target_profile, f"runs.{i}.server.target_profile")
        return self

    @model_validator(mode="after")
    def _names(self) -> "ExperimentConfig":
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


_validate = validate_model


def _check_server(server: ServerConfig, where: str) -> None:
    """Cross-field rules of a server: the KV pool holds at least one block."""
    if server.kv_capacity_tokens is not None and server.kv_capacity_tokens < server.block_size:
        raise ValueError(f"{where}.kv_capacity_tokens: {server.kv_capacity_tokens} tokens is less than one KV block "
                         f"(block_size {server.block_size})")


def _check_profile_name(ref: Any, where: str) -> None:
    """A profile given by name must be a built-in one or an existing file (inline mappings are checked at use)."""
    from simulator.costs.latency import builtin_profile_file, builtin_profiles

    if isinstance(ref, str) and builtin_profile_file(ref) is None and not Path(ref).is_file():
        raise ValueError(f"{where}: {ref!r} is neither a built-in latency profile ({', '.join(builtin_profiles())}) "
                         "nor a profile file")


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
        doc = parse_yaml(read_text(path), str(path))
    except TraceFormatError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    return doc, str(path)


def apply_overrides(doc: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`--set a.b.c=value` (value parsed as YAML; list items by index: runs.1.policy.k=5; a key with dots in its
    name, such as a drafter qwen3-0.6b, by its name: drafters.qwen3-0.6b.profile.overlap=op)."""
    doc = copy.deepcopy(doc)
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. workload.arrival.rate=12")
        key, raw = item.split("=", 1)
        try:
            value = parse_yaml(raw, f"--set {item!r}", what="YAML value") if raw != "" else ""
        except TraceFormatError as e:
            raise ConfigError(str(e)) from None
        parts = _key_parts(doc, key, item)
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


def override_path(doc: dict[str, Any], key: str) -> tuple[str | int, ...]:
    """The path a `--set` key names in `doc`, list indices made non-negative (`runs.-1` -> ('runs', 1)):
    two keys that name one value give one path. ConfigError as apply_overrides would raise it."""
    parts = _key_parts(doc, key, key)
    path: list[str | int] = []
    node: Any = doc
    for part in parts:
        if isinstance(node, list):
            idx = _index(node, part, key) % len(node)
            path.append(idx)
            node = node[idx]
        else:
            path.append(part)
            node = node.get(part) if isinstance(node, dict) else None
    return tuple(path)


def _key_parts(doc: dict[str, Any], key: str, item: str) -> list[str]:
    """The keys a dotted `--set` key names, split at its dots except where a mapping on the way already holds a
    key with dots in it (a drafter named qwen3-0.6b): there the longest such key is taken."""
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {item!r}: expected a dotted key like workload.arrival.rate, got {key!r}")
    out: list[str] = []
    node: Any = doc
    i = 0
    while i < len(parts):
        end = i + 1
        if isinstance(node, dict):
            end = next((j for j in range(len(parts), i + 1, -1) if ".".join(parts[i:j]) in node), i + 1)
        part = ".".join(parts[i:end])
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            node = None
        i = end
    return out


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


def validation_message(err: ValidationError, where: str, what: str, model: type[BaseModel], doc: dict[str, Any],
                       overrides: Sequence[str] = ()) -> str:
    """The failed validation's message (traces.config_base.error_lines) with every error at, above or below a
    `--set` key credited to that item: the header names the items when they account for every error, else
    `where` (the file) with each item named on its own lines."""
    keys = []
    for item in overrides:
        try:
            keys.append((item, [str(p) for p in override_path(doc, item.split("=", 1)[0])]))
        except ConfigError:
            continue
    lines = []
    for loc, msg in error_lines(err, model=model):
        parts = loc.split(".")
        items = [item for item, k in keys if parts[:len(k)] == k[:len(parts)]]
        lines.append((loc, msg, items))
    every = [i for _, _, items in lines for i in items]
    if lines and all(items for _, _, items in lines):
        head = ", ".join(f"--set {i!r}" for i in dict.fromkeys(every))
        return "\n".join([f"{head}: invalid {what} (applied to {where})"] + [f"  {loc}: {msg}" for loc, msg, _ in lines])
    return "\n".join([f"{where}: invalid {what}"] + [
        f"  {loc}: {msg}" + (f" (from {', '.join(f'--set {i!r}' for i in items)})" if items else "")
        for loc, msg, items in lines])


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
    if isinstance(overrides, str):
        raise ConfigError(f"overrides: expected a list of KEY=VALUE strings, got the string {overrides!r}")
    doc = apply_overrides(doc, list(overrides))
    if seed is not None:
        doc["seed"] = seed
    try:
        check_plain_data(doc, where)
        return ExperimentConfig.model_validate(doc)
    except TraceFormatError as e:
        raise ConfigError(str(e)) from None
    except ValidationError as e:
        raise ConfigError(validation_message(e, where, "experiment config", ExperimentConfig, doc, overrides)) from None
