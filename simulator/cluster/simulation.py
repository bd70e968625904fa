"""N replicas of a server in one SimPy Environment behind a router (simulator/cluster/router.py).

Arrivals come from one cluster-wide source: open loop, or a closed loop whose clients send their next
request `think_time` after their last one finishes on whichever replica served it. A request is routed
when simulated time reaches its arrival (by the router process, or by the first replica that pulls at or
after that instant), from the replicas' live state, and from then on it waits in that replica's queue.
Each replica is a full `Server`: its own scheduler, KV pool, drafter placement and seeded policy.

One replica through this path reproduces the single-server engine exactly: an idle replica sleeps until
the cluster's next arrival with the same arithmetic as a single server, and takes what has arrived by then.
Where every replica takes the compiled kernel, the compiled cluster loop (simulator/cluster/compiled_cluster.py)
replays these processes' events, in SimPy's order, in one call instead (`cluster_path_reason` says why not).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import simpy

from simulator.engine.arrivals import ClosedLoopArrivals, arrivals_for
from simulator.cluster.compiled_cluster import CompiledCluster, cluster_ineligible_reason
from simulator.cluster.config import RouterSpec
from simulator.measure.metrics import summarize
from simulator.cluster.router import Router, RouterState, affinity_keys, new_router_state, replica_kv_load
from simulator.engine.server import Server, SimResult
from simulator.engine.workload_arrays import EngineWorkload, SimInputs


class ReplicaArrivals:
    """A replica's arrival source: the requests the router assigned to it, in routing order.

    A push hands the request to the replica's kernel records at once (CompiledReplica.take), so the router's next
    read of the replica counts it. An idle replica sleeps until the cluster's next arrival (whichever replica it goes
    to), or, when none is known yet (a closed loop whose clients are all busy), until a push. Arrivals reach the
    cluster in time order (open loop: sorted; closed loop: finish time + a constant think time), so a replica sleeping
    until the next arrival never misses an earlier one.
    """

    routed = True  # a router's pushes: the server may take the compiled path (simulator/engine/compiled_replica.py)

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.cluster: "ClusterSimulation | None" = None  # set by the cluster that receives the server
        self.replica = -1
        self.engine = None  # the replica's CompiledReplica
        self.arrival: np.ndarray | None = None
        self._event: simpy.Event | None = None

    def bind(self, cluster: "ClusterSimulation", replica: int, engine) -> None:
        """The cluster routing to this source, the replica's index in it and its CompiledReplica."""
        self.cluster, self.replica, self.engine = cluster, replica, engine

    def attach(self, arrival: np.ndarray) -> None:
        """The replica's arrival-time array, filled as requests are routed to it."""
        self.arrival = arrival
        self.arrival[:] = np.nan

    def push(self, i: int, t: float) -> None:
        """The router gives request `i` (arrived at `t`) to this replica."""
        self.arrival[i] = t
        self.engine.take((i,))
        if self._event is not None and not self._event.triggered:
            self._event.succeed()

    def pull(self, now: float) -> tuple[int, ...]:
        """Route everything due by `now` (the pushes hand this replica its own): nothing is left to pull."""
        self._event = None
        self.cluster.route_due(now)
        return ()

    def next_time(self) -> float | None:
        return self.cluster.source.next_time()

    def quiet_until(self, now: float) -> float:
        """Before this time nothing outside the replica reads it or routes to it (ClusterSimulation.quiet_until)."""
        return self.cluster.quiet_until(now)

    @property
    def submits_on_finish(self) -> bool:
        """Whether a finish submits a request (a closed loop's clients, in finish order), so each finish must be told
        at its own step's end."""
        return self.cluster.closed_loop

    def on_finish(self, i: int, t: float) -> None:
        self.cluster.on_finish(i, t)

    def wakeup(self) -> simpy.Event:
        """An event the next push fires."""
        self._event = self.env.event()
        return self._event


class Replica:
    """One server of the cluster and the load a router may read from it (simulator.cluster.router.ReplicaLoad)."""

    def __init__(self, server: Server, arrivals: ReplicaArrivals, routing: RouterState, index: int):
        self.server, self.arrivals = server, arrivals
        self.routing, self.index = routing, index

    @property
    def max_num_seqs(self) -> int:
        return self.server.max_num_seqs

    @property
    def routed(self) -> int:
        """Requests routed to it so far."""
        return int(self.routing.routed_to[self.index])

    def outstanding(self) -> int:
        return self.routed - self.server.state.n_finished

    def kv_load(self) -> float:
        """router.replica_kv_load over its kernel records (KV in use as shown: a step in flight holds its plan's)."""
        c, pool = self.server.compiled, self.server.sched.pool
        rs = c.rs
        return replica_kv_load(pool.used, c.cum, int(rs.submitted), int(rs.admit), c.req.requeued, int(rs.requeued),
                               pool.total_blocks)


