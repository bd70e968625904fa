"""Scenario builder: validated config objects -> ready simulations. The one place that wires the engine.

`prepare_runs` builds and validates every run's server, drafter costs and policy (seeded from the
run's seed) before anything simulates, so a bad policy in the last run fails before the first starts.
`Scenario.simulation(...)` then gives a `ServerSimulation` (or a `Server` in a shared Environment); a run
with a cluster block becomes a `ClusterScenario` (one `Scenario` per replica) whose simulation is a
`ClusterSimulation` (simulator/cluster.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import simpy

from policies.base import Policy
from policies.registry import make_policy
from simulator.acceptance_table import AcceptanceTable
from simulator.cluster import ClusterSimulation
from simulator.cluster_config import ClusterSpec
from simulator.draft_cost import DraftCost
from simulator.engine import ServerSimulation
from simulator.latency import LatencyProfile
from simulator.server import Server
from simulator.server_config import RunSpec, ServerConfig, build_draft_costs
from simulator.workload_arrays import EngineWorkload


@dataclass
class Scenario:
    """One run, fully resolved: its server, target profile, drafter costs, policy, KV capacity and seed."""

    run: RunSpec
    server: ServerConfig
    target: LatencyProfile
    draft_costs: dict[str, DraftCost]
    policy: Policy | None
    seed: int
    kv_capacity_tokens: int  # 0: the deployment does not fit (see info)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.kv_capacity_tokens > 0

    @property
    def num_target_gpus(self) -> int:
        return self.server.num_target_gpus

    @property
    def num_draft_gpus(self) -> int:
        return self.server.num_draft_gpus if self.run.mode != "psd" else max(1, self.server.num_draft_gpus)

    def server_kwargs(self, workload: EngineWorkload, table: AcceptanceTable, traces: Sequence[Any] | None,
                      live: bool = False, on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
        s = self.server
        return dict(run=self.run, target=self.target, workload=workload, table=table, draft_costs=self.draft_costs,
                    policy=self.policy, kv_capacity_tokens=self.kv_capacity_tokens, max_num_seqs=s.max_num_seqs,
                    max_num_batched_tokens=s.max_num_batched_tokens, block_size=s.block_size,
                    step_overhead_s=s.step_overhead_s, chunked_prefill=s.chunked_prefill, prefill=s.prefill,
                    scheduler=s.scheduler,
                    verification=s.verification, seed=self.seed, traces=traces, live=live, on_step=on_step)

    def simulation(self, workload: EngineWorkload, table: AcceptanceTable, traces: Sequence[Any] | None = None,
                   live: bool = False, on_step: Callable[[int], None] | None = None) -> ServerSimulation:
        """A one-server simulation in its own Environment."""
        if not self.fits:
            raise ValueError(f"run {self.run.name!r}: {self.info.get('does_not_fit', 'deployment does not fit')}")
        return ServerSimulation(**self.server_kwargs(workload, table, traces, live, on_step))

    def server_in(self, env: simpy.Environment, workload: EngineWorkload, table: AcceptanceTable,
                  traces: Sequence[Any] | None = None, arrivals=None) -> Server:
        """A server process in a shared Environment (replicas behind a router)."""
        return Server(env, arrivals=arrivals, **self.server_kwargs(workload, table, traces))


@dataclass
class ClusterScenario:
    """One run on a cluster: a resolved `Scenario` per replica (own server, KV, policy and seed) and the router."""

    run: RunSpec
    cluster: ClusterSpec
    replicas: list[Scenario]
    seed: int

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.replicas)

    @property
    def info(self) -> dict[str, Any]:
        bad = [(j, r) for j, r in enumerate(self.replicas) if not r.fits]
        if bad:
            j, r = bad[0]
            return {"does_not_fit": f"replica {j}: {r.info.get('does_not_fit', 'deployment does not fit')}",
                    "replicas": self.cluster.num_replicas}
        return {"replicas": self.cluster.num_replicas}

    @property
    def num_target_gpus(self) -> int:
        return sum(r.num_target_gpus for r in self.replicas)

    @property
    def num_draft_gpus(self) -> int:
        return sum(r.num_draft_gpus for r in self.replicas)

    def simulation(self, workload: EngineWorkload, table: AcceptanceTable, traces: Sequence[Any] | None = None,
                   live: bool = False, on_step: Callable[[int], None] | None = None) -> ClusterSimulation:
        """All replicas in one Environment behind the router."""
        if live:
            raise ValueError(f"run {self.run.name!r}: a cluster cannot run live")
        if not self.fits:
            raise ValueError(f"run {self.run.name!r}: {self.info['does_not_fit']}")
        return ClusterSimulation(self.replicas, self.cluster.router, workload, table, traces, on_step=on_step)


def build_policy(run: RunSpec, seed: int, where: str | None = None) -> Policy | None:
    """The run's policy from its spec, seeded with the run's seed unless the spec gives its own."""
    if run.mode == "ar" or not run.policy:
        return None
    return make_policy(run.policy, where=where or f"runs[{run.name}].policy", seed=seed)


def server_for(server: ServerConfig, run: RunSpec) -> ServerConfig:
    """The experiment's server with the run's overrides applied, validated."""
    if not run.server:
        return server
    doc = server.model_dump()
    doc.update(run.server)
    try:
        return ServerConfig.model_validate(doc)
    except Exception as e:
        raise ValueError(f"runs[{run.name}].server: {e}") from None


def kv_capacity(server: ServerConfig, run: RunSpec) -> tuple[int, dict[str, Any]]:
    """KV tokens the server holds: given directly, or from the catalogs via the deployment (0: does not fit)."""
    if server.kv_capacity_tokens is not None:
        return server.kv_capacity_tokens, {}
    from simulator.placement import kv_capacity_tokens

    placement = kv_capacity_tokens(server.deployment, where=f"runs[{run.name}] server.deployment")
    if not placement.fits:
        return 0, {"does_not_fit": placement.message, "placement": placement.summary()}
    return int(placement.kv_capacity_tokens), {"placement": placement.summary()}


def run_seeds(seed: int, n: int) -> list[int]:
    """One independent seed per run, from the experiment's seed."""
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n)]


