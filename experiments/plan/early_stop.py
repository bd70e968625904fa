"""The plan's early stop: a search run ends once its verdict can no longer change (simulator/measure/early_stop.py runs
the check on the server's step hook; this module says when, by the search's own verdict rule, `judge`).

Rules (EARLY_STOP_RULE), asked every CHECK_EVERY of the window's requests finished:
- window complete (every run): after the window's end, every request arriving in the window has finished. Nothing
  the verdict or the plan's steady-state figures read can change any more (window arrivals, departures inside the
  window, attainment and latencies of the window requests): they equal the full run's, bit for bit.
- overloaded (a settling run: a rate's first seed under FIRST_SEED_RULE, or a curve run): after the window's end
  the window's departures are final; when the overload rule `judge` applies first (steady_state.is_overloaded) says
  overloaded on them, the run is overloaded as the full run would be (its service rate measured the same); its
  attainment is not measured.
- strict fail (a settling search run): each window batch's attainment lies between its certain successes
  (finished within every bound) and those plus its undecided requests (not finished, not yet past a bound:
  simulator.measure.early_stop.exceeded_so_far). When the strict (99.99%) interval's high end (`strict_high_end`) is below the
  target at every vertex of that box, every completion of the run fails strictly (the high end, mean + t s /
  sqrt(n), is convex in the batch means, so its largest value on the box is at a vertex): the rate is settled as
  the full run would settle it. The run then reports the most favourable vertex as its batches (judge gives a
  strict fail on them), `window_final: false`, and no overload flag (its departures are not final).
Clearly passing is not stopped early: a pass needs the low end above the target at the worst completion, and a
request not yet finished counts as a miss there, so a pass is decided only when nearly every window request has
finished, which the first rule reaches a moment later with exact figures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from experiments.plan.search import BATCHES, judge, strict_high_end
from simulator.measure.early_stop import Progress, exceeded_so_far, progress_columns
from simulator.measure.metrics import goodput_mask, round_sig
from simulator.measure.steady_state import MIN_WINDOW_REQUESTS, is_overloaded, steady_window

CHECK_EVERY = 1 / 40  # of the window's requests: finishes between two checks
MARGIN = 1e-6  # a strict fail is stopped on only when the best completion's high end is this far below the target
# (the batch means are rounded to 7 digits in a point's record)
MAX_VERTEX_BATCHES = 12  # more batches than this: no strict-fail stop (2**B vertices)
LEVELS = ("pooled", "settling", "curve")  # pooled: window complete only; curve: + overloaded; settling: all three
EARLY_STOP_RULE = ("runs stop once the verdict is decided: after the window's end when every window request has "
                   "finished (all runs; exact figures), or when the window's backlog says overloaded (a rate's first "
                   "seed and curve runs), or, for a rate's first seed, when every completion of the window fails the "
                   "strict (99.99%) interval (the most favourable completion is recorded; overload not measured)")


@dataclass
class PlanStop:
    """`decide(progress)` of one plan run: the window (from the known open-loop arrivals), its batches, the SLO and
    the target; `level` says which rules apply (LEVELS)."""

    arrival: np.ndarray
    slo: Mapping[str, float | None]
    target: float
    level: str
    rate: float
    window: tuple[float, float] | None = None
    chunks: list[np.ndarray] = field(default_factory=list)
    decision: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"plan early stop: level {self.level!r} is not one of {LEVELS}")
        a = np.asarray(self.arrival, dtype=float)
        w = steady_window(a, a)
        if w is not None:
            inside = np.flatnonzero((a >= w[0]) & (a <= w[1]))
            if inside.size >= MIN_WINDOW_REQUESTS:  # same order and split as evaluate_plan_point's batch means
                self.window = w
                order = inside[np.argsort(a[inside], kind="stable")]
                self.chunks = np.array_split(order, min(BATCHES, order.size))

    @property
    def window_requests(self) -> int:
        return int(sum(c.size for c in self.chunks))

    def check_from(self) -> int:
        """Finishes before the first check: those arriving before the window (no rule fires earlier)."""
        if self.window is None:
            return len(self.arrival) + 1  # never
        return int(np.sum(np.asarray(self.arrival) < self.window[0])) + self.window_requests // 2

    def every(self) -> int:
        return max(1, int(self.window_requests * CHECK_EVERY))

    def __call__(self, p: Progress) -> str | None:
        if self.window is None:
            return None
        lo, hi = self.window
        idx = np.concatenate(self.chunks)
        fin = np.isfinite(p.finish)
        if p.now > hi:  # every finish at or before the window's end is in the snapshot: departures are final
            if self.level != "pooled":
                departures = int(np.sum(fin & (p.finish >= lo) & (p.finish <= hi)))
                if is_overloaded(idx.size, departures):  # judge's overload test on the final window counts
                    self.decision = {"rule": "overloaded", "at_s": p.now}
                    return "overloaded"
            if fin[idx].all():
                self.decision = {"rule": "window complete", "at_s": p.now}
                return "window complete"
        if self.level == "settling" and len(self.chunks) >= 2 and len(self.chunks) <= MAX_VERTEX_BATCHES:
            return self._strict_fail(p)
        return None

    def _strict_fail(self, p: Progress) -> str | None:
        good = goodput_mask(progress_columns(p), self.slo)
        bad = exceeded_so_far(p, self.slo) | (np.isfinite(p.finish) & ~good)
        low = np.array([good[c].sum() / c.size for c in self.chunks])
        high = np.array([1.0 - bad[c].sum() / c.size for c in self.chunks])
        b = len(self.chunks)
        corner = ((np.arange(2 ** b)[:, None] >> np.arange(b)) & 1).astype(bool)
        vertices = np.where(corner, high, low)
        ends = strict_high_end(vertices)
        best = int(np.argmax(ends))
        if not ends[best] < self.target - MARGIN:
            return None
        batches = [round_sig(float(x)) for x in vertices[best]]
        seed = {"window_arrivals": self.window_requests, "window_departures": 0, "window_length_s": 1.0,
                "attainment_batches": batches, "window_final": False}
        v = judge(self.rate, [seed], self.target)  # the verdict rule itself, on the most favourable completion
        if not (v.strict_fail and v.decided and not v.passed):
            return None
        self.decision = {"rule": "strict fail", "at_s": p.now, "attainment_batches": batches,
                         "undecided": int(round(float(np.sum((high - low) * [c.size for c in self.chunks]))))}
        return "strict fail"