@dataclass
class ClusterResult(SimResult):
    """The cluster's tables (with a `replica` column) and each replica's own result (its routed requests only)."""

    replica_results: list[SimResult] = field(default_factory=list)

    def replica_summaries(self, slo: Mapping[str, float | None] | None) -> list[dict[str, Any]]:
        """simulator.measure.metrics.summarize of every replica on its own (its GPUs, its KV pool, its requests)."""
        out = []
        for j, r in enumerate(self.replica_results):
            s = summarize(r.requests, r.steps, r.itl, slo=slo, num_target_gpus=r.extras["num_target_gpus"],
                          num_draft_gpus=r.extras["num_draft_gpus"], extras=r.extras)
            out.append({"replica": j, **s})
        return out


class ClusterSimulation:
    """Servers sharing one Environment behind a router; each server pulls from a `ReplicaArrivals` the cluster feeds.

    Build the servers in `env` with `arrivals=ReplicaArrivals(env)` (simulator.scenario.simulation does), then hand
    them here in replica order."""

    def __init__(self, env: simpy.Environment, servers: Sequence[Server], router: RouterSpec, inputs: SimInputs,
                 on_step: Callable[[int], None] | None = None):
        if not servers:
            raise ValueError("cluster: needs at least one replica")
        workload = inputs.workload
        check_router_workload(router, workload)
        self.env = env
        self.wl, self.table, self.spec = workload, inputs.table, router
        self.arrival = workload.arrival.astype(np.float64).copy()
        self.source = arrivals_for(workload, self.arrival)
        self.closed_loop = isinstance(self.source, ClosedLoopArrivals)
        if router.name == "affinity":
            client_of = self.source.client_of if self.closed_loop else np.full(len(workload), -1, dtype=np.int64)
            key_id, keys = affinity_keys(router.affinity_key, workload.categories,
                                         [self.table.trace_ids[int(t)] for t in workload.trace_index], client_of,
                                         workload.closed_loop_clients)
        else:
            key_id, keys = np.zeros(len(workload), dtype=np.int64), 1
        self.assigned = np.full(len(workload), -1, dtype=np.int64)
        self.routing = new_router_state(len(servers), keys, self.assigned)
        self.router = Router(router, self.routing, key_id)
        self.replicas: list[Replica] = []
        for j, srv in enumerate(servers):
            if srv.env is not env or not isinstance(srv.arrivals, ReplicaArrivals) or srv.wl is not workload:
                raise ValueError(f"cluster replica {j}: a server must live in the cluster's Environment, pull from a "
                                 "ReplicaArrivals and serve the cluster's workload")
            srv.arrivals.bind(self, j, srv.compiled)
            if on_step is not None:
                srv.on_step = lambda _: on_step(self.n_finished)
            self.replicas.append(Replica(srv, srv.arrivals, self.routing, j))
        self._wake: simpy.Event | None = None
        # the compiled cluster loop (simulator/cluster/compiled_cluster.py) routes and steps every replica in one
        # call where it can (None); else the router process below and each replica's own process
        self.cluster_path_reason = cluster_ineligible_reason(self, on_step)
        self.compiled = None if self.cluster_path_reason is not None else CompiledCluster(self, on_step)
        self.env.process(self._router_loop() if self.compiled is None else self.compiled.drive())

    @property
    def n_routed(self) -> int:
        return self.router.routed

    @property
    def n_finished(self) -> int:
        return sum(r.server.state.n_finished for r in self.replicas)

    def route_due(self, now: float) -> None:
        """Route every request that has arrived by `now` and is not routed yet, in arrival order."""
        for i in self.source.pull(now):
            j = self.router.route(int(i), self.replicas)
            self.replicas[j].arrivals.push(int(i), float(self.arrival[i]))

    def quiet_until(self, now: float) -> float:
        """The earliest time from `now` at which a request may be routed (the router reads every replica then): the
        next arrival not yet routed; in a closed loop also `now + think_time`, the earliest arrival a finish from `now`
        on can submit. Before it nothing outside a replica reads it (a step hook aside: see
        compiled_replica.CompiledReplica.loop), so a replica may run its steps starting before it in one kernel call."""
        nxt = self.source.next_time()
        t = math.inf if nxt is None else float(nxt)
        if self.closed_loop:
            t = min(t, now + self.source.think_time)
        return t

    def on_finish(self, i: int, t: float) -> None:
        """A replica finished request `i`: a closed loop's client submits its next one and the router re-plans
        (an open loop's arrivals are all known, so nothing changes)."""
        if not self.closed_loop:
            return
        self.source.on_finish(i, t)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _router_loop(self):
        """Route requests at their arrival time, even while every replica is busy in a step."""
        env, n = self.env, len(self.wl)
        while True:
            self.route_due(env.now)
            if self.n_routed == n:
                return
            self._wake = env.event()
            nxt = self.source.next_time()
            yield self._wake if nxt is None else env.timeout(max(0.0, nxt - env.now)) | self._wake

    def simulate(self) -> ClusterResult:
        self.env.run()
        missing = int(len(self.wl) - self.n_finished)
        if missing or self.n_routed != len(self.wl):
            raise RuntimeError(f"cluster stalled at t={self.env.now:.6f}s: {self.n_routed} of {len(self.wl)} "
                               f"requests routed, {missing} unfinished")
        return self.result()

    def result(self) -> ClusterResult:
        per, routed, step_frames, itls = [], [], [], []
        for j, rep in enumerate(self.replicas):
            res = rep.server.result()
            mine = self._routed(j, res.requests)
            routed.append(mine)
            step_frames.append(res.steps.assign(replica=np.int64(j)))
            itls.append(res.itl)
            extras = {**res.extras, "routed_requests": int(len(mine))}
            per.append(SimResult(mine.reset_index(drop=True), res.steps, res.itl, extras))
        steps = pd.concat(step_frames, ignore_index=True)
        return ClusterResult(self._joined(routed), steps, np.concatenate(itls), self._extras(per), per)

    def requests_table(self) -> pd.DataFrame:
        """The cluster's requests table as it stands (what `result()` returns as `requests`), without the steps."""
        return self._joined([self._routed(j, rep.server.requests_table()) for j, rep in enumerate(self.replicas)])

    def _routed(self, j: int, requests: pd.DataFrame) -> pd.DataFrame:
        """Replica j's rows of its server's requests table: the requests routed to it (the cluster's order)."""
        return requests.iloc[np.flatnonzero(self.assigned == j)]

    @staticmethod
    def _joined(routed: list[pd.DataFrame]) -> pd.DataFrame:
        """The replicas' routed rows as one table in request order, with their `replica` column."""
        frames = [mine.assign(replica=np.int64(j)) for j, mine in enumerate(routed)]
        return pd.concat(frames).sort_index(kind="stable").reset_index(drop=True)

    def _extras(self, per: list[SimResult]) -> dict[str, Any]:
        """Cluster totals of the replicas' extras (KV blocks and peaks summed, drafter usage summed)."""
        ex = [r.extras for r in per]
        usage: dict[str, int] = {}
        for e in ex:
            for d, c in e["drafter_usage"].items():
                usage[d] = usage.get(d, 0) + int(c)
        sizes = sorted({int(e["block_size"]) for e in ex})
        out: dict[str, Any] = {
            "kv_total_blocks": sum(int(e["kv_total_blocks"]) for e in ex),
            "kv_peak_blocks": sum(int(e["kv_peak_blocks"]) for e in ex),  # sum of each replica's own peak
            "block_size": sizes[0] if len(sizes) == 1 else sizes,
            "steps": sum(int(e["steps"]) for e in ex),
            "request_steps": sum(int(e["request_steps"]) for e in ex),
            "drafter_usage": usage,
            "psd_fallback_steps": sum(int(e["psd_fallback_steps"]) for e in ex),
            "max_num_seqs": sum(int(e["max_num_seqs"]) for e in ex),
            "replicas": len(per),
            "router": self.spec.model_dump(exclude_none=True),
            "routed_requests": [int(e["routed_requests"]) for e in ex],
            "num_target_gpus": sum(int(e["num_target_gpus"]) for e in ex),
            "num_draft_gpus": sum(int(e["num_draft_gpus"]) for e in ex),
        }
        if self.spec.name == "affinity":
            out["affinity_overflows"] = self.router.overflows
        return out


def check_router_workload(router: RouterSpec, workload: EngineWorkload) -> None:
    """Refuse a router setting the workload cannot support (a client key without clients)."""
    if router.name == "affinity" and router.affinity_key == "client" and workload.closed_loop_clients == 0:
        raise ValueError("cluster.router.key: 'client' needs a closed-loop workload (workload.arrival.kind: "
                         "closed_loop); an open loop has no clients, use key: category or trace")
