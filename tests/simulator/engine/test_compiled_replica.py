"""Cluster replicas (simulator/engine/compiled_replica.py: the kernels, a call per routing) over random small clusters
(1-4 replicas, every router and affinity key, AR, SD with the fixed, learning and oracle policies and plug-ins, and
PSD, Poisson, burst and closed-loop arrivals with and without think time, prefill modes, heterogeneous replicas, KV
pressure, row buffers small enough to fill every few steps): each replica runs as a single server told the arrival
times of the requests routed to it (one whole-run kernel call), the run in segments as in one piece, and the cluster
keeps the engine's invariants; the cluster loop (simulator/cluster/compiled_cluster.py) routes as the replicas'
own processes do; the plan's early stop sees the full run's state at each check."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import oracle.registry  # noqa: F401  (registers the greedy oracle POLICIES names)
from simulator.cluster import compiled_cluster
from simulator.cluster.config import ClusterSpec
from simulator.engine import compiled_run
from simulator.engine.acceptance_table import AcceptanceTable
from simulator.engine.compiled_replica import exact_delay, exact_delays
from simulator.engine.simulation import ServerSimulation
from simulator.engine.workload_arrays import EngineWorkload
from simulator.scenario import SimInputs, make_cluster_scenario, simulation
from simulator.server_config import RunSpec
from tests.simulator.cluster.test_cluster import DRAFTERS
from tests.simulator.cluster.test_cluster import server as cluster_server
from tests.simulator.engine.test_compiled_run import with_tv
from tests.simulator.engine.test_rules_invariants import check_invariants
from tests.simulator.engine.engine_fixtures import (assert_same_run_tables, iid_traces, tables_jit_on_and_off, tight_kv,
                                                 workload)

POLICIES = {"fixed": {"name": "fixed", "drafter": "d", "k": 3},
            "adaptive-k": {"name": "adaptive-k", "drafter": "d", "k_max": 4},
            "adaptive-k-shared": {"name": "adaptive-k", "drafter": "d", "k_max": 3, "scope": "shared"},
            "ucb": {"name": "ucb", "drafters": ["d"], "k": 2},
            "discounted-ucb": {"name": "discounted-ucb", "drafters": ["d"], "k": 2, "gamma": 0.8, "reward": "be"},
            "sliding-window-ucb": {"name": "sliding-window-ucb", "drafters": ["e", "d"], "k": 2, "window": 3,
                                   "reward": "be"},
            "thompson": {"name": "thompson", "drafters": ["d", "e"], "k": 2},  # these two draw from their generators
            "exp3": {"name": "exp3", "drafters": ["e", "d"], "k": 3, "gamma": 0.3},
            # the greedy oracle: each drafter's oracle k by the step's time estimate, a switching cost per change
            "greedy-oracle": {"name": "oracle-best-drafter", "drafters": ["e", "d"], "k_max": 4,
                              "switch_cost_s": 5e-4},
            # an exact plan per request, priced at its first decode step (oracle/exact.py, plan min-time)
            "min-time-oracle": {"name": "oracle-best-drafter", "drafters": ["e", "d"], "k_max": 4, "plan": "min-time"},
            # plug-ins, asked in Python at each step (compiled_run.python_chooses): each replica's own instance
            "plug-in-thompson": {"name": "tests.simulator.engine.test_compiled_run:PlugInThompson",
                                 "drafters": ["d", "e"], "k": 2},
            "plug-in-adaptive-k": {"name": "tests.simulator.engine.test_compiled_run:PlugInAdaptiveK", "drafter": "d",
                                   "k_max": 4}}
DRAFTER_COSTS = {**DRAFTERS, "e": {"kind": "constant", "seconds": 0.001}}  # 'e': a second drafter for the bandits


def server(**kw):
    """The cluster tests' server under draftsim's scheduler unless `scheduler` is given."""
    return cluster_server(**{"scheduler": "draftsim", **kw})


def cluster_sim(traces, wl, *, mode: str, policy: str, replicas, router: dict, srv, seed: int, on_step=None):
    """The cluster simulation, not yet run."""
    spec = ClusterSpec(replicas=replicas, router=router)
    run = RunSpec(name=mode, mode=mode, policy=None if mode == "ar" else POLICIES[policy])
    sc = make_cluster_scenario(run, srv, DRAFTER_COSTS, seed, spec)
    return simulation(sc, SimInputs(wl, table_of(traces, policy), traces), on_step=on_step)


def table_of(traces, policy: str) -> AcceptanceTable:
    return AcceptanceTable.from_traces(traces, sorted(set(POLICIES[policy].get("drafters", ["d"]))))


def assert_same_cluster(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert a.itl.tobytes() == b.itl.tobytes()
    for x, y in zip(a.replica_results, b.replica_results):
        assert x.extras == y.extras
    assert a.extras == b.extras


def assert_each_replica_runs_as_a_server_told_its_arrivals(res, traces, wl, policy: str, **cluster) -> None:
    """Each replica's step rows, ITL gaps, counters and routed requests equal those of a single server with the
    replica's own scenario (a fresh cluster's, not yet run: its overrides, seeds and a fresh policy) whose workload is
    the requests routed to it, each arriving when the router routed it: the replica path (a kernel call up to each
    routing) against one whole-run kernel call. `cluster`: cluster_sim's other arguments."""
    fresh = cluster_sim(traces, wl, policy=policy, **cluster)
    row = {rid: i for i, rid in enumerate(wl.request_ids)}
    for rep_res, rep in zip(res.replica_results, fresh.replicas):
        if not len(rep_res.requests):  # nothing routed to it: no steps
            assert len(rep_res.steps) == 0
            continue
        mine = rep_res.requests.sort_values("arrival_time", kind="stable")
        idx = np.array([row[r] for r in mine.request_id], dtype=np.int64)
        told = EngineWorkload(list(mine.request_id), wl.trace_index[idx], mine.arrival_time.to_numpy(),
                              wl.prompt_len[idx], wl.output_len[idx], [wl.categories[i] for i in idx])
        alone = ServerSimulation(rep.server.scenario, SimInputs(told, table_of(traces, policy), traces)).simulate()
        pd.testing.assert_frame_equal(alone.requests.set_index("request_id").sort_index(),
                                      rep_res.requests.set_index("request_id").sort_index(), check_exact=True)
        pd.testing.assert_frame_equal(alone.steps, rep_res.steps, check_exact=True)
        assert alone.itl.tobytes() == rep_res.itl.tobytes()
        for key in ("steps", "request_steps", "kv_peak_blocks", "drafter_usage", "psd_fallback_steps"):
            assert alone.extras[key] == rep_res.extras[key], key


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "sd", "psd"]), policy=st.sampled_from(sorted(POLICIES)),
       replicas=st.integers(1, 4), hetero=st.booleans(),
       router=st.sampled_from(["round_robin", "least_outstanding", "least_kv", "affinity"]),
       key=st.sampled_from(["category", "trace", "client"]), max_out=st.sampled_from([None, 2]),
       arrivals=st.sampled_from(["poisson", "poisson", "burst", "closed", "closed_think"]),
       rate=st.sampled_from([30.0, 300.0]), seqs=st.integers(1, 6),
       prefill=st.sampled_from(["mixed", "separate", "chunked"]), block_size=st.sampled_from([1, 16]),
       overhead=st.sampled_from([0.0, 1e-3]), n=st.integers(1, 40), segment=st.sampled_from([4, 1 << 16]),
       seed=st.integers(0, 1000), pressure=st.sampled_from([0, 0, 1, 3]))
