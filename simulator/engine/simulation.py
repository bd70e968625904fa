"""SimPy engine entry point: `ServerSimulation` runs one `Server` (simulator/engine/server.py) of a `Scenario`
over `SimInputs` in its own Environment and returns its `SimResult`. simulator/scenario.py builds both.

Layout of the engine (one job per module; docs/architecture.md):
- simulator/server_config.py: the validated config blocks and the resolved `Scenario`; simulator/seeds.py: seeds
- workload_arrays.py / acceptance_table.py: the `SimInputs` (request arrays, flattened acceptance)
- arrivals.py: open-loop pointer, closed-loop heap, pushed arrivals (a router)
- request_state.py: per-request numpy arrays and queues
- rules/: the step rules (admission, token budget, paged KV, preemption, prefill chunks, emission, finish, pricing,
  PSD sides, trees, sampled verification), plain Python over arrays
- compiled_kernel.py / compiled_psd_kernel.py: the step loops over those rules (numba); kernel_records.py
- compiled_run.py / compiled_replica.py: a server's run in kernel calls, and a cluster replica's
- scheduler.py: the scheduler variants and a server's settings; drafting.py: the policy's checks and a Python
  policy's choices; pricing.py: profile and draft costs; records.py: table schemas and the step log
- server.py: the SimPy process tying them together
"""
from __future__ import annotations

from typing import Callable

import simpy

from simulator.engine.server import Server, SimResult
from simulator.server_config import Scenario
from simulator.engine.workload_arrays import SimInputs

__all__ = ["ServerSimulation", "SimResult", "Server"]


class ServerSimulation:
    """One simulated server in a fresh Environment."""

    def __init__(self, scenario: Scenario, inputs: SimInputs, *, live: bool = False,
                 on_step: Callable[[int], None] | None = None):
        self.env = simpy.Environment()
        self.server = Server(self.env, scenario, inputs, live=live, on_step=on_step)

    def simulate(self) -> SimResult:
        self.env.run()
        return self.server.result()

    def requests_table(self):
        """The server's requests table as it stands (a ClusterSimulation has the same method)."""
        return self.server.requests_table()
