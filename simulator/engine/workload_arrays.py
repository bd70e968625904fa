"""The engine's view of a workload: one array per request attribute, plus closed-loop settings; and the
`SimInputs` a simulation replays (those requests with their acceptance table and traces)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from simulator.engine.acceptance_table import AcceptanceTable
from traces.bundle import RequestTrace


@dataclass
class EngineWorkload:
    """Requests to serve, in submission order. `trace_index` points into the AcceptanceTable."""

    request_ids: list[str]
    trace_index: np.ndarray  # int64
    arrival: np.ndarray  # float64 seconds; ignored for a closed loop
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    categories: list[str]
    closed_loop_clients: int = 0  # > 0: N clients, each sends its next request when the last one finishes
    think_time: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.request_ids)
        for name in ("trace_index", "arrival", "prompt_len", "output_len"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"workload: {name} has {len(getattr(self, name))} entries, expected {n}")
        if len(self.categories) != n:
            raise ValueError(f"workload: categories has {len(self.categories)} entries, expected {n}")
        if n == 0:
            raise ValueError("workload has no requests")
        if (self.prompt_len < 1).any() or (self.output_len < 1).any():
            raise ValueError("workload: prompt_len and output_len must be >= 1")
        if self.closed_loop_clients == 0 and (np.diff(self.arrival) < 0).any():
            order = np.argsort(self.arrival, kind="stable")
            for name in ("trace_index", "arrival", "prompt_len", "output_len"):
                setattr(self, name, getattr(self, name)[order])
            self.request_ids = [self.request_ids[i] for i in order]
            self.categories = [self.categories[i] for i in order]

    def __len__(self) -> int:
        return len(self.request_ids)


@dataclass
class SimInputs:
    """What a simulation replays: the requests, the acceptance table they index (`trace_index`) and the traces
    themselves in table order (oracles read them). Built by simulator.scenario (`inputs_for`, `inputs_from_traces`)."""

    workload: EngineWorkload
    table: AcceptanceTable
    traces: Sequence[RequestTrace]
    # drafter name -> its bundle kind (traces/bundle.py DRAFTER_KINDS): vLLM V1's lookahead KV depends on it
    # (rules/kv.lookahead_slots); a drafter not named here reserves none
    drafter_kinds: Mapping[str, str] = field(default_factory=dict)