# an idle replica whose wait's end, now + (arrival - now), rounds one float past its next request's arrival (the
# per-replica path: exp3 draws; the cluster loop: the min-time oracle): its step starts at the arrival itself
@example(mode="sd", policy="exp3", replicas=2, hetero=False, router="round_robin", key="category", max_out=None,
         arrivals="poisson", rate=30.0, seqs=1, prefill="mixed", block_size=1, overhead=0.0, n=3, segment=4, seed=574,
         pressure=0)
@example(mode="sd", policy="min-time-oracle", replicas=2, hetero=False, router="round_robin", key="category",
         max_out=None, arrivals="poisson", rate=30.0, seqs=1, prefill="mixed", block_size=1, overhead=0.0, n=3,
         segment=4, seed=574, pressure=0)
def test_a_random_cluster_runs_each_replica_as_a_server_told_its_arrivals(mode, policy, replicas, hetero, router, key,
                                                                           max_out, arrivals, rate, seqs, prefill,
                                                                           block_size, overhead, n, segment, seed,
                                                                           pressure):
    """`pressure`: each replica's KV holds fewer than its max_num_seqs largest requests (replicas preempt by
    recompute)."""
    check_random_cluster(mode, policy, replicas, hetero, router, key, max_out, arrivals, rate, seqs, prefill,
                         block_size, overhead, n, segment, seed, pressure=pressure)


