"""Per-request state of one simulated server: numpy arrays indexed by request, plus the queues.

Every component of the engine (scheduler, step executors, the step outcome) reads and writes this one
object, so a step works on index arrays of its batch instead of per-request Python objects.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from policies.base import NO_DRAFT
from simulator.engine.workload_arrays import EngineWorkload

NOT_ARRIVED, WAITING, RUNNING, FINISHED = 0, 1, 2, 3


class RequestState:
    """Where every request stands: status, progress, KV held, PSD side, timestamps and counters."""

    def __init__(self, wl: EngineWorkload, num_drafters: int):
        n = len(wl)
        self.status = np.full(n, NOT_ARRIVED, dtype=np.int8)
        self.arrival = wl.arrival.astype(np.float64).copy()
        self.gen = np.zeros(n, dtype=np.int64)  # output tokens generated so far
        self.prefill_left = np.zeros(n, dtype=np.int64)
        self.prefill_done = np.zeros(n, dtype=np.int64)  # prefill tokens already in KV for this admission
        self.blocks = np.zeros(n, dtype=np.int64)  # KV blocks held
        self.sub_batch = np.full(n, -1, dtype=np.int64)  # PSD sub-batch (0/1), -1 outside PSD or before joining
        self.pending_d = np.full(n, NO_DRAFT, dtype=np.int64)  # PSD: proposal drafted last step
        self.pending_k = np.zeros(n, dtype=np.int64)
        self.pending_prop = np.zeros(n, dtype=np.int64)
        self.last_drafter = np.full(n, NO_DRAFT, dtype=np.int64)
        self.last_emit = np.full(n, np.nan)
        self.first_sched = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.verify_counts = StepCounters(n)  # decode steps, proposed and accepted drafts per request
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.started = np.zeros(n, dtype=bool)
        self.usage = np.zeros(num_drafters + 1, dtype=np.int64)  # per drafter; last slot: no drafter
        self.running: list[int] = []  # admission order
        self.prefilling: dict[int, None] = {}  # running requests with prompt tokens left, in admission order
        self.waiting: deque[int] = deque()
        self.n_finished = 0

    def running_array(self) -> np.ndarray:
        return np.fromiter(self.running, dtype=np.int64, count=len(self.running))

    def arrive(self, i: int) -> None:
        self.status[i] = WAITING
        self.waiting.append(i)


class StepCounters:
    """Per-request sums over verify/decode steps: steps taken, drafts proposed, drafts accepted. The emission rule
    (simulator/engine/rules/emission.py) adds into the arrays each step; a compiled run adds its totals."""

    def __init__(self, n: int):
        self.steps = np.zeros(n, dtype=np.int64)
        self.proposed = np.zeros(n, dtype=np.int64)
        self.accepted = np.zeros(n, dtype=np.int64)

    def add_run(self, idx: np.ndarray, steps: int, proposed: np.ndarray | None, accepted: np.ndarray | None) -> None:
        """`steps` steps over requests `idx` (distinct) at once, with their summed proposed/accepted drafts."""
        self.steps[idx] += steps
        if proposed is not None:
            self.proposed[idx] += proposed
            self.accepted[idx] += accepted

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(decode steps, proposed drafts, accepted drafts) per request so far."""
        return self.steps, self.proposed, self.accepted
