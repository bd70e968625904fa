"""A planned step: who the target verifies/decodes/prefills, what was drafted, and each device's busy slices."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.scheduler import EMPTY

Slice = tuple[str, float, float, dict]  # (phase, start, end, step-table fields)


@dataclass
class Step:
    """One step of a server; `duration` is how long simulated time advances."""

    dec: np.ndarray  # requests the target verifies/decodes this step
    d_idx: np.ndarray  # drafter per request in dec (NO_DRAFT = none)
    k: np.ndarray
    proposed: np.ndarray
    accepted: np.ndarray
    pre: np.ndarray  # requests prefilled this step
    chunk: np.ndarray  # prefill tokens each processes
    duration: float
    target_slices: list[Slice]
    drafter_slices: list[Slice]
    drafted: np.ndarray = field(default_factory=lambda: EMPTY)  # PSD: draft-only side
    drafted_d: np.ndarray = field(default_factory=lambda: EMPTY)
    drafted_k: np.ndarray = field(default_factory=lambda: EMPTY)
    drafted_prop: np.ndarray = field(default_factory=lambda: EMPTY)

    @property
    def empty(self) -> bool:
        return not (len(self.dec) or len(self.pre) or len(self.drafted))


def prefill_step(now: float, pre: np.ndarray, chunk: np.ndarray, target_t: float, overhead: float,
                 kv: int, tokens: int, drafter_prefill_t: float = 0.0, sub_batch: int = -1,
                 colocated: bool = False) -> Step:
    """A prefill-only step (separate mode): the target prefills, then the drafter runs its own prefill, on the
    draft device (PSD) or, `colocated` (SD), on the target's devices."""
    target_end = target_t + overhead
    t_slices = [("prefill", now, now + target_end, {"num_seqs": len(pre), "prefill_tokens": int(chunk.sum()),
                                                   "batched_tokens": tokens, "kv_tokens": kv, "sub_batch": sub_batch})]
    d_slices = []
    if drafter_prefill_t > 0:  # on the target's devices (colocated SD) it is a phase of its own, emitting nothing
        (t_slices if colocated else d_slices).append(("draft_prefill" if colocated else "prefill", now + target_end, now + target_end + drafter_prefill_t, {
            "num_seqs": len(pre), "prefill_tokens": int(chunk.sum()), "batched_tokens": int(chunk.sum()),
            "kv_tokens": kv}))
    z = EMPTY
    return Step(z, z, z, z, z, pre, chunk, target_end + drafter_prefill_t, t_slices, d_slices)


def plan_prefill_only(now: float, sched, pricing, drafter_names: tuple[str, ...], *, colocated: bool,
                      sub_batch: int = -1) -> Step | None:
    """Separate-prefill mode: the step that prefills the waiting requests (target, then the drafters' own pass),
    or None when no prefill-only step is due. Shared by the SD and PSD executors."""
    pre, chunk = sched.prefill_only(now)
    if not len(pre):
        return None
    t, _, tokens, kv = pricing.target_time(EMPTY, EMPTY, pre, chunk)
    dp = pricing.drafter_prefill_time(pre, chunk, drafter_names)
    return prefill_step(now, pre, chunk, t, pricing.overhead, kv, tokens, dp, sub_batch=sub_batch, colocated=colocated)