def check_random_cluster(mode, policy, replicas, hetero, router, key, max_out, arrivals, rate, seqs, prefill,
                         block_size, overhead, n, segment, seed, pressure=0, clients=3, **server_kw):
    """One random cluster: each replica runs as a server told its arrivals, the run in segments of `segment` step
    rows as in one piece, and the cluster keeps the invariants (`server_kw`: more ServerConfig fields; PSD takes
    every policy: the fixed one, adaptive-k and the bandits by their rules in its kernel, the others asked in Python;
    `pressure` p > 0: KV for max_num_seqs // (p + 1) of the largest requests, tests/simulator/engine/
    test_compiled_run.py tight_kv, so replicas may preempt). Returns the preemptions."""
    traces = iid_traces(10, seed=seed, out=(1, 60), drafters=("d", "e"))
    closed = arrivals.startswith("closed")
    wl = workload(traces, n, rate=rate if arrivals == "poisson" else None, clients=clients if closed else 0,
                  think=0.013 if arrivals == "closed_think" else 0.0, seed=seed)
    wl.categories = [f"c{i % 3}" for i in range(n)]
    if server_kw.get("verification") == "sampled":  # each replica draws from its own generator (per-replica path)
        traces = with_tv(traces, seed)
    sched = ({"chunked_prefill": True, "max_num_batched_tokens": 64} if prefill == "chunked"
             else {"prefill": prefill})
    if pressure:  # drafts and lookahead slots of the largest k any drawn policy asks for (4)
        server_kw["kv_capacity_tokens"] = tight_kv(wl, 4, block_size, seqs, 0, 4, pressure)
    srv = server(max_num_seqs=seqs, block_size=block_size, step_overhead_s=overhead, **sched, **server_kw)
    reps = [{"max_num_seqs": 1 + (seqs + j) % 5} for j in range(replicas)] if hetero else replicas
    spec = {"name": router}
    if router == "affinity":
        spec.update(key=key if closed or key != "client" else "trace", max_outstanding=max_out)
    kw = dict(mode=mode, policy=policy, replicas=reps, router=spec, srv=srv, seed=seed)
    rows, compiled_run.SEGMENT_ROWS = compiled_run.SEGMENT_ROWS, segment  # 4: full row buffers every few steps
    try:
        a = cluster_sim(traces, wl, **kw).simulate()
    finally:
        compiled_run.SEGMENT_ROWS = rows
    whole = cluster_sim(traces, wl, **kw).simulate()
    assert_same_cluster(a, whole)
    assert_each_replica_runs_as_a_server_told_its_arrivals(whole, traces, wl, **kw)
    check_invariants(whole, wl.output_len.tolist(), None)
    return int(whole.requests.preemptions.sum())


