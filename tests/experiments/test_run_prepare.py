"""run_experiment resolves every run (policies built and seeded) before simulating any of them."""
from __future__ import annotations

import pytest

import experiments.run
from experiments.run import run_experiment


def _config(runs, seed=0):
    return {"name": "prep", "seed": seed, "traces": "builtin:default",
            "workload": {"num_requests": 40, "arrival": {"kind": "closed_loop", "clients": 8, "think_time": 0.0},
                         "lengths": {"source": "bundle"}},
            "server": {"target_profile": "llama3.1-8b-h100-specbench", "max_num_seqs": 8,
                       "max_num_batched_tokens": 8192, "kv_capacity_tokens": 430000},
            "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"},
                         "ngram": {"kind": "fraction_of_verify", "fraction": 0.005875}},
            "runs": runs}


def test_a_bad_policy_in_the_last_run_fails_before_any_run_simulates(monkeypatch):
    calls = []
    real = experiments.run.simulate
    monkeypatch.setattr(experiments.run, "simulate", lambda sc, *a, **k: calls.append(sc.name) or real(sc, *a, **k))
    runs = [{"name": "AR", "mode": "ar"},
            {"name": "sd", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3}},
            {"name": "bad", "mode": "sd", "policy": {"name": "ucb", "drafters": ["eagle3", "ngram"], "betta": 1}}]
    with pytest.raises(ValueError, match=r"runs\.2\.policy.*betta"):
        run_experiment(_config(runs))
    assert calls == []
    run_experiment(_config(runs[:2]))
    assert calls == ["AR", "sd"]


def test_random_policies_follow_the_run_seed():
    runs = [{"name": "rnd", "mode": "sd", "policy": {"name": "random-drafter", "drafters": ["eagle3", "ngram"], "k": 3}}]

    def usage(seed):
        return run_experiment(_config(runs, seed=seed)).extras["rnd"]["drafter_usage"]

    assert usage(1) == usage(1)
    assert usage(1) != usage(2)


def test_an_explicit_policy_seed_wins_over_the_run_seed():
    from experiments.config import load_config
    from experiments.run import prepare

    def rng_state(policy, seed):
        runs = [{"name": "rnd", "mode": "sd", "policy": policy}]
        return prepare(load_config(_config(runs, seed=seed)))[0].policy.rng.bit_generator.state

    spec = {"name": "random-drafter", "drafters": ["eagle3", "ngram"], "k": 3}
    assert rng_state(spec, 1) != rng_state(spec, 2)
    assert rng_state({**spec, "seed": 5}, 1) == rng_state({**spec, "seed": 5}, 2)
