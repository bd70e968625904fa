"""Per-request state of one simulated server: numpy arrays indexed by request, plus the queues as arrays.

A server's run writes its outcome here (simulator/engine/compiled_run.py, compiled_replica.py); the requests table,
the router and the early stop read it. The queues are arrays as the queue rules (simulator/engine/rules/queue.py)
and the kernels keep them.
"""
from __future__ import annotations

import numpy as np

from policies.base import NO_DRAFT
from simulator.engine.workload_arrays import EngineWorkload


class RequestState:
    """Where every request stands: the queues, progress, KV held, PSD side, timestamps and counters."""

    def __init__(self, wl: EngineWorkload, num_drafters: int, max_num_seqs: int | None = None):
        n = len(wl)
        seqs = max(1, n if max_num_seqs is None else max_num_seqs)
        # the queues (rules/queue.py): running requests run[:n_run] in admission order; waiting, the preempted
        # requeued[:nq] (running + preempted never exceed max_num_seqs) then the arrivals arrived[admit:ptr]
        self.run = np.zeros(seqs, dtype=np.int64)
        self.n_run = 0
        self.requeued = np.zeros(seqs, dtype=np.int64)
        self.nq = 0
        self.arrived = np.arange(n, dtype=np.int64)  # in arrival order (a single server's: index order)
        self.ptr = 0
        self.admit = 0
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
        self.n_finished = 0

    @property
    def n_waiting(self) -> int:
        return self.nq + self.ptr - self.admit

    def waiting_array(self) -> np.ndarray:
        """The waiting queue in order: the preempted requests, then the arrivals not yet admitted."""
        return np.concatenate([self.requeued[:self.nq], self.arrived[self.admit:self.ptr]])


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