def _snapshots(traces, wl, stop_after: int | None, router: str, **server_kw):
    """Every snapshot the plan's early stop (a StopMonitor on the cluster's step hook) takes."""
    from simulator.measure.early_stop import StopMonitor, run_until_decided

    seen = []

    def decide(p):
        seen.append(p)
        return "enough" if stop_after is not None and len(seen) >= stop_after else None

    monitor = StopMonitor(None, None, len(wl), decide, every=3, check_from=5)
    sim = cluster_sim(traces, wl, mode="sd", policy="fixed", replicas=3, router={"name": router},
                      srv=server(max_num_seqs=4, **server_kw), seed=2, on_step=monitor)  # as experiments/plan/point.py does
    last = run_until_decided(sim, monitor.bind(sim))
    return seen, last


@pytest.mark.parametrize("loop", [True, False])
@pytest.mark.parametrize("pressure", [0, 3])
@pytest.mark.parametrize("scheduler", ["draftsim", "vllm-v1"])
@pytest.mark.parametrize("router", ["least_outstanding", "least_kv"])
@pytest.mark.parametrize("stop_after", [None, 2])
def test_the_early_stop_sees_the_full_runs_state_at_each_check(stop_after, router, scheduler, pressure, loop):
    """On the cluster loop (`loop`) or the per-replica path: each check comes after the step that reaches its finish
    count (5, 8, 11, ...), at that step's end, which is when the count's last request finished in the full run, and
    sees the full run's first tokens and finishes up to then (NaN after); `pressure`: KV for one of each replica's
    four largest requests, so a request preempted in one kernel run may finish in a later one (its times show
    there)."""
    traces = iid_traces(10, seed=7, out=(1, 60))
    wl = workload(traces, 40, rate=120.0, seed=7)
    kw = {} if scheduler == "draftsim" else dict(scheduler=scheduler, step_overhead_s=2e-3)  # the gap: 2 ms
    if pressure:
        kw["kv_capacity_tokens"] = tight_kv(wl, 3, 16, 4, 0, 3, pressure)
    full = cluster_sim(traces, wl, mode="sd", policy="fixed", replicas=3, router={"name": router},
                       srv=server(max_num_seqs=4, **kw), seed=2).simulate().requests
    compiled_cluster.ENABLED = loop
    try:
        comp, last = _snapshots(traces, wl, stop_after, router, **kw)
    finally:
        compiled_cluster.ENABLED = True
    finish = np.sort(full.finish_time.to_numpy())
    assert len(comp) >= (stop_after or 3)
    for j, p in enumerate(comp):
        assert p.finished >= 5 + 3 * j and p.now == finish[p.finished - 1] < finish[p.finished]
        for got, col in ((p.first_token, "first_token_time"), (p.finish, "finish_time")):
            t = full[col].to_numpy()
            assert got.tobytes() == np.where(t <= p.now, t, np.nan).tobytes(), col
    assert (last is None) == (stop_after is None)


