"""A run's policy parsed once into its class's PolicySpec record (policies/registry.py): typed fields, the
document it dumps, the object it builds, and a config's runs holding it."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from experiments.config import ConfigError, load_config
from policies.base import FixedPolicy
from policies.registry import PolicySpec, make_policy, policy_spec, spec_model
from policies.ucb import UCBPolicy
from simulator.scenario import build_policy
from simulator.server_config import RunSpec

ROOT = Path(__file__).resolve().parents[2]


def test_each_policy_class_has_one_record_class_with_its_parameters_typed():
    spec = policy_spec({"name": "ucb", "drafters": ["a", "b"], "k": 3, "beta": 1})
    assert type(spec) is spec_model(UCBPolicy) and isinstance(spec, PolicySpec)
    assert spec.k == 3 and spec.drafters == ["a", "b"] and spec.beta == 1.0 and isinstance(spec.beta, float)
    assert spec.scope == "request"  # a default read from the record, not given
    assert spec.given() == {"drafters": ["a", "b"], "k": 3, "beta": 1.0}


def test_the_record_dumps_the_mapping_as_written():
    doc = {"name": "ucb", "k": 3, "drafters": ["a", "b"], "beta": 1}
    spec = policy_spec(doc)
    # only the keys given, as written (beta 1, not 1.0): a config's hash and sweep seeds stay what they were
    assert json.dumps(spec.model_dump(mode="json")) == json.dumps(doc)
    back = pickle.loads(pickle.dumps(spec))
    assert type(back) is type(spec) and back == spec and json.dumps(back.model_dump(mode="json")) == json.dumps(doc)


def test_a_record_built_in_python_dumps_the_fields_it_was_given():
    spec = spec_model(FixedPolicy)(name="fixed", drafter="d", k=2)
    assert spec.model_dump(mode="json") == {"name": "fixed", "drafter": "d", "k": 2}


def test_instantiate_seeds_a_policy_unless_the_spec_sets_its_own_seed():
    free = policy_spec({"name": "ucb", "drafters": ["a", "b"]})
    own = policy_spec({"name": "ucb", "drafters": ["a", "b"], "seed": 5})

    def draws(policy):  # the policy's random stream, seeded from its seed (policies/bandit.py)
        return policy.rng.random(4).tolist()

    assert draws(free.instantiate(seed=9)) == np.random.default_rng(9).random(4).tolist()
    assert draws(own.instantiate(seed=9)) == np.random.default_rng(5).random(4).tolist()
    assert draws(make_policy({"name": "ucb", "drafters": ["a", "b"]}, seed=9)) == draws(free.instantiate(seed=9))
    a, b = free.instantiate(seed=9), free.instantiate(seed=9)
    assert a is not b  # a fresh object per run: learning policies keep state


@pytest.mark.parametrize("doc, match", [
    ({"name": "fixed", "drafter": "d", "k": 1.5}, r"^policy\.k: expected a valid integer"),
    ({"name": "fixed", "drafter": "d", "k": 1000}, r"^policy\.k: expected a draft length in \[0, 64\]"),
    ({"name": "fixed", "drafter": "d", "kk": 3}, r"^policy: unknown parameter\(s\) \['kk'\]"),
    ({"name": "fixd", "drafter": "d"}, r"^policy\.name: unknown policy 'fixd' \(did you mean 'fixed'"),
    ({"drafter": "d"}, r"^policy: expected a mapping with 'name'"),
])
def test_bad_specs_name_the_key(doc, match):
    with pytest.raises(ValueError, match=match):
        policy_spec(doc)


def test_a_run_keeps_the_record_and_the_scenario_builds_from_it():
    run = RunSpec(name="r", mode="sd", policy={"name": "fixed", "drafter": "d", "k": 4})
    assert type(run.policy) is spec_model(FixedPolicy) and run.policy.k == 4
    pol = build_policy(run, seed=3)
    assert isinstance(pol, FixedPolicy) and pol.k == 4 and pol.drafter == "d"
    assert run.model_dump(mode="json")["policy"] == {"name": "fixed", "drafter": "d", "k": 4}
    assert build_policy(RunSpec(name="a", mode="ar"), seed=3) is None


def test_config_runs_hold_records_and_set_overrides_reach_them():
    cfg = load_config("default", ["runs.1.policy.k=4"])
    assert type(cfg.runs[1].policy) is spec_model(FixedPolicy) and cfg.runs[1].policy.k == 4
    # a loaded object re-validated with more overrides goes through its dumped document
    again = load_config(cfg, ["runs.1.policy.drafter=ngram"])
    assert (again.runs[1].policy.drafter, again.runs[1].policy.k) == ("ngram", 4)
    with pytest.raises(ConfigError, match=r"runs\.1\.policy\.k: expected a draft length"):
        load_config("default", ["runs.1.policy.k=1000"])


def test_a_plugin_policy_parses_through_the_registry(monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = policy_spec({"name": "docs/examples/aimd_k_policy.py:AIMDKPolicy", "drafter": "eagle3", "k_max": 8})
    assert spec.k_max == 8 and spec.name.endswith(":AIMDKPolicy")
    assert type(spec.instantiate()).__name__ == "AIMDKPolicy"
    assert pickle.loads(pickle.dumps(spec)) == spec
