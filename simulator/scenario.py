"""Scenario builder: validated config + trace bundle -> ready simulations. The one place that wires the engine.

Every caller (run, sweep, plan, studies, live, validate) goes config -> scenario -> simulate -> summarize:

- `prepare_runs` resolves every run before anything simulates (server overrides, KV capacity, target profile,
  drafter costs, the policy object seeded from the run's node of the seed tree, simulator/seeds.py), so a bad
  policy in the last run fails before the first starts. A run with a cluster block becomes a `ClusterScenario`.
- `inputs_for` (a sampled `traces.workload.Workload`) and `inputs_from_traces` (traces replayed one request each,
  live runs and studies) build the `SimInputs`: the engine's workload arrays, acceptance table and traces.
- `simulation` builds the `Server` (or the replicas' `Server`s and the `ClusterSimulation` receiving them);
  `simulate` runs it, returning the info of a deployment that does not fit instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import simpy

from policies.base import Policy
from simulator.engine.acceptance_table import AcceptanceTable
from simulator.cluster.simulation import ClusterSimulation, ReplicaArrivals, check_router_workload
from simulator.cluster.config import ClusterSpec
from simulator.costs.draft_cost import DraftCost, DraftCostConfig, draft_cost_from_config
from simulator.engine.simulation import ServerSimulation
from simulator.seeds import ExperimentSeeds, ServerSeeds, as_seed_sequence, replica_seeds
from simulator.engine.server import Server, SimResult
from simulator.server_config import PSDConfig, RunSpec, Scenario, ServerConfig, server_for
from simulator.engine.workload_arrays import EngineWorkload, SimInputs
from traces.bundle import RequestTrace, TraceBundle
from traces.workload import Workload

__all__ = ["Scenario", "ClusterScenario", "SimInputs", "make_scenario", "make_cluster_scenario", "prepare_runs",
           "inputs_for", "inputs_from_traces", "drafter_kinds", "simulation", "simulate"]


@dataclass
class ClusterScenario:
    """One run on a cluster: a resolved `Scenario` per replica (own server, KV, policy and seeds) and the router."""

    name: str
    mode: str
    cluster: ClusterSpec
    replicas: list[Scenario]

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


# ---------------------------------------------------------------- runs


def build_policy(run: RunSpec, seed: int, where: str | None = None) -> Policy | None:
    """The run's policy object from its parsed PolicySpec, seeded with `seed` unless the spec gives its own."""
    if run.mode == "ar" or run.policy is None:
        return None
    return run.policy.instantiate(where or f"runs[{run.name}].policy", seed)


def kv_capacity(server: ServerConfig, run: RunSpec) -> tuple[int, dict[str, Any]]:
    """KV tokens the server holds: given directly, or from the catalogs via the deployment (0: does not fit)."""
    if server.kv_capacity_tokens is not None:
        return server.kv_capacity_tokens, {}
    placement = server.placement_deployment(run).placement(where=f"runs[{run.name}] server.deployment")
    if not placement.fits:
        return 0, {"does_not_fit": placement.message, "placement": placement.summary()}
    return int(placement.kv_capacity_tokens), {"placement": placement.summary()}


def make_scenario(run: RunSpec, server: ServerConfig, drafters: Mapping[str, DraftCostConfig | DraftCost | dict],
                  seed: int | np.random.SeedSequence | ServerSeeds) -> Scenario:
    """One run resolved: the run's server overrides, KV capacity, target profile (`server.target_profile`: a name,
    inline profile or profile object), drafter costs (validated `DraftCostConfig`s, mappings or DraftCost objects)
    and its policy, seeded from `seed` (an integer, or the run's node of the seed tree)."""
    costs = {name: c if isinstance(c, DraftCost) else draft_cost_from_config(c, where=f"drafters.{name}")
             for name, c in drafters.items()}
    seeds = seed if isinstance(seed, ServerSeeds) else ServerSeeds.of(seed)
    srv = server_for(server, run)
    cap, info = kv_capacity(srv, run)
    return Scenario(name=run.name, mode=run.mode, server=srv, target=srv.target(), draft_costs=costs,
                    policy=build_policy(run, seeds.policy), seeds=seeds, kv_capacity_tokens=cap,
                    psd=run.psd or PSDConfig(),
                    switch_cost_s=run.switch_cost_s, info=info)