def test_a_stopped_cluster_leaves_each_replicas_min_time_plans():
    """Stopped by the early stop, each replica's policy holds (once its result is taken: CompiledReplica.settle) the
    exact plans of requests still running, the same for a request both cluster drivers hold a plan of (the cluster
    loop and each replica's own process; the plan rule against the oracle asked in Python is the single server's test,
    test_compiled_run.py test_min_time_stopped_midway_leaves_the_plans_the_oracle_itself_makes), and none of a
    finished request."""
    from simulator.measure.early_stop import StopMonitor, run_until_decided

    traces = iid_traces(10, seed=5, out=(20, 60), drafters=("d", "e"))
    wl = workload(traces, 40, rate=120.0, seed=5)
    kw = dict(mode="sd", policy="min-time-oracle", replicas=2, router={"name": "least_kv"}, srv=server(max_num_seqs=4),
              seed=2)
    plans, unfinished = [], []
    for loop in (True, False):
        checks = []
        monitor = StopMonitor(None, None, len(wl), lambda p: checks.append(p) or ("enough" if len(checks) == 2
                                                                                  else None), every=4, check_from=4)
        compiled_cluster.ENABLED = loop
        try:
            sim = cluster_sim(traces, wl, on_step=monitor, **kw)
            run_until_decided(sim, monitor.bind(sim))
            assert len(checks) == 2 and (sim.compiled is not None) == loop
            sim.result()
        finally:
            compiled_cluster.ENABLED = True
        plans.append([rep.server.drafting.policy.time_plan._plans for rep in sim.replicas])
        unfinished.append({rid for rep in sim.replicas for rid, f in zip(wl.request_ids, rep.server.state.finish)
                           if np.isnan(f)})
    both = 0
    for a, b in zip(*plans):
        assert set(a) <= unfinished[0] and set(b) <= unfinished[1]
        for rid in set(a) & set(b):
            both += 1
            for field in ("action_drafter", "action_k", "cost_to_go", "path"):
                assert np.array_equal(getattr(a[rid], field), getattr(b[rid], field)), (rid, field)
    assert both


@settings(max_examples=15, deadline=None)
@given(mode=st.sampled_from(["sd", "psd", "psd"]), replicas=st.integers(1, 3), hetero=st.booleans(),
       router=st.sampled_from(["round_robin", "least_kv"]), arrivals=st.sampled_from(["poisson", "burst", "closed"]),
       seqs=st.integers(1, 6), prefill=st.sampled_from(["mixed", "separate", "chunked"]), n=st.integers(1, 40),
       seed=st.integers(0, 1000), pressure=st.sampled_from([0, 0, 1, 3]))
def test_replicas_that_verify_by_sampling_run_as_servers_told_their_arrivals(mode, replicas, hetero, router, arrivals,
                                                                             seqs, prefill, n, seed, pressure):
    """Sampled verification (each replica's own generator: the per-replica path), SD and PSD replicas."""
    check_random_cluster(mode, "fixed", replicas, hetero, router, "trace", None, arrivals, 300.0, seqs, prefill, 16,
                         0.0, n, 1 << 16, seed, pressure=pressure, verification="sampled")


@settings(max_examples=25, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "sd", "psd"]), policy=st.sampled_from(sorted(POLICIES)),
       replicas=st.integers(1, 4), hetero=st.booleans(),
       router=st.sampled_from(["round_robin", "least_outstanding", "least_kv", "affinity"]),
       key=st.sampled_from(["category", "trace", "client"]), max_out=st.sampled_from([None, 2]),
       arrivals=st.sampled_from(["poisson", "poisson", "burst", "closed", "closed_think"]),
       rate=st.sampled_from([30.0, 300.0]), seqs=st.integers(1, 6),
       prefill=st.sampled_from(["mixed", "chunked"]), block_size=st.sampled_from([1, 16]),
       overhead=st.sampled_from([0.0, 1e-3, 4e-3]), n=st.integers(1, 40), segment=st.sampled_from([4, 1 << 16]),
       seed=st.integers(0, 1000), async_sched=st.booleans(), pressure=st.sampled_from([0, 0, 1, 3]))
def test_a_vllm_v1_cluster_runs_each_replica_as_a_server_told_its_arrivals(mode, policy, replicas, hetero, router,
                                                                            key, max_out, arrivals, rate, seqs, prefill,
                                                                            block_size, overhead, n, segment, seed,
                                                                            async_sched, pressure):
    """Replicas under vLLM V1's rules (chunked prefill, one token budget; "mixed": its 4096-token budget): the
    engine-loop gap after a busy step (step_overhead_s) is a SimPy wait the router may route during; a replica takes
    it inside a kernel run when no routing falls in it, else yields it. With async scheduling the gap is what the
    step before it leaves (rules/engine_loop.overlapped_gap); preempted requests count as waiting in it (`pressure`
    as above)."""
    check_random_cluster(mode, policy, replicas, hetero, router, key, max_out, arrivals, rate, seqs, prefill,
                         block_size, overhead, n, segment, seed, pressure=pressure, scheduler="vllm-v1",
                         async_scheduling=async_sched)


