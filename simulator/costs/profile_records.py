"""What every latency profile carries, whatever its kind: measured points and provenance (simulator/costs/latency.py
reads and writes the profiles; simulator/costs/step_model.py fits the structured kind from the same records)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_COEFFICIENT_S = 1000.0  # seconds per token, sequence or step: far above any real hardware


@dataclass
class Measurement:
    """One measured point: median seconds over repeats, its spread, and machine load when taken."""

    num_seqs: int
    batched_tokens: int
    kv_tokens: int
    seconds: float
    spread: float = 0.0  # (p90 - p10) / 2 over repeats, seconds
    repeats: int = 1
    load: float | None = None  # 1-min load average / cores when measured
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Provenance:
    """Where a profile came from."""

    source: str  # "measured", "published", "roofline", "imported"
    backend: str = ""
    device: str = ""
    dtype: str = ""
    date: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    notes: str = ""
