"""The same policy objects run inside the SimPy engine (batched views, sampled verification, oracles)."""
import numpy as np
import pytest

from policies.registry import make_policy
from simulator.acceptance_table import AcceptanceTable
from simulator.draft_cost import DraftCost
from simulator.engine import ServerSimulation
from simulator.server_config import RunSpec, constant_profile
from simulator.workload_arrays import EngineWorkload
from tests.policies.test_ground_truth_hidden import online_specs, with_proposal_len
from traces.pool import PoolSpec, make_pool_bundle, pool_drafters

SPEC = PoolSpec(num_requests=12, output_len=(60, 120), seed=21)
DRAFTERS = pool_drafters(SPEC)


def simulate(policy_spec, temperature, seed=0):
    bundle = make_pool_bundle(SPEC)
    reqs = [with_proposal_len(r) for r in bundle.requests]
    n = len(reqs)
    wl = EngineWorkload(
        request_ids=[r.id for r in reqs], trace_index=np.arange(n), arrival=np.linspace(0, 0.05, n),
        prompt_len=np.array([r.prompt_len for r in reqs]), output_len=np.array([r.output_len for r in reqs]),
        categories=[r.category for r in reqs])
    policy = make_policy(policy_spec)
    sim = ServerSimulation(
        run=RunSpec(name="t", mode="sd", policy=policy_spec), target=constant_profile(0.01), workload=wl,
        table=AcceptanceTable.from_traces(reqs, DRAFTERS),
        draft_costs={d: DraftCost("constant", seconds=0.002) for d in DRAFTERS}, policy=policy,
        kv_capacity_tokens=200_000, max_num_seqs=8, max_num_batched_tokens=4096, temperature=temperature,
        seed=seed, ground_truth={r.id: r for r in reqs})
    return sim.simulate(), reqs


@pytest.mark.parametrize("name", sorted(online_specs(DRAFTERS)))
def test_online_policy_serves_every_request(name):
    spec = {"name": name, **online_specs(DRAFTERS)[name]}
    res, reqs = simulate(spec, temperature=1.0)
    df = res.requests
    assert len(df) == len(reqs) and df["finish_time"].notna().all()
    assert (df["accepted_tokens"] <= df["proposed_tokens"]).all()
    used = res.extras["drafter_usage"]
    assert sum(used.values()) == df["decode_steps"].sum()


def test_bandit_in_engine_prefers_each_requests_specialist():
    spec = {"name": "metasd-ucb", "drafters": DRAFTERS, "beta": 0.1, "seed": 0}
    res, _ = simulate(spec, temperature=1.0)
    ucb_steps = res.requests["decode_steps"].sum()
    rnd, _ = simulate({"name": "random-drafter", "drafters": DRAFTERS, "seed": 0}, temperature=1.0)
    assert ucb_steps < rnd.requests["decode_steps"].sum()


def test_oracle_k_in_engine_never_has_a_rejected_token():
    res, _ = simulate({"name": "oracle-k", "drafter": DRAFTERS[0]}, temperature=0.0)
    df = res.requests
    assert (df["accepted_tokens"] == df["proposed_tokens"]).all()
    assert df["proposed_tokens"].sum() > 0


def test_engine_refuses_oracles_in_live_mode():
    spec = {"name": "oracle-k", "drafter": DRAFTERS[0]}
    with pytest.raises(ValueError, match="live"):
        bundle = make_pool_bundle(SPEC)
        reqs = bundle.requests
        wl = EngineWorkload([r.id for r in reqs], np.arange(len(reqs)), np.zeros(len(reqs)),
                            np.array([r.prompt_len for r in reqs]), np.array([r.output_len for r in reqs]),
                            [r.category for r in reqs])
        ServerSimulation(run=RunSpec(name="t", mode="sd", policy=spec), target=constant_profile(0.01), workload=wl,
                         table=AcceptanceTable.from_traces(reqs, DRAFTERS), draft_costs={}, policy=make_policy(spec),
                         kv_capacity_tokens=200_000, max_num_seqs=8, max_num_batched_tokens=4096,
                         ground_truth={r.id: r for r in reqs}, live=True)