@pytest.mark.parametrize("loop", [True, False])
@pytest.mark.parametrize("mode,policy", [("ar", "fixed"), ("sd", "fixed"), ("sd", "adaptive-k"), ("sd", "ucb"),
                                         ("psd", "fixed")])
@pytest.mark.parametrize("arrivals", ["poisson", "burst", "closed"])
def test_replicas_under_kv_pressure_preempt_and_run_as_servers_told_their_arrivals(loop, mode, policy, arrivals):
    """KV for one of each replica's four largest requests: the replicas preempt by recompute (the newest running
    requests back to the waiting queue's front), on the cluster loop (`loop`) or the per-replica path, each as a
    server told its arrivals; the router reads the preempted prompts as queued KV (least_kv); a closed loop's 12
    clients each submit their next request when a step finishes theirs, a readmitted request's too."""
    compiled_cluster.ENABLED = loop
    try:
        preempted = check_random_cluster(mode, policy, 3, False, "least_kv", "trace", None, arrivals, 300.0, 4,
                                         "mixed", 16, 0.0, 40, 1 << 16, 2, pressure=3, clients=12)
    finally:
        compiled_cluster.ENABLED = True
    assert preempted > 0


TICK = 2.0 ** -7  # every step takes exactly one tick: step ends, gap ends and arrivals meet at the same instants


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 1000), router=st.sampled_from(["least_outstanding", "least_kv", "round_robin"]),
       replicas=st.integers(2, 3), mode=st.sampled_from(["ar", "sd", "psd"]), closed=st.booleans(),
       scheduler=st.sampled_from(["draftsim", "vllm-v1", "vllm-v1 async"]), loop=st.booleans())
@example(seed=1, router="least_kv", replicas=3, mode="ar", closed=True, scheduler="vllm-v1 async", loop=False)
@example(seed=4, router="least_kv", replicas=2, mode="ar", closed=True, scheduler="vllm-v1 async", loop=False)
def test_replicas_whose_steps_end_at_the_same_instants_as_arrivals_run_as_servers_told_their_arrivals(
        seed, router, replicas, mode, closed, scheduler, loop):
    """A step price of one tick (a power of two: every sum exact) and arrivals on ticks: replicas' step ends, vLLM
    V1's gap ends and routings fall on the same instants, where SimPy's order among them (by when each was
    scheduled) decides what the router sees (with async scheduling the one-tick gap hides behind the one-tick step:
    no gap event; the two examples are runs where a replica's process once waited at a hidden gap's end and the
    router saw it late). The cluster loop (`loop`) and each replica's own process (compiled_cluster.ENABLED off)
    route alike, and each replica runs as a server told its arrivals."""
    rng = np.random.default_rng(seed)
    traces = iid_traces(6, seed=seed, out=(5, 40), prompt=(8, 60))
    n = 30
    ti = np.arange(n) % len(traces)
    arrival = np.zeros(n) if closed else np.cumsum(rng.integers(0, 4, n)) * TICK
    wl = EngineWorkload([f"r{i}" for i in range(n)], ti, arrival, np.array([traces[t].prompt_len for t in ti]),
                        np.array([traces[t].output_len for t in ti]), ["c"] * n,
                        closed_loop_clients=4 if closed else 0, think_time=2 * TICK if closed else 0.0)
    v1 = scheduler.startswith("vllm-v1")
    srv = server(max_num_seqs=3, target_profile={"kind": "linear", "coefficients": {"const": TICK}},
                 scheduler="vllm-v1" if v1 else scheduler, step_overhead_s=TICK if v1 else 0.0,
                 async_scheduling=scheduler.endswith("async"))
    kw = dict(mode=mode, policy="fixed", replicas=replicas, router={"name": router}, srv=srv, seed=seed)
    compiled_cluster.ENABLED = loop
    try:
        fast = cluster_sim(traces, wl, **kw)
    finally:
        compiled_cluster.ENABLED = True
    assert (fast.compiled is not None) == loop
    res = fast.simulate()
    compiled_cluster.ENABLED = not loop
    try:
        other = cluster_sim(traces, wl, **kw)
        assert (other.compiled is None) == loop
        assert_same_cluster(res, other.simulate())
    finally:
        compiled_cluster.ENABLED = True
    assert_each_replica_runs_as_a_server_told_its_arrivals(res, traces, wl, **kw)


