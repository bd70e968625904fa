"""Clusters: replicas behind a router in one Environment (simulator/cluster/simulation.py) built by the scenario builder.

Invariants (every request served exactly once by one replica, round robin within one request), one replica
equal to the single server byte for byte, least-outstanding vs round robin under skewed lengths (measured),
determinism, heterogeneous replicas and their GPU counts, and no request left waiting on an idle replica.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.acceptance_table import AcceptanceTable
from simulator.cluster.simulation import ClusterResult
from simulator.cluster.config import ClusterSpec
from simulator.measure.metrics import summarize
from simulator.scenario import SimInputs, make_cluster_scenario, make_scenario, simulation
from simulator.server_config import RunSpec, ServerConfig
from simulator.engine.workload_arrays import EngineWorkload
from tests.simulator.engine.engine_fixtures import iid_traces, workload

DRAFTERS = {"d": {"kind": "constant", "seconds": 0.002}}
PROFILE = {"kind": "linear", "coefficients": {"kv_tokens": 1e-7, "batched_tokens": 2e-5, "const": 5e-3}}
SLO = {"ttft_s": 1.0, "tpot_s": 0.05, "e2e_s": None}


def server(**kw) -> ServerConfig:
    doc = {"target_profile": PROFILE, "kv_capacity_tokens": 200_000, "max_num_seqs": 8,
           "max_num_batched_tokens": 4096, **kw}
    return ServerConfig.model_validate(doc)


def run_spec(mode: str, k: int = 3, **kw) -> RunSpec:
    policy = None if mode == "ar" else {"name": "fixed", "drafter": "d", "k": k}
    return RunSpec(name=mode, mode=mode, policy=policy, **kw)


def simulate_cluster(traces, wl, mode="sd", replicas=2, router="round_robin", seed=0, srv=None, **router_kw):
    spec = ClusterSpec(replicas=replicas, router={"name": router, **router_kw})
    sc = make_cluster_scenario(run_spec(mode), srv or server(), DRAFTERS, seed, spec)
    sim = simulation(sc, SimInputs(wl, AcceptanceTable.from_traces(traces, ["d"]), traces))
    return sim, sim.simulate(), sc


def simulate_single(traces, wl, mode="sd", seed=0, srv=None):
    sc = make_scenario(run_spec(mode), srv or server(), DRAFTERS, seed)
    return simulation(sc, SimInputs(wl, AcceptanceTable.from_traces(traces, ["d"]), traces)).simulate(), sc


def summary(res, sc) -> dict:
    return summarize(res.requests, res.steps, res.itl, slo=SLO, num_target_gpus=sc.num_target_gpus,
                     num_draft_gpus=sc.num_draft_gpus, extras=res.extras)


@settings(max_examples=20, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "psd"]), replicas=st.integers(1, 4),
       router=st.sampled_from(["round_robin", "least_outstanding", "least_kv", "affinity"]),
       rate=st.sampled_from([None, 30.0, 300.0]), clients=st.sampled_from([0, 3]),
       think=st.sampled_from([0.0, 0.05]), seqs=st.integers(1, 6),
       prefill=st.sampled_from(["mixed", "separate", "chunked", "vllm-v1"]), seed=st.integers(0, 1000))
def test_every_request_is_served_exactly_once_by_exactly_one_replica(mode, replicas, router, rate, clients, think,
                                                                     seqs, prefill, seed):
    traces = iid_traces(10, seed=seed, out=(1, 60))
    wl = workload(traces, 25, rate=rate if not clients else None, clients=clients, think=think, seed=seed)
    # draftsim's three prefill modes, and vLLM V1's scheduler (the default) with a budget that cuts decodes
    sched = {"vllm-v1": {"max_num_batched_tokens": 64},
             "chunked": {"scheduler": "draftsim", "chunked_prefill": True, "max_num_batched_tokens": 64}}.get(
        prefill, {"scheduler": "draftsim", "prefill": prefill})
    sim, res, _ = simulate_cluster(traces, wl, mode=mode, replicas=replicas, router=router, seed=seed,
                                   srv=server(max_num_seqs=seqs, **sched))
    rq = res.requests
    assert len(rq) == 25 and list(rq.request_id) == wl.request_ids  # none lost, duplicated or reordered
    assert rq.finish_time.notna().all() and rq.replica.between(0, replicas - 1).all()
    for j, rep in enumerate(sim.replicas):
        own = rep.server.result().requests  # the replica's own view of the whole workload
        served = own.finish_time.notna().to_numpy()
        arrived = own.arrival_time.notna().to_numpy()
        routed_here = (rq.replica == j).to_numpy()
        assert (served == routed_here).all() and (arrived == routed_here).all()
        assert res.extras["routed_requests"][j] == int(routed_here.sum())
        mine = rq[rq.replica == j].drop(columns="replica").reset_index(drop=True)
        assert mine.equals(own[routed_here].reset_index(drop=True))
    assert sum(res.extras["routed_requests"]) == 25
    steps_per_replica = res.steps.groupby("replica")["step"].nunique()
    assert int(steps_per_replica.sum()) == res.extras["steps"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), replicas=st.integers(1, 5), rate=st.sampled_from([None, 5.0, 500.0]),
       seed=st.integers(0, 1000))
def test_round_robin_over_identical_replicas_differs_by_at_most_one_request(n, replicas, rate, seed):
    traces = iid_traces(8, seed=seed, out=(1, 30))
    _, res, _ = simulate_cluster(traces, workload(traces, n, rate=rate, seed=seed), mode="ar", replicas=replicas)
    counts = np.bincount(res.requests.replica.to_numpy(), minlength=replicas)
    assert counts.max() - counts.min() <= 1
    # round robin: request i (in arrival order) on replica i mod N
    assert (res.requests.replica.to_numpy() == np.arange(n) % replicas).all()


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
@pytest.mark.parametrize("arrivals", ["open", "closed", "closed_think", "burst"])
def test_one_replica_through_the_cluster_equals_the_single_server_byte_for_byte(mode, arrivals):
    traces = iid_traces(30, seed=5, prompt=(5, 400), out=(1, 150))
    kw = {"open": dict(rate=40.0), "closed": dict(rate=None, clients=6), "closed_think": dict(rate=None, clients=6,
          think=0.037), "burst": dict(rate=None)}[arrivals]
    wl = workload(traces, 60, seed=5, **kw)
    srv = server(max_num_seqs=8, kv_capacity_tokens=2000)  # small KV: preemptions happen
    single, sc1 = simulate_single(traces, wl, mode=mode, seed=11, srv=srv)
    _, clustered, scn = simulate_cluster(traces, wl, mode=mode, replicas=1, router="least_kv", seed=11, srv=srv)
    assert (clustered.requests.replica == 0).all() and (clustered.steps.replica == 0).all()
    assert clustered.requests.drop(columns="replica").equals(single.requests)
    assert clustered.steps.drop(columns="replica").equals(single.steps)
    assert clustered.itl.tobytes() == single.itl.tobytes()
    assert summary(clustered, scn) == summary(single, sc1)
    if arrivals == "burst":  # the comparison covers preemption by recompute too
        assert single.requests.preemptions.sum() > 0


def skewed_workload(n: int, rate: float, seed: int) -> tuple[list, EngineWorkload]:
    """Open-loop Poisson arrivals; 10% of requests have 20x longer outputs (heavy skew in lengths)."""
    rng = np.random.default_rng(seed)
    out = np.where(rng.random(n) < 0.1, rng.integers(400, 800, n), rng.integers(10, 40, n))
    prompt = rng.integers(20, 200, n)
    from traces.bundle import DrafterTrace, RequestTrace

    traces = [RequestTrace(f"t{i}", int(prompt[i]), int(out[i]), {"d": DrafterTrace(np.ones(int(out[i]), np.int32))})
              for i in range(n)]
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    wl = EngineWorkload([f"r{i}" for i in range(n)], np.arange(n), arrival, prompt, out, ["c"] * n)
    return traces, wl


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_least_outstanding_balances_better_than_round_robin_under_skewed_lengths(seed):
    # 4 replicas of 4 sequences each, loaded near capacity, so a replica stuck with long requests builds a queue
    traces, wl = skewed_workload(400, rate=20.0, seed=seed)
    srv = server(max_num_seqs=4)
    out = {}
    for router in ("round_robin", "least_outstanding"):
        _, res, sc = simulate_cluster(traces, wl, mode="ar", replicas=4, router=router, srv=srv)
        s = summary(res, sc)
        # imbalance: how unevenly the output tokens (the work) landed on the replicas
        work = res.requests.groupby("replica")["output_len"].sum().to_numpy()
        out[router] = (s["queue_delay_mean_s"], s["ttft_p99_s"], work.max() / work.mean())
    rr, lor = out["round_robin"], out["least_outstanding"]
    assert lor[0] < rr[0] and lor[1] < rr[1], out
    assert lor[2] < rr[2], out


def test_same_seed_same_cluster_summary_and_the_seed_matters():
    traces = iid_traces(20, seed=3, out=(5, 80), drafters=("d", "e"))
    wl = workload(traces, 80, rate=60.0, seed=3)
    pol = {"name": "thompson", "drafters": ["d", "e"], "k": 3}
    drafters = {**DRAFTERS, "e": {"kind": "constant", "seconds": 0.001}}
    table = AcceptanceTable.from_traces(traces, ["d", "e"])
    spec = ClusterSpec(replicas=3, router={"name": "least_outstanding"})
    runs = []
    for seed in (7, 7, 8):
        sc = make_cluster_scenario(RunSpec(name="ts", mode="sd", policy=pol), server(), drafters, seed, spec)
        res = simulation(sc, SimInputs(wl, table, traces)).simulate()
        runs.append((summary(res, sc), res.requests))
    assert runs[0][0] == runs[1][0] and runs[0][1].equals(runs[1][1])
    assert runs[0][0] != runs[2][0]  # the replicas' policies really draw from the run's seed


def test_heterogeneous_replicas_have_their_own_limits_kv_and_gpus():
    traces = iid_traces(20, seed=4, out=(5, 80))
    wl = workload(traces, 60, rate=80.0, seed=4)
    spec = ClusterSpec(replicas=[{}, {"max_num_seqs": 2, "kv_capacity_tokens": 50_000, "num_target_gpus": 2}],
                       router={"name": "least_kv"})
    sc = make_cluster_scenario(run_spec("psd"), server(), DRAFTERS, 0, spec)
    res = simulation(sc, SimInputs(wl, AcceptanceTable.from_traces(traces, ["d"]), traces)).simulate()
    a, b = (r.extras for r in res.replica_results)
    assert (a["max_num_seqs"], b["max_num_seqs"]) == (16, 4)  # PSD admits 2m
    assert (a["kv_total_blocks"], b["kv_total_blocks"]) == (200_000 // 16, 50_000 // 16)
    assert res.extras["kv_total_blocks"] == a["kv_total_blocks"] + b["kv_total_blocks"]
    assert (sc.num_target_gpus, sc.num_draft_gpus) == (3, 2)  # PSD: one draft GPU per replica
    s = summary(res, sc)
    assert s["num_gpus"] == 5
    assert res.steps.groupby("replica")["num_seqs"].max().to_dict()[1] <= 4
    per = res.replica_summaries(SLO)
    assert [p["num_gpus"] for p in per] == [2, 3]
    assert sum(p["num_requests"] for p in per) == s["num_requests"] == 60
    assert sum(p["output_tokens"] for p in per) == s["output_tokens"]
    assert isinstance(res, ClusterResult)


def test_affinity_keeps_a_key_on_one_replica_while_it_has_room_and_overflows_otherwise():
    traces = iid_traces(6, seed=9, out=(5, 40))
    n = 60
    wl = workload(traces, n, rate=4.0, seed=9)
    wl.categories = [f"cat{i % 3}" for i in range(n)]
    _, res, _ = simulate_cluster(traces, wl, mode="ar", replicas=3, router="affinity", key="category")
    assert (res.requests.groupby("category")["replica"].nunique() == 1).all()  # light load: always room
    assert res.extras["affinity_overflows"] == 0
    # a burst of one hot key, far beyond its replica's room, spills over to the least-loaded replicas
    burst = workload(traces, n, rate=None, seed=9)
    burst.categories = ["hot" if i % 5 else f"cold{i}" for i in range(n)]
    _, res, _ = simulate_cluster(traces, burst, mode="ar", replicas=3, router="affinity", key="category",
                                 max_outstanding=4)
    hot = res.requests[res.requests.category == "hot"]
    home = hot.replica.iloc[0]
    assert res.extras["affinity_overflows"] == int((hot.replica != home).sum()) > 0
    assert int((hot.replica == home).sum()) >= 4  # it filled its home first


def test_affinity_by_client_keeps_each_session_on_its_replica():
    traces = iid_traces(6, seed=10, out=(5, 40))
    wl = workload(traces, 40, rate=None, clients=4, think=0.2, seed=10)
    sim, res, _ = simulate_cluster(traces, wl, mode="sd", replicas=2, router="affinity", key="client")
    client = sim.source.client_of
    by_client = pd.Series(res.requests.replica.to_numpy()).groupby(client).nunique()
    assert (by_client == 1).all() and len(by_client) == 4


def test_client_affinity_needs_a_closed_loop():
    traces = iid_traces(4, seed=1)
    with pytest.raises(ValueError, match=r"cluster.router.key: 'client' needs a closed-loop workload"):
        simulate_cluster(traces, workload(traces, 8), replicas=2, router="affinity", key="client")


@settings(max_examples=15, deadline=None)
@given(replicas=st.integers(2, 4), think=st.sampled_from([0.0, 0.013, 0.21]), clients=st.integers(2, 8),
       router=st.sampled_from(["round_robin", "least_outstanding", "least_kv"]), seed=st.integers(0, 1000))
def test_no_request_waits_on_an_idle_replica(replicas, think, clients, router, seed):
    """With room to spare, a routed request starts at the next step boundary of its replica: its queue delay
    is at most the longest step on that replica (a replica idle with no known next arrival (a closed loop
    whose clients are all busy) is woken by the push)."""
    traces = iid_traces(8, seed=seed, out=(2, 40), prompt=(5, 50))
    wl = workload(traces, 40, rate=None, clients=clients, think=think, seed=seed)
    _, res, _ = simulate_cluster(traces, wl, mode="sd", replicas=replicas, router=router,
                                 srv=server(max_num_seqs=64))
    spans = res.steps.groupby(["replica", "step"]).agg(start=("start", "min"), end=("end", "max"))
    longest = (spans.end - spans.start).groupby(level="replica").max()
    rq = res.requests
    assert (rq.queue_delay.to_numpy() <= longest.loc[rq.replica].to_numpy() + 1e-12).all()