def make_scenario(run: RunSpec, server: ServerConfig, drafters: Mapping[str, Any], seed: int, *,
                  target: LatencyProfile | None = None) -> Scenario:
    """One run resolved: the run's server overrides, KV capacity, target profile (or the one given: a
    roofline or measured profile object), drafter costs (config mappings or DraftCost objects) and its policy."""
    costs = {name: c if isinstance(c, DraftCost) else build_draft_costs({name: c})[name] for name, c in drafters.items()}
    srv = server_for(server, run)
    cap, info = kv_capacity(srv, run)
    return Scenario(run, srv, target if target is not None else srv.target(), costs, build_policy(run, seed), seed,
                    cap, info)


def replica_seeds(seed: int, n: int) -> list[int]:
    """Replica 0 keeps the run's seed (one replica reproduces the single server); the others get seeds spawned
    from it."""
    return [seed] + [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n)[1:]]


def make_cluster_scenario(run: RunSpec, server: ServerConfig, drafters: Mapping[str, Any], seed: int,
                          cluster: ClusterSpec, *, target: LatencyProfile | None = None) -> ClusterScenario:
    """A run on a cluster: each replica is the run's server with that replica's overrides, resolved like a
    single run (KV capacity, profile, drafter costs) with its own policy seeded from `replica_seeds`."""
    replicas = []
    for j, (over, s) in enumerate(zip(cluster.overrides(), replica_seeds(seed, cluster.num_replicas))):
        rep_run = run.model_copy(update={"server": {**run.server, **over}}) if over else run
        try:
            replicas.append(make_scenario(rep_run, server, drafters, s,
                                          target=None if "target_profile" in over else target))
        except ValueError as e:
            raise ValueError(f"runs[{run.name}] cluster.replicas[{j}]: {e}") from None
    return ClusterScenario(run, cluster, replicas, seed)


def prepare_runs(server: ServerConfig, runs: Sequence[RunSpec], drafters: Mapping[str, Any], seed: int,
                 cluster: ClusterSpec | None = None) -> list[Scenario | ClusterScenario]:
    """Every run resolved and validated (server overrides, profiles, drafter costs, policies) before any simulates;
    run i gets the i-th seed spawned from `seed`. A run's cluster block, else `cluster`, makes it a cluster run."""
    out: list[Scenario | ClusterScenario] = []
    for run, s in zip(runs, run_seeds(seed, len(runs))):
        spec = run.cluster or cluster
        out.append(make_scenario(run, server, drafters, s) if spec is None
                   else make_cluster_scenario(run, server, drafters, s, spec))
    return out