@pytest.mark.parametrize("scheduler", ["draftsim", "vllm-v1"])
def test_a_replica_runs_many_steps_per_kernel_call_when_arrivals_are_sparse(scheduler):
    """Each kernel call ends at an external event: a routing (each arrival ends at most one run per replica) or the
    replica going idle (at most once per request routed to it); buffers never fill here. Sparse arrivals with long
    outputs: tens of steps per request, so the calls stay at those bounds, far below one per step; each replica
    runs as a server told its arrivals."""
    traces = iid_traces(10, seed=3, out=(150, 200))
    wl = workload(traces, 12, rate=4.0, seed=3)
    kw = dict(mode="ar", policy="fixed", replicas=2, router={"name": "least_outstanding"},
              srv=server(max_num_seqs=4, scheduler=scheduler, step_overhead_s=1e-3), seed=3)
    fast = cluster_sim(traces, wl, **kw)
    a = fast.simulate()
    assert_each_replica_runs_as_a_server_told_its_arrivals(a, traces, wl, **kw)
    n = len(wl)
    for rep, res in zip(fast.replicas, a.replica_results):
        calls, steps = rep.server.compiled.kernel_calls, res.extras["steps"]
        assert calls <= n + res.extras["routed_requests"]
        assert steps >= 150 * res.extras["routed_requests"] // 4  # AR: one token per step, 4 at a time at most
        assert calls < 0.1 * steps, (calls, steps)


@settings(max_examples=200, deadline=None)
@given(now=st.floats(0.0, 1e6), dur=st.floats(0.0, 1e3))
def test_exact_delay_lands_a_timeout_on_the_kernels_clock(now, dur):
    """SimPy schedules at now + delay: the delay exact_delay gives lands on `end` itself, whatever the rounding of
    end - now."""
    end = now + dur
    d = exact_delay(now, end)
    assert now + d == end and d >= 0.0 and math.isfinite(d)


@settings(max_examples=300, deadline=None)
@given(now=st.floats(0.0, 1e3), end=st.floats(0.0, 1e6))
def test_exact_delays_land_on_any_later_time(now, end):
    """A run's last step may start far from the replica's clock (end - now inexact when end > 2 now): the delays,
    taken one after another as SimPy adds them, land on it exactly."""
    if end < now:
        now, end = end, now
    t = now
    for d in exact_delays(now, end):
        assert d >= 0.0
        t = t + d
    assert t == end