def make_cluster_scenario(run: RunSpec, server: ServerConfig, drafters: Mapping[str, Any],
                          seed: int | np.random.SeedSequence, cluster: ClusterSpec) -> ClusterScenario:
    """A run on a cluster: replica j is the run's server with replica j's overrides, resolved like a single run,
    with its own streams (`seeds.replica_seeds`; replica 0 has the single server's, so one replica reproduces it)."""
    node = as_seed_sequence(seed)
    replicas = []
    for j, over in enumerate(cluster.overrides()):
        rep_run = run.model_copy(update={"server": {**run.server, **over}}) if over else run
        try:
            replicas.append(make_scenario(rep_run, server, drafters, replica_seeds(node, j)))
        except ValueError as e:
            raise ValueError(f"runs[{run.name}] cluster.replicas[{j}]: {e}") from None
    return ClusterScenario(run.name, run.mode, cluster, replicas)


def prepare_runs(server: ServerConfig, runs: Sequence[RunSpec], drafters: Mapping[str, Any], seed: int,
                 cluster: ClusterSpec | None = None) -> list[Scenario | ClusterScenario]:
    """Every run resolved and validated (server overrides, profiles, drafter costs, policies) before any simulates;
    run i gets node (RUNS, i) of the experiment's seed tree. A run's cluster block, else `cluster`, makes it a
    cluster run."""
    seeds = ExperimentSeeds.of(seed)
    out: list[Scenario | ClusterScenario] = []
    for i, run in enumerate(runs):
        spec = run.cluster or cluster
        node = seeds.run(i)
        out.append(make_scenario(run, server, drafters, replica_seeds(node, 0)) if spec is None
                   else make_cluster_scenario(run, server, drafters, node, spec))
    return out


# ---------------------------------------------------------------- inputs


def inputs_for(workload: Workload, bundle: TraceBundle, with_acceptance: bool = True) -> SimInputs:
    """The engine's inputs for a sampled workload over `bundle` (traces in the bundle's order)."""
    traces = bundle.requests
    index = {r.id: i for i, r in enumerate(traces)}
    missing = [t for t in workload.trace_ids if t not in index]
    if missing:
        raise ValueError(f"workload replays trace ids not in the bundle: {missing[:5]}")
    closed = workload.closed_loop
    n = len(workload)
    ew = EngineWorkload(
        request_ids=list(workload.request_ids),
        trace_index=np.array([index[t] for t in workload.trace_ids], dtype=np.int64).reshape(n),
        arrival=np.zeros(n) if workload.arrival is None else np.array(workload.arrival, dtype=np.float64),
        prompt_len=np.array(workload.prompt_len, dtype=np.int64),
        output_len=np.array(workload.output_len, dtype=np.int64),
        categories=[c or "" for c in workload.categories],
        closed_loop_clients=closed.clients if closed else 0,
        think_time=closed.think_time if closed else 0.0,
    )
    table = AcceptanceTable.from_traces(traces, tuple(bundle.drafter_names), with_acceptance=with_acceptance,
                                        tree_top_k=bundle_tree_top_k(bundle))
    return SimInputs(ew, table, traces, drafter_kinds(bundle))


def drafter_kinds(bundle: TraceBundle) -> dict[str, str]:
    """Each drafter of `bundle` by its kind (trace.yaml `drafters.<name>.kind`)."""
    return {name: spec.kind for name, spec in bundle.meta.drafters.items()}


def bundle_tree_top_k(bundle: TraceBundle) -> dict[str, int]:
    """Each drafter's declared params.tree_top_k (the rank meaning "not among the top K" in its tree_rank)."""
    from traces.tree import tree_params

    out = {}
    for name, spec in bundle.meta.drafters.items():
        declared = tree_params(spec.params)
        if declared is not None:
            out[name] = declared[0]
    return out


