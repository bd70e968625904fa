"""A planned step: who the target verifies/decodes/prefills, what was drafted, and each device's busy slices."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.engine.scheduler import EMPTY


@dataclass(frozen=True, slots=True)
class StepSlice:
    """One busy interval of a device within a step: its phase and the step-table fields it fills."""

    phase: str  # see records.STEP_COLUMNS["phase"]
    start: float
    end: float
    num_seqs: int = 0
    prefill_tokens: int = 0
    batched_tokens: int = 0
    kv_tokens: int = 0
    proposed_tokens: int = 0
    accepted_tokens: int = 0
    sub_batch: int = -1
    drafters: str = ""


@dataclass
class Step:
    """One step of a server; `duration` is how long simulated time advances."""

    decoding: np.ndarray  # requests the target verifies/decodes this step
    drafter_idx: np.ndarray  # drafter per request in `decoding` (NO_DRAFT = none)
    k: np.ndarray
    proposed: np.ndarray
    accepted: np.ndarray
    prefilled: np.ndarray  # requests prefilled this step
    prefill_chunk: np.ndarray  # prompt tokens each of `prefilled` processes
    duration: float
    target_slices: list[StepSlice]
    drafter_slices: list[StepSlice]
    drafted: np.ndarray = field(default_factory=lambda: EMPTY)  # PSD: the draft-only side
    drafted_drafter_idx: np.ndarray = field(default_factory=lambda: EMPTY)
    drafted_k: np.ndarray = field(default_factory=lambda: EMPTY)
    drafted_proposed: np.ndarray = field(default_factory=lambda: EMPTY)

    @property
    def empty(self) -> bool:
        return not (len(self.decoding) or len(self.prefilled) or len(self.drafted))


def prefill_step(now: float, prefilled: np.ndarray, chunk: np.ndarray, target_t: float, overhead: float,
                 kv: int, tokens: int, drafter_prefill_t: float = 0.0, sub_batch: int = -1,
                 colocated: bool = False) -> Step:
    """A prefill-only step (separate mode): the target prefills, then the drafter runs its own prefill, on the
    draft device (PSD) or, `colocated` (SD), on the target's devices."""
    target_end = target_t + overhead
    prompt_tokens = int(chunk.sum())
    t_slices = [StepSlice("prefill", now, now + target_end, num_seqs=len(prefilled), prefill_tokens=prompt_tokens,
                          batched_tokens=tokens, kv_tokens=kv, sub_batch=sub_batch)]
    d_slices = []
    if drafter_prefill_t > 0:  # on the target's devices (colocated SD) it is a phase of its own, emitting nothing
        (t_slices if colocated else d_slices).append(StepSlice(
            "draft_prefill" if colocated else "prefill", now + target_end, now + target_end + drafter_prefill_t,
            num_seqs=len(prefilled), prefill_tokens=prompt_tokens, batched_tokens=prompt_tokens, kv_tokens=kv))
    z = EMPTY
    return Step(z, z, z, z, z, prefilled, chunk, target_end + drafter_prefill_t, t_slices, d_slices)


def plan_prefill_only(now: float, sched, pricing, drafter_names: tuple[str, ...], *, colocated: bool,
                      sub_batch: int = -1) -> Step | None:
    """Separate-prefill mode: the step that prefills the waiting requests (target, then the drafters' own pass),
    or None when no prefill-only step is due. Shared by the SD and PSD executors."""
    prefilled, chunk = sched.prefill_only(now)
    if not len(prefilled):
        return None
    t, _, tokens, kv = pricing.target_time(EMPTY, EMPTY, prefilled, chunk)
    dp = pricing.drafter_prefill_time(prefilled, chunk, drafter_names)
    return prefill_step(now, prefilled, chunk, t, pricing.overhead, kv, tokens, dp, sub_batch=sub_batch,
                        colocated=colocated)