def test_exact_delays_reach_a_time_no_single_delay_reaches():
    now, end = 0.056953340504613564, 0.32814204050461354  # end - now inexact; ties-to-even skips end
    with pytest.raises(ArithmeticError):
        exact_delay(now, end)
    t = now
    for d in exact_delays(now, end):
        t = t + d
    assert t == end


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), replicas=st.integers(1, 3), prefill=st.sampled_from(["mixed", "separate"]))
def test_closed_loop_clients_get_their_next_request_in_the_kernels_finish_order(seed, replicas, prefill):
    """A step that finishes decoding requests and one-token requests (finished by their prefill) tells the clients
    in the kernel's order of that step's finishes (Scratch.done), on the cluster loop as on the per-replica path;
    client affinity shows which client got which request, and each replica runs as a server told its arrivals."""
    traces = iid_traces(10, seed=seed, out=(1, 4), prompt=(5, 40))
    wl = workload(traces, 40, rate=None, clients=6, think=0.0, seed=seed)
    kw = dict(mode="sd", policy="fixed", replicas=replicas, router={"name": "affinity", "key": "client"},
              srv=server(max_num_seqs=4, prefill=prefill), seed=seed)
    a = cluster_sim(traces, wl, **kw)
    compiled_cluster.ENABLED = False
    try:
        b = cluster_sim(traces, wl, **kw)
        assert a.compiled is not None and b.compiled is None
        res = a.simulate()
        assert_same_cluster(res, b.simulate())
    finally:
        compiled_cluster.ENABLED = True
    assert (a.source.client_of == b.source.client_of).all()
    assert_each_replica_runs_as_a_server_told_its_arrivals(res, traces, wl, **kw)


def test_numba_off_gives_the_compiled_clusters_tables(tmp_path):
    """With numba's JIT switched off (NUMBA_DISABLE_JIT=1: the kernel as plain Python) a compiled cluster's tables
    are bit for bit those of the compiled kernel (tolerance zero: the same IEEE operations in the same order)."""
    code = f"""
import pickle
from tests.simulator.engine.test_compiled_replica import cluster_sim, server, iid_traces, workload
t = iid_traces(10, seed=4, out=(1, 60))
out = []
for router, wl in (("least_kv", workload(t, 30, rate=150.0, seed=4)),
                   ("least_outstanding", workload(t, 30, rate=None, clients=4, seed=4))):
    sim = cluster_sim(t, wl, mode="sd", policy="adaptive-k", replicas=3, router={{"name": router}},
                      srv=server(max_num_seqs=3), seed=4)
    res = sim.simulate()
    out.append((res.requests, res.steps, res.itl.tobytes()))
pickle.dump(out, open(OUT, "wb"))
"""
    for a, b in tables_jit_on_and_off(code, tmp_path):
        assert_same_run_tables(a, b)


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
def test_a_request_routed_exactly_at_a_steps_end_joins_the_next_step(mode):
    """Hand-worked: one replica, every step 0.25 s (a constant profile, no overhead). Request 0 arrives at 0 and
    prefills over [0, 0.25]; request 1 arrives at 0.25, the instant that step ends, so the router routes it before
    the replica plans its next step: it is scheduled at 0.25 and its first token comes at that step's end (AR: 0.5;
    SD and PSD add the constant 2 ms draft). The per-replica kernel call must end before a step that starts at the
    routing (compiled_kernel._turn's `until`), and the cluster loop takes the router's event first."""
    traces = iid_traces(4, seed=1, out=(4, 5))
    arrival = np.array([0.0, 0.25, 0.5, 0.5])
    ti = np.arange(4) % len(traces)
    wl = EngineWorkload([f"r{i}" for i in range(4)], ti, arrival, np.array([traces[t].prompt_len for t in ti]),
                        np.array([traces[t].output_len for t in ti]), ["c"] * 4)
    profile = {"kind": "linear", "coefficients": {"kv_tokens": 0.0, "batched_tokens": 0.0, "const": 0.25}}
    srv = server(target_profile=profile, step_overhead_s=0.0, max_num_seqs=4)
    first_token = 0.5 if mode == "ar" else 0.502
    for loop in (False, True):
        compiled_cluster.ENABLED = loop
        try:
            sim = cluster_sim(traces, wl, mode=mode, policy="fixed", replicas=1, router={"name": "round_robin"},
                              srv=srv, seed=0)
            req = sim.simulate().requests.set_index("request_id")
        finally:
            compiled_cluster.ENABLED = True
        assert (sim.compiled is not None) == loop
        assert (req.loc["r0", "first_token_time"], req.loc["r1", "first_scheduled_time"],
                req.loc["r1", "first_token_time"]) == (0.25, 0.25, first_token), loop

