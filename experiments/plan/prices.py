"""GPU prices in $ per GPU-hour for capacity plans: the built-in table (traces/data/catalog/gpu_prices.yaml,
each entry with its source) or a user file of the same form, with per-GPU overrides on top."""
from __future__ import annotations

import importlib.resources
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traces.catalog import _read_yaml
from traces.errors import shorten


@dataclass(frozen=True)
class GpuPrice:
    usd_per_hour: float
    source: str


def builtin_price_file() -> Path:
    return Path(str(importlib.resources.files("traces") / "data" / "catalog" / "gpu_prices.yaml"))


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: expected a positive number of dollars per GPU-hour, got {shorten(value)}")
    return float(value)


def load_price_file(path: str | Path) -> dict[str, GpuPrice]:
    """`gpu -> {usd_per_hour, source}`; errors name the file and the entry."""
    path = Path(path)
    doc = _read_yaml(path)  # the catalogs' reader: missing file, bad YAML, empty mapping name the file
    out = {}
    for gpu, entry in doc.items():
        where = f"{path}: {gpu}"
        if not isinstance(entry, dict) or set(entry) - {"usd_per_hour", "source"} or "usd_per_hour" not in entry:
            raise ValueError(f"{where}: expected {{usd_per_hour: NUMBER, source: TEXT}}, got {shorten(entry)}")
        source = entry.get("source")
        if not isinstance(source, str) or not source.strip():
            raise ValueError(f"{where}.source: say where the price comes from (a non-empty string)")
        out[str(gpu).lower()] = GpuPrice(_positive(entry["usd_per_hour"], f"{where}.usd_per_hour"), source)
    return out


def price_table(file: str | Path | None = None, overrides: dict[str, float] | None = None,
                where: str = "prices") -> dict[str, GpuPrice]:
    """The price of every GPU: from `file` (default: the built-in table), then `overrides` (source: the plan)."""
    table = load_price_file(file or builtin_price_file())
    for gpu, usd in (overrides or {}).items():
        table[str(gpu).lower()] = GpuPrice(_positive(usd, f"{where}.usd_per_gpu_hour.{gpu}"),
                                           f"override in {where}")
    return table
