"""The traffic a candidate is tried at: a rate turned into a point's workload section, and the run sizes."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.plan.config import PlanConfig
from traces.workload import WorkloadSpec


CURVE_SIZE_FRACTION = 0.25  # curve runs: this share of the search runs' size (TrafficModel.curve_requests_for)


@dataclass
class TrafficModel:
    """Turns a rate into the workload section of a point (and replay files into time-scaled copies)."""

    plan: PlanConfig
    base_workload: WorkloadSpec  # the base config's workload: the request count, lengths and sampling not given
    num_requests: int = 0
    replay_times: np.ndarray | None = None
    replay_sha256: str = ""
    recorded_rate: float | None = None

    def __post_init__(self) -> None:
        t = self.plan.traffic
        n = t.num_requests or self.base_workload.num_requests
        if t.arrival == "replay":
            from traces.workload import load_arrival_times

            path = Path(t.file)
            times = load_arrival_times(path)
            n = n or times.shape[0]
            if n > times.shape[0]:
                raise ValueError(f"traffic.num_requests: {n} but {path} has {times.shape[0]} arrival times")
            m = times.shape[0]
            if m < 2 or not times[m - 1] > times[0]:
                raise ValueError(f"traffic.file: {path}: need at least two distinct arrival times to define a rate")
            self.replay_times = times  # every run replays the first N of them (N sized per candidate)
            self.replay_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
            self.recorded_rate = (m - 1) / float(times[m - 1] - times[0])
        if not n:
            raise ValueError("traffic.num_requests: required when the base config does not set workload.num_requests")
        self.num_requests = int(n)

    @classmethod
    def of(cls, plan: PlanConfig, base: dict[str, Any]) -> "TrafficModel":
        """The traffic of `plan` over its base experiment document (experiments/plan/candidates.py base_experiment)."""
        return cls(plan, WorkloadSpec.model_validate(base["workload"]))

    @property
    def target_rate(self) -> float:
        return float(self.plan.traffic.target_rate or self.recorded_rate)

    def requests_for(self, replicas: int) -> int:
        """Requests per simulation: the given number, lengthened so the steady-state window holds
        tail_requests / (1 - attainment) requests and every replica at least requests_per_replica (replay: at most
        the recorded file's length)."""
        from simulator.measure.steady_state import WARMUP_FRACTION

        s, q = self.plan.search, self.plan.slo.attainment
        tail = math.ceil(s.tail_requests / (1.0 - q) / (1.0 - 2 * WARMUP_FRACTION)) if q < 1 else 0
        n = max(self.num_requests, tail, s.requests_per_replica * replicas)
        return min(n, self.replay_times.shape[0]) if self.replay_times is not None else n

    def curve_requests_for(self, replicas: int) -> int:
        """Requests per curve run: the curves read mean latencies, not the SLO's
        quantile, so CURVE_SIZE_FRACTION of the search size (at least the given number and requests_per_replica
        per replica)."""
        n = max(self.num_requests, self.plan.search.requests_per_replica * replicas,
                math.ceil(CURVE_SIZE_FRACTION * self.requests_for(replicas)))
        return min(n, self.requests_for(replicas))

    def workload(self, arrival: dict[str, Any], n: int) -> dict[str, Any]:
        t = self.plan.traffic
        doc = {"num_requests": n, "arrival": arrival}
        for key, given in (("lengths", t.lengths), ("sample", t.sample)):
            doc[key] = given if given is not None else getattr(self.base_workload, key).model_dump(mode="json")
        return doc

    def at_rate(self, rate: float, n: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(workload doc, replay instruction or None) for `n` open-loop arrivals at `rate` req/s."""
        t = self.plan.traffic
        if t.arrival == "poisson":
            return self.workload({"kind": "poisson", "rate": rate}, n), None
        if t.arrival == "gamma":
            return self.workload({"kind": "gamma", "rate": rate, "cv": t.cv}, n), None
        scale = self.recorded_rate / rate
        return (self.workload({"kind": "replay", "file": "<scaled replay file>"}, n),
                {"file": str(Path(t.file).resolve()), "sha256": self.replay_sha256, "scale": scale,
                 "num_requests": n})
