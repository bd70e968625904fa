"""Base for oracles: policies that read the true acceptance traces (never allowed in live mode)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from policies.base import Choice, Policy
from traces.acceptance import reachable_drafts, trace_position
from traces.bundle import DrafterTrace, RequestTrace


class GroundTruthPolicy(Policy):
    """Stores request id -> RequestTrace from `bind_ground_truth`; refuses to run unbound.

    An oracle whose choice at a position depends on nothing but the request's trace and that position
    (`by_position`) states it for every position at once (`position_choices`); its `choose` reads that table, and
    the compiled engine takes the same table (simulator/engine/compiled_run.py)."""

    reads_ground_truth = True
    learns = False  # the engine may skip its feedback
    by_position = False  # choices are position_choices' table (set per instance by the oracles that are)
    greedy_by_rate = False  # choices weigh each drafter's oracle k by the step's time (oracle/best_drafter.py)
    time_plan = None  # plan 'min-time': the PlanFollower whose plans `choose` follows (oracle/exact.py)

    def __init__(self) -> None:
        self._traces: dict[str, RequestTrace] = {}
        self._tables: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def position_choices(self, request_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(drafter as an index into drafters_used(), -1 for none; k) at every output position of the request."""
        raise NotImplementedError(f"oracle {self.name!r} chooses by more than the position")

    def tabulated(self, view) -> Choice:
        """The choice at the view's position (past the trace: its last, traces.acceptance.trace_position) from the
        request's position_choices (made once per request)."""
        table = self._tables.get(view.request_id)
        if table is None:
            table = self._tables[view.request_id] = self.position_choices(view.request_id)
        p = trace_position(view.position, len(table[0]))
        d, k = int(table[0][p]), int(table[1][p])
        return Choice(None, 0) if d < 0 else Choice(self.drafters_used()[d], k)

    def finish_request(self, request_id: str) -> None:
        self._tables.pop(request_id, None)

    def bind_ground_truth(self, traces: Mapping[str, Any]) -> None:
        self._traces.update(traces)

    def trace_of(self, request_id: str) -> RequestTrace:
        t = self._traces.get(request_id)
        if t is None:
            raise RuntimeError(f"oracle {self.name!r} has no ground truth for request {request_id!r}; "
                               f"the runner must call bind_ground_truth first")
        return t

    def largest_reachable_k(self, drafters: Sequence[str], k_max: int | None) -> int:
        """`k_max`, or without one the most drafts any bound request will all have accepted (`reachable_drafts` at
        its peak): an oracle without k_max drafts everything that will be accepted, so only the ground truth bounds
        it."""
        if k_max is not None:
            return k_max
        if not self._traces:
            raise ValueError(f"oracle {self.name!r} has no k_max, so its largest k comes from the ground truth, "
                             "which is not bound yet; set k_max or bind the traces first")
        top = 0
        for r in self._traces.values():
            for d in drafters:
                t = r.drafters.get(d)
                if t is not None and t.acc_len.shape[0]:
                    n = t.acc_len.shape[0]
                    top = max(top, int(np.max(reachable_drafts(t.acc_len, t.proposal_len, None, np.arange(n), n))))
        return top

    def drafter_trace(self, request_id: str, drafter: str) -> DrafterTrace:
        t = self.trace_of(request_id).drafters.get(drafter)
        if t is None:
            raise ValueError(f"oracle {self.name!r}: drafter {drafter!r} is not in the trace of request "
                             f"{request_id!r} (has {sorted(self.trace_of(request_id).drafters)})")
        return t

