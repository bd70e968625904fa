"""Policy registry: build a policy from its config mapping `{name: ..., **params}`; list them all.

Online policies are registered by class. Oracles live in `oracle/`, which sits above `policies/`
in the layering, so they are registered by dotted path ("module:Class") and imported only when
asked for by name; `register_policy` adds more at run time.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any

from policies.adaptive_k import AdaptiveKPolicy
from policies.base import FixedPolicy, Policy
from policies.combine import CombineAdaptivePolicy, CombineMatchPolicy
from policies.epsilon_greedy import EpsilonGreedyPolicy, RandomDrafterPolicy
from policies.exp3 import EXP3Policy
from policies.k_by_batch import KByBatchPolicy
from policies.thompson import ThompsonPolicy
from policies.ucb import DiscountedUCBPolicy, MetaSDUCBPolicy, SlidingWindowUCBPolicy, UCBPolicy

POLICIES: dict[str, type[Policy] | str] = {
    cls.name: cls
    for cls in (FixedPolicy, KByBatchPolicy, UCBPolicy, MetaSDUCBPolicy, DiscountedUCBPolicy,
                SlidingWindowUCBPolicy, EXP3Policy, ThompsonPolicy, EpsilonGreedyPolicy, RandomDrafterPolicy,
                AdaptiveKPolicy, CombineMatchPolicy, CombineAdaptivePolicy)
}
POLICIES.update({
    "oracle-k": "oracle.oracle_k:OracleKPolicy",
    "oracle-best-drafter": "oracle.best_drafter:OracleBestDrafterPolicy",
    "oracle-combine": "oracle.combine:OracleCombinePolicy",
    "oracle-best-fixed": "oracle.hindsight:BestFixedInHindsightPolicy",
})


def register_policy(cls: type[Policy]) -> None:
    """Add a policy class under its `name` (an existing name is an error)."""
    if cls.name in POLICIES and policy_class(cls.name) is not cls:
        raise ValueError(f"a policy named {cls.name!r} is already registered")
    POLICIES[cls.name] = cls


def policy_class(name: str) -> type[Policy]:
    """The class registered under `name`, importing it when registered by path."""
    entry = POLICIES.get(name)
    if entry is None:
        raise ValueError(f"unknown policy {name!r}; expected one of {sorted(POLICIES)}")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        POLICIES[name] = entry
    return entry


def make_policy(spec: dict[str, Any], where: str = "policy", seed: int | None = None) -> Policy:
    """Instantiate a registered policy; unknown names or parameters name the key that is wrong.

    `seed` (the run's seed) reaches every policy that takes one, unless the spec sets its own."""
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"{where}: expected a mapping with 'name' (one of {sorted(POLICIES)}), got {spec!r}")
    name = spec["name"]
    if name not in POLICIES:
        raise ValueError(f"{where}.name: unknown policy {name!r}; expected one of {sorted(POLICIES)}")
    cls = policy_class(name)
    params = {k: v for k, v in spec.items() if k != "name"}
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = set(params) - accepted
    if unknown:
        raise ValueError(f"{where}: unknown parameter(s) {sorted(unknown)} for policy {name!r}; "
                         f"expected some of {sorted(accepted)}")
    if seed is not None and "seed" in accepted and "seed" not in params:
        params["seed"] = int(seed)
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from e
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e


def policy_parameters(name: str) -> dict[str, Any]:
    """Parameter name -> default (inspect.Parameter.empty when required) of a registered policy."""
    sig = inspect.signature(policy_class(name).__init__)
    return {p.name: p.default for p in sig.parameters.values() if p.name != "self"}
