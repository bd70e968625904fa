"""Cluster replicas on the compiled path (simulator/engine/compiled_replica.py) against the step path: the same
cluster requests, steps and ITL tables bit for bit, and the same per-replica extras, over random small clusters
(1-4 replicas, every router and affinity key, AR, SD with the fixed, adaptive-k and UCB policies and PSD, Poisson, burst
and closed-loop arrivals with and without think time, prefill modes, heterogeneous replicas, row buffers small
enough to fill every few steps); the plan's early stop
sees the same snapshots. The routing reads each replica's
outstanding requests and KV load mid-step, so any difference in what a replica shows while a step is in flight moves
requests to other replicas and shows in the tables."""
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
from simulator.engine.workload_arrays import EngineWorkload
from simulator.scenario import SimInputs, make_cluster_scenario, simulation
from simulator.server_config import RunSpec
from tests.simulator.cluster.test_cluster import DRAFTERS
from tests.simulator.cluster.test_cluster import server as cluster_server
from tests.simulator.engine.test_compiled_run import with_tv
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
    """The cluster tests' server under draftsim's scheduler unless `scheduler` is given: the compiled replica path
    these tests compare takes draftsim's rules (a vllm-v1 replica takes the step path and says why)."""
    return cluster_server(**{"scheduler": "draftsim", **kw})


def cluster_sim(compiled: bool, traces, wl, *, mode: str, policy: str, replicas, router: dict, srv, seed: int,
                on_step=None):
    """The cluster simulation on one path (compiled_run.COMPILED), not yet run."""
    spec = ClusterSpec(replicas=replicas, router=router)
    run = RunSpec(name=mode, mode=mode, policy=None if mode == "ar" else POLICIES[policy])
    drafters = sorted(set(POLICIES[policy].get("drafters", ["d"])))
    compiled_run.COMPILED = compiled
    try:
        sc = make_cluster_scenario(run, srv, DRAFTER_COSTS, seed, spec)
        return simulation(sc, SimInputs(wl, AcceptanceTable.from_traces(traces, drafters), traces), on_step=on_step)
    finally:
        compiled_run.COMPILED = True


