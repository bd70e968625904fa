"""Registry: every policy builds from YAML-like specs, lists its parameters, and bad specs name the key."""
import inspect

import pytest

from policies.base import Policy
from policies.registry import POLICIES, make_policy, policy_class, policy_parameters, register_policy


def test_every_registered_policy_has_a_description_and_resolves():
    for name in POLICIES:
        cls = policy_class(name)
        assert issubclass(cls, Policy) and cls.name == name
        assert cls.description, f"{name} has no description"


def test_oracles_are_marked_and_online_policies_refuse_ground_truth():
    for name in POLICIES:
        cls = policy_class(name)
        assert cls.reads_ground_truth == name.startswith("oracle-")


def test_parameters_list_defaults():
    p = policy_parameters("metasd-ucb")
    assert p["beta"] == 1.0 and p["reward"] is None and p["drafters"] is inspect.Parameter.empty
    assert policy_parameters("discounted-ucb")["gamma"] == 0.95


def test_make_policy_errors_name_the_key():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        make_policy({"name": "nope"})
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['bogus'\]"):
        make_policy({"name": "ucb", "drafters": ["a"], "bogus": 1})
    with pytest.raises(ValueError, match="expected a mapping"):
        make_policy("ucb")
    with pytest.raises(ValueError, match="runs\\[2\\].policy"):
        make_policy({"name": "ucb"}, where="runs[2].policy")


def test_register_policy_refuses_a_taken_name():
    class Dup(Policy):
        name = "ucb"

    with pytest.raises(ValueError, match="already registered"):
        register_policy(Dup)


@pytest.mark.parametrize("spec, match", [
    ({"name": "fixed", "drafter": "d", "k": 1.5}, r"policy.k: expected a valid integer \(got 1.5\)"),
    ({"name": "fixed", "drafter": "d", "k": "3"}, r"policy.k: expected a valid integer"),
    ({"name": "fixed", "drafter": "d", "k": 10**20}, r"policy.k: expected a draft length in \[0, 64\]"),
    ({"name": "k-by-batch", "drafter": "d", "ranges": [{"min_batch": 1, "max_batch": None, "k": 1.5}]},
     r"policy.ranges\[0\].k: expected an integer, got 1.5"),
    ({"name": "ucb", "drafters": ["a", "b"], "beta": float("nan")}, r"policy.beta: expected a finite number"),
    ({"name": "ucb", "drafters": ["a", "b"], "seed": -1}, r"policy.seed: expected a seed >= 0"),
    ({"name": "adaptive-k", "drafter": "d", "prior_weight": 0}, r"prior_weight must be > 0"),
    ({"name": ["fixed"]}, r"policy.name: unknown policy"),
])
def test_parameters_are_strictly_typed_and_bounded(spec, match):
    with pytest.raises(ValueError, match=match):
        make_policy(spec)


def test_oracles_are_registered_by_the_oracle_package_not_by_policies():
    import subprocess
    import sys

    code = ("from policies.registry import make_policy\n"
            "try:\n    make_policy({'name': 'oracle-k', 'drafter': 'd'})\nexcept ValueError as e:\n    print(e)\n"
            "import oracle.registry\n"
            "print(type(make_policy({'name': 'oracle-k', 'drafter': 'd'})).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "is an oracle" in out and "oracle/registry.py" in out
    assert out.strip().endswith("OracleKPolicy")
