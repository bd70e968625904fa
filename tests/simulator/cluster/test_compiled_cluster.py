"""The compiled cluster loop (simulator/cluster/compiled_cluster.py): a cluster (open or closed loop) routed and stepped
in one compiled call gives the per-replica path's tables bit for bit (each replica of which
tests/simulator/engine/test_compiled_replica.py holds to a single server told its arrivals), returns to Python only at
full buffers, hook checks and the end, and names why a cluster keeps the per-replica path."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster import compiled_cluster
from simulator.engine import compiled_run
from tests.simulator.engine.engine_fixtures import tight_kv
from tests.simulator.engine.test_compiled_replica import (assert_each_replica_runs_as_a_server_told_its_arrivals,
                                                          assert_same_cluster, cluster_sim, iid_traces, server,
                                                          workload)


def _pair(traces, wl, segment=1 << 16, **kw):
    """The same cluster on the cluster loop and on the per-replica path: (sim, result) each."""
    rows, compiled_run.SEGMENT_ROWS = compiled_run.SEGMENT_ROWS, segment
    try:
        fast = cluster_sim(traces, wl, **kw)
        compiled_cluster.ENABLED = False
        try:
            slow = cluster_sim(traces, wl, **kw)
        finally:
            compiled_cluster.ENABLED = True
        a, b = fast.simulate(), slow.simulate()
    finally:
        compiled_run.SEGMENT_ROWS = rows
    return (fast, a), (slow, b)


@settings(max_examples=30, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "psd"]),
       policy=st.sampled_from(["fixed", "adaptive-k", "ucb", "discounted-ucb", "sliding-window-ucb",
                               "greedy-oracle", "min-time-oracle"]),
       replicas=st.integers(1, 4), router=st.sampled_from(["round_robin", "least_outstanding", "least_kv",
                                                             "affinity"]),
       key=st.sampled_from(["category", "trace", "client"]),
       arrivals=st.sampled_from(["poisson", "burst", "closed", "closed_think"]), rate=st.sampled_from([30.0, 300.0]),
       seqs=st.integers(1, 6), scheduler=st.sampled_from(["draftsim", "vllm-v1"]),
       overhead=st.sampled_from([0.0, 1e-3]), n=st.integers(1, 40), segment=st.sampled_from([4, 1 << 16]),
       hetero=st.booleans(), seed=st.integers(0, 1000), pressure=st.sampled_from([0, 0, 1, 3]))
def test_the_cluster_loop_equals_the_per_replica_path(mode, policy, replicas, router, key, arrivals, rate, seqs,
                                                      scheduler, overhead, n, segment, hetero, seed, pressure):
    """Random clusters: a closed loop's finishes submit requests at their step's end and wake the router (think time
    0: a submission routed at that same instant), burst arrivals route many requests at one instant; `pressure`: KV
    for fewer than max_num_seqs of the largest requests (replicas preempt)."""
    traces = iid_traces(10, seed=seed, out=(1, 60), drafters=("d", "e"))
    closed = arrivals.startswith("closed")
    wl = workload(traces, n, rate=rate if arrivals == "poisson" else None, clients=3 if closed else 0,
                  think=0.013 if arrivals == "closed_think" else 0.0, seed=seed)
    wl.categories = [f"c{i % 3}" for i in range(n)]
    if mode == "psd":  # the fixed policy: the one the PSD kernel runs
        policy = "fixed"
    if key == "client" and not closed:
        key = "trace"
    spec = {"name": router, **({"key": key} if router == "affinity" else {})}
    reps = [{"max_num_seqs": 1 + (seqs + j) % 5} for j in range(replicas)] if hetero else replicas
    held = 2 * seqs if mode == "psd" else seqs  # PSD: two sub-batches of max_num_seqs
    kv = {"kv_capacity_tokens": tight_kv(wl, 4, 16, held, 0, 4, pressure)} if pressure else {}
    kw = dict(mode=mode, policy=policy, replicas=reps, router=spec, seed=seed,
              srv=server(max_num_seqs=seqs, scheduler=scheduler, step_overhead_s=overhead, **kv))
    (fast, a), (slow, b) = _pair(traces, wl, segment, **kw)
    assert fast.cluster_path_reason is None and fast.compiled is not None
    assert slow.compiled is None and "switched off" in slow.cluster_path_reason
    assert_same_cluster(a, b)
    if segment > 4:  # no buffer filled: the whole run in one call
        assert fast.compiled.calls == 1


@settings(max_examples=6, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "psd"]), seed=st.integers(0, 1000))
def test_replicas_priced_by_a_table_with_degenerate_simplices_share_the_cluster_loop(mode, seed):
    """A table profile whose triangulation holds degenerate simplices (NaN rows in TableProfile.data, as the shipped
    tree-verify table's 4) is the same on every replica: the cluster loop runs it, with the per-replica path's
    tables."""
    import numpy as np

    from simulator.costs.latency import resolve_profile

    name = "smollm2-135m-instruct-cpu-tree-table"
    assert np.isnan(resolve_profile(name).data).any()
    traces = iid_traces(10, seed=seed, out=(1, 40))
    wl = workload(traces, 24, rate=30.0, seed=seed)
    (fast, a), (slow, b) = _pair(traces, wl, mode=mode, policy="fixed", replicas=2,
                                 router={"name": "least_outstanding"}, seed=seed,
                                 srv=server(max_num_seqs=4, target_profile=name))
    assert fast.cluster_path_reason is None, fast.cluster_path_reason
    assert_same_cluster(a, b)


def test_the_per_replica_path_still_runs_many_steps_per_kernel_call_when_arrivals_are_sparse():
    """With the loop switched off, each replica's kernel call ends at a routing or at the replica going idle."""
    traces = iid_traces(10, seed=3, out=(150, 200))
    wl = workload(traces, 12, rate=4.0, seed=3)
    (fast, a), (slow, b) = _pair(traces, wl, mode="ar", policy="fixed", replicas=2,
                                 router={"name": "least_outstanding"}, seed=3,
                                 srv=server(max_num_seqs=4, scheduler="vllm-v1", step_overhead_s=1e-3))
    assert_same_cluster(a, b)
    for rep, res in zip(slow.replicas, b.replica_results):
        calls, steps = rep.server.compiled.kernel_calls, res.extras["steps"]
        assert calls <= len(wl) + res.extras["routed_requests"] and calls < 0.1 * steps
    assert fast.compiled.calls == 1 and all(rep.server.compiled.kernel_calls == 0 for rep in fast.replicas)


def test_the_early_stop_returns_to_python_only_at_its_checks():
    from simulator.measure.early_stop import StopMonitor, run_until_decided

    traces = iid_traces(10, seed=7, out=(1, 60))
    wl = workload(traces, 40, rate=120.0, seed=7)
    seen = []

    def decide(p):
        seen.append(p.finished)

    monitor = StopMonitor(None, None, len(wl), decide, every=5, check_from=5)
    sim = cluster_sim(traces, wl, mode="sd", policy="fixed", replicas=3, router={"name": "least_kv"},
                      srv=server(max_num_seqs=4), seed=2, on_step=monitor)
    assert run_until_decided(sim, monitor.bind(sim)) is None
    assert sim.compiled is not None
    assert seen and all(f >= 5 for f in seen) and sorted(seen) == seen
    assert sim.compiled.calls == len(seen) + 1  # one return per check, one at the last finish


def test_a_cluster_of_bandits_that_draw_keeps_the_per_replica_path_and_says_why():
    """Each replica's Thompson or EXP3 policy draws from its own generator, which the loop's shared records do not
    hold: the replicas keep their compiled per-replica runs, each as a server told its arrivals."""
    traces = iid_traces(6, seed=1, out=(1, 30), drafters=("d", "e"))
    wl = workload(traces, 24, rate=80.0, seed=1)
    for policy in ("thompson", "exp3"):
        sim = cluster_sim(traces, wl, mode="sd", policy=policy, replicas=2, router={"name": "round_robin"},
                          srv=server(), seed=1)
        assert sim.compiled is None and "draws from its generator" in sim.cluster_path_reason
        res = sim.simulate()
        assert set(res.steps.drafters) >= {"d", "e"}  # both arms played
        assert_each_replica_runs_as_a_server_told_its_arrivals(res, traces, wl, mode="sd", policy=policy, replicas=2,
                                                               router={"name": "round_robin"}, srv=server(), seed=1)


def test_a_cluster_of_plug_ins_keeps_the_per_replica_path_and_says_why():
    """Each replica's plug-in is asked in Python at each of its steps, which the loop's one compiled call does not
    do: the replicas keep their compiled per-replica runs, each as a server told its arrivals."""
    traces = iid_traces(6, seed=1, out=(1, 30), drafters=("d", "e"))
    wl = workload(traces, 24, rate=80.0, seed=1)
    kw = dict(mode="sd", policy="plug-in-adaptive-k", replicas=2, router={"name": "least_kv"}, srv=server(), seed=1)
    sim = cluster_sim(traces, wl, **kw)
    assert sim.compiled is None and "a policy asked in Python" in sim.cluster_path_reason
    res = sim.simulate()
    assert (res.steps.proposed_tokens > 0).any()
    assert_each_replica_runs_as_a_server_told_its_arrivals(res, traces, wl, **kw)


def test_a_cluster_the_loop_cannot_run_keeps_the_per_replica_path_and_says_why():
    traces = iid_traces(6, seed=1, out=(1, 30))
    wl = workload(traces, 12, seed=1)
    sim = cluster_sim(traces, wl, mode="sd", policy="fixed", replicas=2, router={"name": "round_robin"},
                      srv=server(), seed=1, on_step=lambda finished: None)
    assert sim.compiled is None and "step hook without next_check" in sim.cluster_path_reason
    assert sim.simulate().requests["finish_time"].notna().all()