def assert_same_cluster(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert a.itl.tobytes() == b.itl.tobytes()
    drop = ("engine_path", "engine_path_reason")
    for x, y in zip(a.replica_results, b.replica_results):
        assert {k: v for k, v in x.extras.items() if k not in drop} == {k: v for k, v in y.extras.items()
                                                                           if k not in drop}
    assert {k: v for k, v in a.extras.items() if k not in drop} == {k: v for k, v in b.extras.items() if k not in drop}


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
def test_a_compiled_cluster_equals_the_step_path_bit_for_bit(mode, policy, replicas, hetero, router, key, max_out,
                                                              arrivals, rate, seqs, prefill, block_size, overhead, n,
                                                              segment, seed, pressure):
    """`pressure`: each replica's KV holds fewer than its max_num_seqs largest requests (replicas preempt by
    recompute)."""
    check_random_cluster(mode, policy, replicas, hetero, router, key, max_out, arrivals, rate, seqs, prefill,
                         block_size, overhead, n, segment, seed, pressure=pressure)


def check_random_cluster(mode, policy, replicas, hetero, router, key, max_out, arrivals, rate, seqs, prefill,
                         block_size, overhead, n, segment, seed, pressure=0, clients=3, **server_kw):
    """One random cluster on both paths: the same tables bit for bit (`server_kw`: more ServerConfig fields; PSD
    takes every policy: the fixed one and adaptive-k by their rules in its kernel, the others asked in Python;
    `pressure` p > 0: KV for max_num_seqs // (p + 1) of the largest requests, tests/simulator/engine/
    test_compiled_run.py tight_kv, so replicas may preempt)."""
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
    fast = cluster_sim(True, traces, wl, **kw)
    assert all(r.server.compiled is not None for r in fast.replicas), fast.replicas[0].server.engine_path_reason
    slow = cluster_sim(False, traces, wl, **kw)
    assert all(r.server.compiled is None for r in slow.replicas)
    rows, compiled_run.SEGMENT_ROWS = compiled_run.SEGMENT_ROWS, segment  # 4: full row buffers every few steps
    try:
        a = fast.simulate()
    finally:
        compiled_run.SEGMENT_ROWS = rows
    b = slow.simulate()
    assert {r.extras["engine_path"] for r in a.replica_results} == {"compiled"}
    assert_same_cluster(a, b)
    return int(b.requests.preemptions.sum())


def _snapshots(compiled: bool, traces, wl, stop_after: int | None, router: str, **server_kw):
    """Every snapshot the plan's early stop (a StopMonitor on the cluster's step hook) takes, on one path."""
    from simulator.measure.early_stop import StopMonitor, run_until_decided

    seen = []

    def decide(p):
        seen.append(p)
        return "enough" if stop_after is not None and len(seen) >= stop_after else None

    monitor = StopMonitor(None, None, len(wl), decide, every=3, check_from=5)
    sim = cluster_sim(compiled, traces, wl, mode="sd", policy="fixed", replicas=3, router={"name": router},
                      srv=server(max_num_seqs=4, **server_kw), seed=2, on_step=monitor)  # as experiments/plan/point.py does
    last = run_until_decided(sim, monitor.bind(sim))
    assert all((r.server.compiled is not None) == compiled for r in sim.replicas)
    return seen, last


@pytest.mark.parametrize("loop", [True, False])
@pytest.mark.parametrize("pressure", [0, 3])
@pytest.mark.parametrize("scheduler", ["draftsim", "vllm-v1"])
@pytest.mark.parametrize("router", ["least_outstanding", "least_kv"])
@pytest.mark.parametrize("stop_after", [None, 2])
def test_the_early_stop_sees_the_same_snapshots_on_a_compiled_cluster(stop_after, router, scheduler, pressure, loop):
    """On the cluster loop (`loop`) or the per-replica path; `pressure`: KV for one of each replica's four largest
    requests, so a request preempted in one kernel run may finish in a later one (its times show there)."""
    traces = iid_traces(10, seed=7, out=(1, 60))
    wl = workload(traces, 40, rate=120.0, seed=7)
    kw = {} if scheduler == "draftsim" else dict(scheduler=scheduler, step_overhead_s=2e-3)  # the gap: 2 ms
    if pressure:
        kw["kv_capacity_tokens"] = tight_kv(wl, 3, 16, 4, 0, 3, pressure)
    steps, last_s = _snapshots(False, traces, wl, stop_after, router, **kw)
    compiled_cluster.ENABLED = loop
    try:
        comp, last_c = _snapshots(True, traces, wl, stop_after, router, **kw)
    finally:
        compiled_cluster.ENABLED = True
    assert len(steps) == len(comp) >= (stop_after or 3)
    for a, b in zip(steps, comp):
        assert (a.now, a.finished) == (b.now, b.finished) and b.now > 0
        for x, y in ((a.arrival, b.arrival), (a.first_token, b.first_token), (a.finish, b.finish)):
            assert x.tobytes() == y.tobytes()
    assert (last_s is None) == (last_c is None) == (stop_after is None)


@pytest.mark.parametrize("loop", [True, False])
def test_a_stopped_compiled_cluster_leaves_each_replicas_min_time_plans(loop):
    """Stopped by the early stop, each replica's policy holds (once its result is taken: CompiledReplica.settle) the
    exact plans of its requests still running, as the step path made them (PlanFollower.plan_of, from the same step's
    estimates), and none of a finished request."""
    from simulator.measure.early_stop import StopMonitor, run_until_decided

    traces = iid_traces(10, seed=5, out=(20, 60), drafters=("d", "e"))
    wl = workload(traces, 40, rate=120.0, seed=5)
    kw = dict(mode="sd", policy="min-time-oracle", replicas=2, router={"name": "least_kv"}, srv=server(max_num_seqs=4),
              seed=2)
    checks = []
    monitor = StopMonitor(None, None, len(wl), lambda p: checks.append(p) or ("enough" if len(checks) == 2 else None),
                          every=4, check_from=4)
    compiled_cluster.ENABLED = loop
    try:
        sim = cluster_sim(True, traces, wl, on_step=monitor, **kw)
        run_until_decided(sim, monitor.bind(sim))
        assert len(checks) == 2 and (sim.compiled is not None) == loop
        sim.result()
        plans = [rep.server.drafting.policy.time_plan._plans for rep in sim.replicas]
    finally:
        compiled_cluster.ENABLED = True
    slow, made = cluster_sim(False, traces, wl, **kw), {}
    for rep in slow.replicas:
        follower = rep.server.drafting.policy.time_plan
        follower.plan_of = (lambda plan_of: lambda rid, request, view=None: made.setdefault(
            rid, plan_of(rid, request, view)))(follower.plan_of)
    slow.simulate()
    held = 0
    for rep, held_by_rep in zip(sim.replicas, plans):
        for rid, plan in held_by_rep.items():
            held += 1
            assert np.isnan(rep.server.state.finish[wl.request_ids.index(rid)])
            for field in ("action_drafter", "action_k", "cost_to_go", "path"):
                assert np.array_equal(getattr(plan, field), getattr(made[rid], field)), (rid, field)
    assert held


@settings(max_examples=15, deadline=None)
@given(mode=st.sampled_from(["sd", "psd", "psd"]), replicas=st.integers(1, 3), hetero=st.booleans(),
       router=st.sampled_from(["round_robin", "least_kv"]), arrivals=st.sampled_from(["poisson", "burst", "closed"]),
       seqs=st.integers(1, 6), prefill=st.sampled_from(["mixed", "separate", "chunked"]), n=st.integers(1, 40),
       seed=st.integers(0, 1000), pressure=st.sampled_from([0, 0, 1, 3]))
def test_replicas_that_verify_by_sampling_equal_the_step_path(mode, replicas, hetero, router, arrivals, seqs, prefill,
                                                              n, seed, pressure):
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
def test_a_compiled_vllm_v1_cluster_equals_the_step_path_bit_for_bit(mode, policy, replicas, hetero, router, key,
                                                                     max_out, arrivals, rate, seqs, prefill,
                                                                     block_size, overhead, n, segment, seed,
                                                                     async_sched, pressure):
    """Replicas under vLLM V1's rules (chunked prefill, one token budget; "mixed": its 4096-token budget): the
    engine-loop gap after a busy step (step_overhead_s) is a SimPy wait the router may route during; a replica takes
    it inside a kernel run when no routing falls in it, else yields it. With async scheduling the gap is what the
    step before it leaves (rules/engine_loop.overlapped_gap), on every path; preempted requests count as waiting in
    it (`pressure` as above)."""
    check_random_cluster(mode, policy, replicas, hetero, router, key, max_out, arrivals, rate, seqs, prefill,
                         block_size, overhead, n, segment, seed, pressure=pressure, scheduler="vllm-v1",
                         async_scheduling=async_sched)


@pytest.mark.parametrize("loop", [True, False])
@pytest.mark.parametrize("mode,policy", [("ar", "fixed"), ("sd", "fixed"), ("sd", "adaptive-k"), ("sd", "ucb"),
                                         ("psd", "fixed")])
@pytest.mark.parametrize("arrivals", ["poisson", "burst", "closed"])
def test_replicas_under_kv_pressure_preempt_on_the_compiled_path_as_on_the_step_path(loop, mode, policy, arrivals):
    """KV for one of each replica's four largest requests: the replicas preempt by recompute (the newest running
    requests back to the waiting queue's front), and the cluster loop (`loop`) or the per-replica path gives the step
    path's tables; the router reads the preempted prompts as queued KV (least_kv); a closed loop's 12 clients each
    submit their next request when a step finishes theirs, a readmitted request's too."""
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
def test_replicas_whose_steps_end_at_the_same_instants_as_arrivals_equal_the_step_path(seed, router, replicas, mode,
                                                                                     closed, scheduler, loop):
    """A step price of one tick (a power of two: every sum exact) and arrivals on ticks: replicas' step ends, vLLM
    V1's gap ends and routings fall on the same instants, where SimPy's order among them (by when each was
    scheduled) decides what the router sees; the replica's process waits through its last events of the step path
    so that order is kept (with async scheduling the one-tick gap hides behind the one-tick step: no gap event; the
    two examples are runs where a replica's process once waited at a hidden gap's end and the router saw it late).
    `loop`: the compiled cluster loop, else each replica's own process (compiled_cluster.ENABLED off)."""
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
        fast = cluster_sim(True, traces, wl, **kw)
    finally:
        compiled_cluster.ENABLED = True
    assert (fast.compiled is not None) == loop
    assert_same_cluster(fast.simulate(), cluster_sim(False, traces, wl, **kw).simulate())


@pytest.mark.parametrize("scheduler", ["draftsim", "vllm-v1"])
def test_a_replica_runs_many_steps_per_kernel_call_when_arrivals_are_sparse(scheduler):
    """Each kernel call ends at an external event: a routing (each arrival ends at most one run per replica) or the
    replica going idle (at most once per request routed to it); buffers never fill here. Sparse arrivals with long
    outputs: tens of steps per request, so the calls stay at those bounds, far below one per step; the tables
    still equal the step path's."""
    traces = iid_traces(10, seed=3, out=(150, 200))
    wl = workload(traces, 12, rate=4.0, seed=3)
    kw = dict(mode="ar", policy="fixed", replicas=2, router={"name": "least_outstanding"},
              srv=server(max_num_seqs=4, scheduler=scheduler, step_overhead_s=1e-3), seed=3)
    fast, slow = cluster_sim(True, traces, wl, **kw), cluster_sim(False, traces, wl, **kw)
    a, b = fast.simulate(), slow.simulate()
    assert_same_cluster(a, b)
    n = len(wl)
    for rep, res in zip(fast.replicas, a.replica_results):
        calls, steps = rep.server.compiled.kernel_calls, res.extras["steps"]
        assert calls <= n + res.extras["routed_requests"]
        assert steps >= 150 * res.extras["routed_requests"] // 4  # AR: one token per step, 4 at a time at most
        assert calls < 0.1 * steps, (calls, steps)


def test_a_replica_under_vllm_v1_takes_the_compiled_path():
    traces = iid_traces(6, seed=2, out=(1, 30))
    sim = cluster_sim(True, traces, workload(traces, 8, seed=2), mode="sd", policy="fixed", replicas=2,
                      router={"name": "round_robin"}, srv=server(scheduler="vllm-v1", step_overhead_s=0.001), seed=2)
    for rep in sim.replicas:
        assert rep.server.compiled is not None, rep.server.engine_path_reason


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
@given(seed=st.integers(0, 1000), replicas=st.integers(1, 3), prefill=st.sampled_from(["mixed", "separate"]),
       loop=st.booleans())
def test_closed_loop_clients_get_their_next_request_in_the_step_paths_finish_order(seed, replicas, prefill, loop):
    """A step that finishes decoding requests and one-token requests (finished by their prefill) tells the clients
    in StepOutcome's order, on the cluster loop (`loop`) or the per-replica path; client affinity shows which client
    got which request."""
    traces = iid_traces(10, seed=seed, out=(1, 4), prompt=(5, 40))
    wl = workload(traces, 40, rate=None, clients=6, think=0.0, seed=seed)
    kw = dict(mode="sd", policy="fixed", replicas=replicas, router={"name": "affinity", "key": "client"},
              srv=server(max_num_seqs=4, prefill=prefill), seed=seed)
    compiled_cluster.ENABLED = loop
    try:
        a, b = cluster_sim(True, traces, wl, **kw), cluster_sim(False, traces, wl, **kw)
        assert_same_cluster(a.simulate(), b.simulate())
    finally:
        compiled_cluster.ENABLED = True
    assert (a.source.client_of == b.source.client_of).all()


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
    sim = cluster_sim(True, t, wl, mode="sd", policy="adaptive-k", replicas=3, router={{"name": router}},
                      srv=server(max_num_seqs=3), seed=4)
    res = sim.simulate()
    out.append(([r.extras["engine_path"] for r in res.replica_results], res.requests, res.steps, res.itl.tobytes()))
pickle.dump(out, open(OUT, "wb"))
"""
    for a, b in tables_jit_on_and_off(code, tmp_path):
        assert set(a[0]) == set(b[0]) == {"compiled"}
        assert_same_run_tables(a, b)


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
def test_a_request_routed_exactly_at_a_steps_end_joins_the_next_step_on_every_path(mode):
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
    for compiled, loop in ((False, True), (True, False), (True, True)):
        compiled_cluster.ENABLED = loop
        try:
            sim = cluster_sim(compiled, traces, wl, mode=mode, policy="fixed", replicas=1,
                              router={"name": "round_robin"}, srv=srv, seed=0)
            req = sim.simulate().requests.set_index("request_id")
        finally:
            compiled_cluster.ENABLED = True
        assert (sim.compiled is not None) == (compiled and loop)
        assert (req.loc["r0", "first_token_time"], req.loc["r1", "first_scheduled_time"],
                req.loc["r1", "first_token_time"]) == (0.25, 0.25, first_token), (compiled, loop)
