"""Policy registry: build a policy from its config mapping `{name: ..., **params}`; list them all.

Online policies are registered by class. Oracles live in `oracle/`, which sits above `policies/`
in the layering: `oracle/registry.py` registers them with `register_policy` when it is imported (the
experiment layer does), and their names are known here so that asking for one before that says so.
"""
from __future__ import annotations

import inspect
import math
import typing
from typing import Any

from pydantic import ConfigDict, ValidationError, create_model

from policies.adaptive_k import AdaptiveKPolicy
from policies.base import FixedPolicy, Policy
from policies.combine import CombineAdaptivePolicy, CombineMatchPolicy
from policies.epsilon_greedy import EpsilonGreedyPolicy, RandomDrafterPolicy
from policies.exp3 import EXP3Policy
from policies.k_by_batch import KByBatchPolicy
from policies.thompson import ThompsonPolicy
from policies.ucb import DiscountedUCBPolicy, MetaSDUCBPolicy, SlidingWindowUCBPolicy, UCBPolicy
from traces.config_base import STRICT_CONFIG, first_error
from traces.limits import MAX_DRAFT_TOKENS

MAX_INT_PARAM = 2**62
# keys of nested parameter mappings (k-by-batch `ranges`) that hold integers
NESTED_INT_KEYS = frozenset({"k", "min_batch", "max_batch"})
_PARAMS_CONFIG = ConfigDict(**STRICT_CONFIG, arbitrary_types_allowed=True)

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (FixedPolicy, KByBatchPolicy, UCBPolicy, MetaSDUCBPolicy, DiscountedUCBPolicy,
                SlidingWindowUCBPolicy, EXP3Policy, ThompsonPolicy, EpsilonGreedyPolicy, RandomDrafterPolicy,
                AdaptiveKPolicy, CombineMatchPolicy, CombineAdaptivePolicy)
}
# ground-truth policies: registered by oracle/registry.py, which the experiment layer imports
GROUND_TRUTH_POLICIES = ("oracle-k", "oracle-best-drafter", "oracle-combine", "oracle-best-fixed")


def register_policy(cls: type[Policy]) -> None:
    """Add a policy class under its `name` (an existing name is an error)."""
    if cls.name in POLICIES and policy_class(cls.name) is not cls:
        raise ValueError(f"a policy named {cls.name!r} is already registered")
    POLICIES[cls.name] = cls


def policy_class(name: str) -> type[Policy]:
    """The class registered under `name`."""
    entry = POLICIES.get(name)
    if entry is None:
        if name in GROUND_TRUTH_POLICIES:
            raise ValueError(f"policy {name!r} is an oracle (it reads the ground-truth trace): it is registered by "
                             "oracle/registry.py, which offline simulations import; it cannot run on a live server")
        raise ValueError(f"unknown policy {name!r}; expected one of {sorted(set(POLICIES) | set(GROUND_TRUTH_POLICIES))}")
    return entry


def make_policy(spec: dict[str, Any], where: str = "policy", seed: int | None = None) -> Policy:
    """Instantiate a registered policy; unknown names or parameters name the key that is wrong.

    `seed` (the run's seed) reaches every policy that takes one, unless the spec sets its own."""
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"{where}: expected a mapping with 'name' (one of {sorted(POLICIES)}), got {spec!r}")
    name = spec["name"]
    if not isinstance(name, str):
        raise ValueError(f"{where}.name: unknown policy {name!r}; expected a policy name, one of {sorted(POLICIES)}")
    try:
        cls = policy_class(name)
    except ValueError as e:
        raise ValueError(f"{where}.name: {e}") from None
    params = {k: v for k, v in spec.items() if k != "name"}
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = set(params) - accepted
    if unknown:
        raise ValueError(f"{where}: unknown parameter(s) {sorted(unknown)} for policy {name!r}; "
                         f"expected some of {sorted(accepted)}")
    check_parameters(cls, params, where)
    if seed is not None and "seed" in accepted and "seed" not in params:
        params["seed"] = int(seed)
    try:
        return cls(**params)
    except (TypeError, ValueError, ArithmeticError) as e:
        raise ValueError(f"{where}: {e}") from e


def _is_draft_length(key: str) -> bool:
    return key == "k" or key.startswith("k_")


def check_parameters(cls: type[Policy], params: dict[str, Any], where: str) -> None:
    """Check `params` against the types of `cls.__init__` (strict: 1.5 or "3" is not an int, NaN and inf are
    not numbers) and size bounds: a draft length (`k`, `k_*`) in [0, MAX_DRAFT_TOKENS], a seed >= 0, any
    other integer at most 2**62 in size. Raises ValueError naming the parameter and what was expected."""
    hints = typing.get_type_hints(cls.__init__)
    sig = inspect.signature(cls.__init__)
    fields = {n: (hints.get(n, Any), ... if p.default is inspect.Parameter.empty else p.default)
              for n, p in sig.parameters.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    model = create_model(f"{cls.__name__}Params", __config__=_PARAMS_CONFIG, **fields)
    try:
        model.model_validate(params)
    except ValidationError as e:
        raise ValueError(first_error(e, where)) from None
    stack: list[tuple[str, Any, bool]] = [(k, v, False) for k, v in params.items()]
    while stack:
        key, value, nested = stack.pop()
        leaf = key.rsplit(".", 1)[-1].split("[", 1)[0]
        if isinstance(value, dict):
            stack.extend((f"{key}.{k}", v, True) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{key}[{i}]", v, True) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}.{key}: expected a finite number, got {value}")
        elif nested and leaf in NESTED_INT_KEYS and value is not None and (
                isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{where}.{key}: expected an integer, got {value!r}")
        elif isinstance(value, int) and not isinstance(value, bool):
            if _is_draft_length(leaf) and not 0 <= value <= MAX_DRAFT_TOKENS:
                raise ValueError(f"{where}.{key}: expected a draft length in [0, {MAX_DRAFT_TOKENS}], got {value}")
            if leaf == "seed" and value < 0:
                raise ValueError(f"{where}.{key}: expected a seed >= 0, got {value}")
            if abs(value) > MAX_INT_PARAM:
                raise ValueError(f"{where}.{key}: expected an integer of at most 2**62 in size, got {value}")


def policy_parameters(name: str) -> dict[str, Any]:
    """Parameter name -> default (inspect.Parameter.empty when required) of a registered policy."""
    sig = inspect.signature(policy_class(name).__init__)
    return {p.name: p.default for p in sig.parameters.values() if p.name != "self"}
