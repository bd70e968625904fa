"""One SeedSequence tree per experiment (simulator/seeds.py): a child per consumer, independent of spawn order;
the policy's stream is not the sampled-verification stream; the pool generator's is not the workload sampler's."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config import load_config
from experiments.run import prepare
from policies.registry import make_policy
from simulator.engine.simulation import ServerSimulation
from simulator.seeds import ExperimentSeeds, ServerSeeds, child, replica_seeds
from tests.simulator.engine.engine_fixtures import DraftCost, iid_traces, inputs, scenario, workload


@given(seed=st.integers(0, 2**63 - 1), i=st.integers(0, 20))
@settings(max_examples=30, deadline=None)
def test_child_is_what_spawn_gives_whatever_was_spawned_before(seed, i):
    root = np.random.SeedSequence(seed)
    root.spawn(3)  # spawning moves the parent's counter; child() does not depend on it
    want = np.random.SeedSequence(seed).spawn(i + 1)[i].generate_state(4)
    assert (child(root, i).generate_state(4) == want).all()


@given(seed=st.integers(0, 2**63 - 1))
@settings(max_examples=30, deadline=None)
def test_every_consumer_has_its_own_stream(seed):
    ex = ExperimentSeeds.of(seed)
    run0 = replica_seeds(ex.run(0), 0)
    firsts = [ex.pool, ex.workload, run0.policy, ServerSeeds(ex.run(1)).policy,
              int(run0.verification_rng().integers(2**32)), replica_seeds(ex.run(0), 1).policy]
    assert len(set(firsts)) == len(firsts)


def test_the_policy_and_the_verification_draw_from_different_streams():
    """Before the seed tree both were default_rng(run_seed): the exploration draws were the coin flips."""
    traces = iid_traces(4, seed=1, drafters=("d", "e"))
    pol = make_policy({"name": "random-drafter", "drafters": ["d", "e"]}, seed=ServerSeeds.of(9).policy)
    sc = scenario("sd", pol, costs={"d": DraftCost("constant"), "e": DraftCost("constant")}, seed=9)
    srv = ServerSimulation(sc, inputs(traces, workload(traces, 4), drafters=("d", "e"))).server
    a, b = pol.rng.bit_generator.state["state"], srv.drafting.rng.bit_generator.state["state"]
    assert a != b
    assert pol.rng.random(16).tolist() != srv.drafting.rng.random(16).tolist()


def _config(runs):
    return {"name": "seeds", "seed": 4, "traces": "builtin:default",
            "workload": {"num_requests": 20, "arrival": {"kind": "poisson", "rate": 5.0}},
            "server": {"target_profile": "llama3.1-8b-h100-specbench", "kv_capacity_tokens": 430000},
            "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"},
                         "ngram": {"kind": "fraction_of_verify", "fraction": 0.005875}},
            "runs": runs}


def test_adding_a_run_does_not_shift_the_streams_of_the_others():
    rnd = {"name": "random-drafter", "drafters": ["eagle3", "ngram"]}
    runs = [{"name": "a", "mode": "sd", "policy": rnd}, {"name": "b", "mode": "sd", "policy": rnd}]
    two = prepare(load_config(_config(runs)))
    three = prepare(load_config(_config(runs + [{"name": "c", "mode": "sd", "policy": rnd}])))
    for x, y in zip(two, three):
        assert x.policy.rng.bit_generator.state == y.policy.rng.bit_generator.state
    assert two[0].policy.rng.bit_generator.state != two[1].policy.rng.bit_generator.state
