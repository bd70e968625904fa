"""Where a server's requests come from: a time-ordered source it pulls from at each step.

- `OpenLoopArrivals`: all arrival times known up front (sorted); a pointer walks them.
- `ClosedLoopArrivals`: N clients; a client's next request arrives `think_time` after its last finishes.
- `PushedArrivals`: requests pushed by someone else in the same SimPy Environment (a router); the
  server waits on `wakeup()` when it has nothing to do.
All three write the arrival time into the server's `arrival` array and keep SimPy events per step.
"""
from __future__ import annotations

import heapq

import numpy as np
import simpy


class OpenLoopArrivals:
    """Arrival times known in advance (non-decreasing)."""

    def __init__(self, arrival: np.ndarray):
        self.arrival = arrival
        self._ptr = 0

    def pull(self, now: float) -> range:
        """Requests that have arrived by `now` and were not pulled before."""
        arr, p = self.arrival, self._ptr
        n = len(arr)
        q = p
        while q < n and arr[q] <= now:
            q += 1
        self._ptr = q
        return range(p, q)

    def next_time(self) -> float | None:
        return float(self.arrival[self._ptr]) if self._ptr < len(self.arrival) else None

    @property
    def pulled(self) -> int:
        """How many arrivals were pulled so far (they are pulled in order)."""
        return self._ptr

    def resume(self, pulled: int) -> None:
        """Continue after a compiled run that pulled the first `pulled` arrivals."""
        self._ptr = int(pulled)

    def on_finish(self, i: int, t: float) -> None:
        pass

    def wakeup(self):
        return None


class ClosedLoopArrivals:
    """N clients, each sends its next request when its previous one finishes (after think time)."""

    def __init__(self, arrival: np.ndarray, clients: int, think_time: float):
        self.arrival = arrival
        self.arrival[:] = np.nan
        self.think_time = think_time
        self.client_of = np.full(len(arrival), -1, dtype=np.int64)
        self._heap: list[tuple[float, int]] = []
        self._next = 0
        for c in range(min(clients, len(arrival))):
            self._submit(0.0, c)

    def _submit(self, t: float, client: int) -> None:
        i = self._next
        if i >= len(self.arrival):
            return
        self._next += 1
        self.client_of[i] = client
        self.arrival[i] = t
        heapq.heappush(self._heap, (t, i))

    @property
    def submitted(self) -> int:
        """How many requests the clients have sent so far (numbered in order)."""
        return self._next

    def resume(self, submitted: int, pulled: int) -> None:
        """Continue after a compiled run: `submitted` requests sent (times in `arrival`, clients in `client_of`), the
        first `pulled` of them taken; the rest are pending."""
        self._next = int(submitted)
        self._heap = [(float(self.arrival[i]), i) for i in range(int(pulled), self._next)]
        heapq.heapify(self._heap)

    def pull(self, now: float) -> list[int]:
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[1])
        return out

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def on_finish(self, i: int, t: float) -> None:
        self._submit(t + self.think_time, int(self.client_of[i]))

    def wakeup(self):
        return None


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
