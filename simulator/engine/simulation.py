"""SimPy engine entry point: `ServerSimulation` runs one `Server` (simulator/engine/server.py) of a `Scenario`
over `SimInputs` in its own Environment and returns its `SimResult`. simulator/scenario.py builds both.

Layout of the engine (one job per module):
- server_config.py: the validated config blocks and the resolved `Scenario`; seeds.py: the seed tree
- workload_arrays.py / acceptance_table.py: the `SimInputs` (request arrays, flattened acceptance)
- arrivals.py: open-loop pointer, closed-loop heap, pushed arrivals (a router)
- request_state.py: per-request numpy arrays and queues
- scheduler.py: admission, token budget, paged KV (kv_pool.py), preemption by recompute, prefill modes
- drafting.py: policy dispatch and acceptance replay (traces/acceptance.py)
- pricing.py: target and drafter costs for the batch a step actually has, with duration guards
- step_sd.py / step_psd.py: step executors (AR/SD, two-batch PSD); step.py: the planned step
- step_outcome.py: applying a step (tokens, feedback, records, finishes); records.py: table schemas
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
