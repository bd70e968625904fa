"""What every latency profile carries, whatever its kind: measured points and provenance (simulator/costs/latency.py
reads and writes the profiles; simulator/costs/step_model.py fits the structured kind from the same records)."""
from __future__ import annotations

import math
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


def check_coefficients(where: str, coefficients: dict[str, float]) -> None:
    """Step-time coefficients are seconds per unit: each finite and >= 0 (every fit here is non-negative), else a
    ValueError naming `where` and the coefficient."""
    for term, v in coefficients.items():
        try:
            ok = math.isfinite(float(v)) and float(v) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{where}: coefficient {term!r} is {v!r}; expected a finite number of seconds >= 0")
