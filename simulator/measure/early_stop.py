"""Stopping a simulation once what its caller asks of it is decided: a monitor on the server's step hook.

The caller gives a `decide(progress)` function; the monitor calls it every `every` finished requests (from the
`check_from` finish on) with a `Progress` snapshot, and when it answers a reason the run ends there
(`env.run(until=monitor.stop)`). The snapshot is complete up to `now`: the step hook runs after a step is applied, so
every first token and finish at or before `now` is in it (a cluster replica's step still in flight ends at or after
`now`), and whatever is missing happens at or after `now`. A server's run (simulator/engine/compiled_run.py) asks the
monitor itself, the monitor being the server's hook (`Server._compiled_checks`: it reads `next_check`): its kernel
stops after the step that reaches each check's count, and `now` is the kernel's clock (`Server.clock`), the end of
that step. `exceeded_so_far` turns that into SLO misses already certain for requests still
running. What the decision means is the caller's (experiments/plan/early_stop.py); nothing here knows a verdict.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd
import simpy

__all__ = ["Progress", "StopMonitor", "exceeded_so_far", "progress_of", "run_until_decided", "progress_columns", "progress_frame"]


@dataclass(frozen=True)
class Progress:
    """Per-request times of a run at `now` (NaN: not yet), complete up to `now`."""

    now: float
    finished: int
    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    output_len: np.ndarray


def progress_of(sim: Any) -> Progress:
    """The snapshot of a `ServerSimulation` or a `ClusterSimulation` (each request from the replica it was routed
    to; unrouted requests: no times yet); a single server's time is its `clock` (the kernel's during a compiled
    run)."""
    if hasattr(sim, "server"):
        st, wl = sim.server.state, sim.server.wl
        return Progress(float(sim.server.clock), int(st.n_finished), st.arrival.copy(), st.first_token.copy(),
                        st.finish.copy(), wl.output_len)
    first, fin = np.full(len(sim.wl), np.nan), np.full(len(sim.wl), np.nan)
    for j, rep in enumerate(sim.replicas):  # (copyto with a mask: a check runs this every few finishes)
        mine = sim.assigned == j
        np.copyto(first, rep.server.state.first_token, where=mine)
        np.copyto(fin, rep.server.state.finish, where=mine)
    now = float(sim.env.now)
    np.copyto(first, np.nan, where=first > now)  # a compiled replica shows a run's steps at its call: not yet
    np.copyto(fin, np.nan, where=fin > now)
    return Progress(now, int(sim.n_finished), sim.arrival.copy(), first, fin, sim.wl.output_len)


def exceeded_so_far(p: Progress, slo: Mapping[str, float | None]) -> np.ndarray:
    """Boolean per request: not finished, yet already past an SLO bound whatever happens next (its first token or
    finish comes at or after `now`, so TTFT >= now - arrival, E2E >= now - arrival, TPOT >= (now - first token) /
    (output_len - 1)); the same bounds as simulator.measure.metrics.goodput_mask (TPOT of a one-token output: none)."""
    now, a = p.now, p.arrival
    running = ~np.isfinite(p.finish) & (a <= now)
    bad = np.zeros(a.shape, dtype=bool)
    ttft, tpot, e2e = slo.get("ttft_s"), slo.get("tpot_s"), slo.get("e2e_s")
    if ttft is not None:
        lower = np.where(np.isnan(p.first_token), now - a, p.first_token - a)
        bad |= lower > ttft
    if e2e is not None:
        bad |= (now - a) > e2e
    if tpot is not None:
        out = np.asarray(p.output_len)
        many = (out > 1) & np.isfinite(p.first_token)
        with np.errstate(invalid="ignore"):
            lower = (now - p.first_token) / np.maximum(out - 1, 1)
        bad |= many & (lower > tpot)
    return running & bad


def progress_columns(p: Progress) -> dict[str, np.ndarray]:
    """The request columns simulator.measure.metrics reads (arrival, finish, ttft, tpot, e2e, output_len) of a snapshot,
    as simulator/engine/server.py writes them (NaN where not yet); a plain dict: a stop rule asks for it at every check."""
    out = np.asarray(p.output_len)
    with np.errstate(invalid="ignore"):
        tpot = np.where(out > 1, (p.finish - p.first_token) / np.maximum(out - 1, 1), np.nan)
    return {"arrival_time": p.arrival, "output_len": out.astype(np.int64), "first_token_time": p.first_token,
            "finish_time": p.finish, "ttft": p.first_token - p.arrival, "tpot": tpot, "e2e": p.finish - p.arrival}


def progress_frame(p: Progress) -> pd.DataFrame:
    """`progress_columns` as a requests table."""
    return pd.DataFrame(progress_columns(p))


class StopMonitor:
    """The step hook that asks `decide` every `every` finishes (from `check_from` on) and ends the run on an answer.

    Give it to the simulation as `on_step=monitor` (then `bind(sim)` before running) so a compiled run asks it at
    its own check counts (`next_check`); `StopMonitor(env, sim, ...)` with `on_step=monitor.on_step` also works,
    and then a compiled run tells it only at the end."""

    def __init__(self, env: simpy.Environment | None, sim: Any, total: int, decide: Callable[[Progress], str | None],
                 every: int, check_from: int = 0):
        self.total, self.decide = int(total), decide
        self.every = max(1, int(every))
        self.next_check = max(1, int(check_from))
        self.reason: str | None = None
        self.progress: Progress | None = None
        self.checks = 0
        self.env = self.sim = self.stop = None
        if sim is not None:
            self.bind(sim, env)

    def bind(self, sim: Any, env: simpy.Environment | None = None) -> "StopMonitor":
        """The simulation this monitor watches (and whose Environment its `stop` event lives in)."""
        self.sim, self.env = sim, env if env is not None else sim.env
        self.stop = self.env.event()
        return self

    def __call__(self, finished: int) -> bool:
        """The step hook: True once the run is to end (decided, or complete)."""
        self.on_step(finished)
        return self.stop.triggered

    def on_step(self, finished: int) -> None:
        if self.stop.triggered:
            return
        if finished >= self.total:
            self.stop.succeed(None)  # the run is complete: nothing to stop
            return
        if finished < self.next_check:
            return
        self.next_check = finished + self.every
        self.checks += 1
        p = progress_of(self.sim)
        why = self.decide(p)
        if why is not None:
            self.reason, self.progress = why, p
            self.stop.succeed(why)


def run_until_decided(sim: Any, monitor: StopMonitor) -> Progress | None:
    """Run `sim` (built with `on_step=monitor.on_step`) until the monitor stops it (its snapshot) or it completes
    (None: read `sim`'s result as usual)."""
    try:
        sim.env.run(until=monitor.stop)
    except RuntimeError as e:  # the schedule emptied without the stop firing: complete (or a real stall)
        if "until" not in str(e):
            raise
    if monitor.reason is None:
        if progress_of(sim).finished < monitor.total:
            raise RuntimeError(f"simulation stalled at t={sim.env.now:.6f}s before every request finished")
        return None
    return monitor.progress
