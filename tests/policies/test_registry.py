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
