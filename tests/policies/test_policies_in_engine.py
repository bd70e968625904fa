"""The same policy objects run inside the SimPy engine via run_experiment (batched views, sampling, oracles)."""
import pytest

from experiments.run import run_experiment
from tests.policies.test_ground_truth_hidden import online_specs, with_proposal_len
from traces.bundle import TraceBundle, save_bundle
from traces.pool import PoolSpec, make_pool_bundle, pool_drafters

SPEC = PoolSpec(num_requests=12, output_len=(60, 120), seed=21)
DRAFTERS = pool_drafters(SPEC)


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    b = make_pool_bundle(SPEC)
    b = TraceBundle(b.meta, [with_proposal_len(r) for r in b.requests])
    return str(save_bundle(b, tmp_path_factory.mktemp("pool") / "bundle"))


def config(pool_dir, runs, temperature):
    return {
        "name": "policies-in-engine", "seed": 0, "traces": pool_dir,
        "workload": {"arrival": {"kind": "closed_loop", "clients": 4, "think_time": 0.0}},
        "server": {"target_profile": {"kind": "linear", "coefficients": {"const": 0.01}},
                   "max_num_seqs": 8, "max_num_batched_tokens": 4096, "kv_capacity_tokens": 200000,
                   "verification": "sampled" if temperature > 0 else "greedy"},
        "drafters": {d: {"kind": "constant", "seconds": 0.002} for d in DRAFTERS},
        "runs": runs,
    }


def test_every_online_policy_serves_every_request(pool_dir):
    runs = [{"name": n, "mode": "sd", "policy": {"name": n, **s}} for n, s in online_specs(DRAFTERS).items()]
    res = run_experiment(config(pool_dir, runs, 1.0))
    for name in online_specs(DRAFTERS):
        df = res.requests[res.requests["run"] == name]
        assert len(df) == SPEC.num_requests and df["finish_time"].notna().all(), name
        assert (df["accepted_tokens"] <= df["proposed_tokens"]).all(), name
        used = res.extras[name]["drafter_usage"]
        assert sum(used.values()) == df["decode_steps"].sum(), name


def test_bandit_in_engine_beats_random_drafter(pool_dir):
    runs = [{"name": "ucb", "mode": "sd", "policy": {"name": "metasd-ucb", "drafters": DRAFTERS, "beta": 0.1}},
            {"name": "random", "mode": "sd", "policy": {"name": "random-drafter", "drafters": DRAFTERS}}]
    res = run_experiment(config(pool_dir, runs, 1.0))
    steps = res.requests.groupby("run")["decode_steps"].sum()
    assert steps["ucb"] < steps["random"]


def test_oracle_k_in_engine_never_has_a_rejected_token(pool_dir):
    runs = [{"name": "oracle", "mode": "sd", "policy": {"name": "oracle-k", "drafter": DRAFTERS[0]}}]
    df = run_experiment(config(pool_dir, runs, 0.0)).requests
    assert (df["accepted_tokens"] == df["proposed_tokens"]).all()
    assert df["proposed_tokens"].sum() > 0


def test_exact_oracles_in_engine_take_exactly_the_planned_steps(pool_dir):
    from oracle.exact import greedy_plan, min_steps_plan
    from traces.bundle import load_bundle

    pair = list(DRAFTERS[:2])
    runs = [{"name": "exact", "mode": "sd", "policy": {"name": "oracle-best-drafter", "drafters": pair,
                                                       "plan": "min-steps"}},
            {"name": "greedy", "mode": "sd", "policy": {"name": "oracle-combine", "ngram": pair[0], "eagle": pair[1],
                                                        "costs": "reference"}},
            {"name": "min-time", "mode": "sd", "policy": {"name": "oracle-combine", "ngram": pair[0], "eagle": pair[1],
                                                          "plan": "min-time", "k_max": 6}}]
    df = run_experiment(config(pool_dir, runs, 0.0)).requests
    traces = {r.id: r for r in load_bundle(pool_dir).requests}
    exact = df[df["run"] == "exact"]
    want = [min_steps_plan(traces[t], pair).steps for t in exact["trace_id"]]
    assert exact["decode_steps"].tolist() == want
    assert (exact["accepted_tokens"] == exact["proposed_tokens"]).all()
    assert exact["decode_steps"].sum() <= df[df["run"] == "greedy"]["decode_steps"].sum()
    assert df[df["run"] == "greedy"]["decode_steps"].tolist() == [greedy_plan(traces[t], pair).steps
                                                                   for t in df[df["run"] == "greedy"]["trace_id"]]
    mt = df[df["run"] == "min-time"]
    assert mt["finish_time"].notna().all() and (mt["accepted_tokens"] == mt["proposed_tokens"]).all()


def test_bd_reward_on_a_bundle_without_tv_is_refused_with_a_pointer_to_be(tmp_path):
    b = make_pool_bundle(SPEC)
    for r in b.requests:
        for t in r.drafters.values():
            t.tv = None
    path = str(save_bundle(b, tmp_path / "notv"))
    runs = [{"name": "bd", "mode": "sd", "policy": {"name": "metasd-ucb", "drafters": DRAFTERS}}]
    with pytest.raises(ValueError, match="reward: be"):
        run_experiment(config(path, runs, 0.0))