def inputs_from_traces(traces: Sequence[RequestTrace], drafters: Sequence[str] | None = None, *,
                       arrival: np.ndarray | None = None, clients: int = 0, think_time: float = 0.0,
                       trace_index: np.ndarray | None = None, output_len: np.ndarray | None = None,
                       request_ids: Sequence[str] | None = None, categories: Sequence[str] | None = None,
                       with_acceptance: bool = True, kinds: Mapping[str, str] | None = None,
                       tree_top_k: Mapping[str, int] | None = None) -> SimInputs:
    """Inputs replaying `traces` directly: request i replays trace `trace_index[i]` (default: trace i), arriving
    at `arrival[i]` (default 0) or from a closed loop of `clients`; prompt and output lengths are the trace's
    unless `output_len` gives each request's own. `drafters` default to those of the first trace; `kinds` names
    each drafter's kind (scenario.drafter_kinds of its bundle; vLLM V1's lookahead KV reads it); `tree_top_k`
    (per drafter, its bundle's params.tree_top_k) lets a draft tree replay their tree_rank."""
    traces = list(traces)
    if not traces:
        raise ValueError("inputs_from_traces: no traces")
    ti = np.arange(len(traces), dtype=np.int64) if trace_index is None else np.asarray(trace_index, dtype=np.int64)
    n = len(ti)
    names = tuple(traces[0].drafters) if drafters is None else tuple(drafters)
    prompt = np.array([traces[t].prompt_len for t in ti], dtype=np.int64)
    out = (np.array([traces[t].output_len for t in ti], dtype=np.int64) if output_len is None
           else np.asarray(output_len, dtype=np.int64).copy())
    ew = EngineWorkload(
        request_ids=[traces[t].id for t in ti] if request_ids is None else list(request_ids), trace_index=ti,
        arrival=np.zeros(n) if arrival is None else np.asarray(arrival, dtype=np.float64).copy(),
        prompt_len=prompt, output_len=out,
        categories=[traces[t].category or "" for t in ti] if categories is None else list(categories),
        closed_loop_clients=clients, think_time=think_time)
    return SimInputs(ew, AcceptanceTable.from_traces(traces, names, with_acceptance=with_acceptance,
                                                     tree_top_k=tree_top_k), traces, dict(kinds or {}))


# ---------------------------------------------------------------- simulations


def check_inputs(sc: Scenario | ClusterScenario, inputs: SimInputs) -> None:
    """Refuse before any run what the inputs cannot support (a cluster router keyed by clients in an open loop)."""
    if isinstance(sc, ClusterScenario):
        check_router_workload(sc.cluster.router, inputs.workload)


def check_cluster_size(replicas: int, num_requests: int, where: str) -> None:
    """Refuse, before any allocation, a cluster whose replicas x requests exceeds traces.limits.MAX_CLUSTER_SLOTS
    (each replica holds per-request state for the whole workload)."""
    from traces.limits import MAX_CLUSTER_SLOTS

    if replicas > 1 and replicas * num_requests > MAX_CLUSTER_SLOTS:
        raise ValueError(f"{where}: {replicas:,} replicas x {num_requests:,} requests = {replicas * num_requests:,} "
                         f"request slots; a cluster simulation holds at most {MAX_CLUSTER_SLOTS:,} (each replica "
                         "keeps state for every request); use fewer replicas or requests")


def simulation(sc: Scenario | ClusterScenario, inputs: SimInputs, *, live: bool = False,
               on_step: Callable[[int], None] | None = None) -> ServerSimulation | ClusterSimulation:
    """The simulation of one prepared run: a `Server` in its own Environment, or the replicas' `Server`s in one
    Environment handed to a `ClusterSimulation`."""
    if not sc.fits:
        raise ValueError(f"run {sc.name!r}: {sc.info.get('does_not_fit', 'deployment does not fit')}")
    if isinstance(sc, Scenario):
        return ServerSimulation(sc, inputs, live=live, on_step=on_step)
    if live:
        raise ValueError(f"run {sc.name!r}: a cluster cannot run live")
    check_cluster_size(len(sc.replicas), len(inputs.workload), f"run {sc.name!r}")
    env = simpy.Environment()
    servers = [Server(env, rep, inputs, arrivals=ReplicaArrivals(env)) for rep in sc.replicas]
    return ClusterSimulation(env, servers, sc.cluster.router, inputs, on_step=on_step)


def simulate(sc: Scenario | ClusterScenario, inputs: SimInputs, *, live: bool = False,
             on_step: Callable[[int], None] | None = None) -> SimResult | dict[str, Any]:
    """Simulate one prepared run; a deployment that does not fit is returned as its info dict, not raised."""
    if not sc.fits:
        return sc.info
    res = simulation(sc, inputs, live=live, on_step=on_step).simulate()
    if isinstance(sc, ClusterScenario):
        res.extras.update(sc.info)
    return res
