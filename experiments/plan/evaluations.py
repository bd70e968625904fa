"""What the planner records per candidate as its simulations return: the saturated service probe and each tested
rate (a search rate's verdict, or a curve point), typed; plan.json reads them (experiments/plan/result.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from simulator.measure.metrics import round_sig


@dataclass(frozen=True)
class ServiceProbe:
    """The saturated service-rate run of a candidate (experiments/plan/point.py SERVICE_PROBE_RULE) and its figure:
    output tokens/s in its saturated window over the workload's mean output length (None: no window)."""

    requests: int | None  # requests the probe ran (None: it left no saturated window)
    clients: int  # its closed loop's clients
    tok_s: float | None
    service_req_s: float | None

    def to_json(self) -> dict[str, Any]:
        """plan.json `service_probe`: the fields in this order, floats to the report's significant digits."""
        return {k: round_sig(v) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass
class Evaluation:
    """One rate a candidate ran at: a search rate with its verdict (experiments/plan/search.py Verdict; plan.json
    re-judges `sustainable`, `decided` and `why` from the search's final verdicts), or a curve point
    (`curve_only`: one run, no verdict). `seeds` holds each run's point record as the worker returned it
    (experiments/plan/point.py), with its `seed`."""

    rate: float
    seeds: list[dict[str, Any]]
    sustainable: bool | None = None
    decided: bool | None = None
    overloaded: bool | None = None
    why: str | None = None
    attainment: float | None = None  # the verdict's pooled attainment (a search rate only)
    attainment_interval: list[float | None] | None = None  # its interval [low, high] (a search rate only)
    curve_only: bool = False
