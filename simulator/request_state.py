"""Per-request state of one simulated server: numpy arrays indexed by request, plus the queues.

Every component of the engine (scheduler, step executors, the step outcome) reads and writes this one
object, so a step works on index arrays of its batch instead of per-request Python objects.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from policies.base import NO_DRAFT
from simulator.workload_arrays import EngineWorkload

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
        self.flag = np.full(n, -1, dtype=np.int64)  # PSD sub-batch
        self.pending_d = np.full(n, NO_DRAFT, dtype=np.int64)  # PSD: proposal drafted last step
        self.pending_k = np.zeros(n, dtype=np.int64)
        self.pending_prop = np.zeros(n, dtype=np.int64)
        self.last_drafter = np.full(n, NO_DRAFT, dtype=np.int64)
        self.last_emit = np.full(n, np.nan)
        self.first_sched = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.decode_steps = np.zeros(n, dtype=np.int64)
        self.n_proposed = np.zeros(n, dtype=np.int64)
        self.n_accepted = np.zeros(n, dtype=np.int64)
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
