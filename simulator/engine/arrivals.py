"""Where a server's requests come from: a time-ordered source it pulls from at each step.

- `OpenLoopArrivals`: all arrival times known up front (sorted); a pointer walks them.
- `ClosedLoopArrivals`: N clients; a client's next request arrives `think_time` after its last finishes (in time
  order, so a pointer walks them too).
- `PushedArrivals`: requests pushed by someone else in the same SimPy Environment (a router); the
  server waits on `wakeup()` when it has nothing to do.
All three write the arrival time into the server's `arrival` array and keep SimPy events per step.
"""
from __future__ import annotations

import numpy as np
import simpy

from simulator.engine.rules.arrivals import pull_due, submit_next


class OpenLoopArrivals:
    """Arrival times known in advance (non-decreasing): a pointer walks them (rules/arrivals.py)."""

    def __init__(self, arrival: np.ndarray):
        self.arrival = arrival
        self.submitted = len(arrival)  # the arrivals known
        self._ptr = 0

    def pull(self, now: float) -> range:
        """Requests that have arrived by `now` and were not pulled before."""
        p = self._ptr
        self._ptr = pull_due(self.arrival, p, self.submitted, now)
        return range(p, self._ptr)

    def next_time(self) -> float | None:
        return float(self.arrival[self._ptr]) if self._ptr < self.submitted else None

    @property
    def pulled(self) -> int:
        """How many arrivals were pulled so far (they are pulled in order)."""
        return self._ptr

    def resume(self, pulled: int, submitted: int) -> None:
        """Continue after a compiled run that pulled the first `pulled` arrivals, `submitted` of them known."""
        self._ptr, self.submitted = int(pulled), int(submitted)

    def on_finish(self, i: int, t: float) -> None:
        pass

    def wakeup(self):
        return None


class ClosedLoopArrivals(OpenLoopArrivals):
    """N clients, each sends its next request when its previous one finishes (after think time). Requests are
    numbered in the order the clients send them, and finishes come in time order, so their times are in order too."""

    def __init__(self, arrival: np.ndarray, clients: int, think_time: float):
        super().__init__(arrival)
        self.arrival[:] = np.nan
        self.think_time = think_time
        self.client_of = np.full(len(arrival), -1, dtype=np.int64)
        self.submitted = 0
        for c in range(min(clients, len(arrival))):
            self.submitted = submit_next(self.arrival, self.client_of, self.submitted, 0.0, c)

    def on_finish(self, i: int, t: float) -> None:
        self.submitted = submit_next(self.arrival, self.client_of, self.submitted, t + self.think_time,
                                     int(self.client_of[i]))


class PushedArrivals:
    """Requests handed to the server at run time (`push`), e.g. by a router sharing the Environment.

    Nothing tells when the next push comes, so a compiled server (simulator/engine/compiled_replica.py) takes one step
    per kernel call (`quiet_until`) and reads its pushes between steps."""

    routed = True  # pushed at run time: the compiled replica's path (compiled_run.for_server)
    submits_on_finish = False  # a finish submits nothing here

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.arrival: np.ndarray | None = None
        self._queue: list[int] = []
        self._event: simpy.Event | None = None

    def attach(self, arrival: np.ndarray) -> None:
        """The server's arrival-time array (filled as requests are pushed)."""
        self.arrival = arrival
        self.arrival[:] = np.nan

    def push(self, i: int) -> None:
        """Request `i` (index into the server's workload) arrives now."""
        self.arrival[i] = self.env.now
        self._queue.append(i)
        if self._event is not None and not self._event.triggered:
            self._event.succeed()

    def pull(self, now: float) -> list[int]:
        out, self._queue = self._queue, []
        return out

    def next_time(self) -> float | None:
        return None

    def quiet_until(self, now: float) -> float:
        """A push may come at any time: a kernel call takes the one step starting `now`."""
        return now

    def on_finish(self, i: int, t: float) -> None:
        pass

    def wakeup(self) -> simpy.Event:
        """An event that fires at the next push."""
        self._event = self.env.event()
        return self._event


def arrivals_for(wl, arrival: np.ndarray):
    """The source a workload describes: closed loop when it has clients, else open loop."""
    if wl.closed_loop_clients > 0:
        return ClosedLoopArrivals(arrival, wl.closed_loop_clients, wl.think_time)
    return OpenLoopArrivals(arrival)
