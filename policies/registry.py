"""Policy registry: build a policy from its config mapping `{name: ..., **params}`; list them all."""
from __future__ import annotations

import inspect
from typing import Any

from policies.base import FixedPolicy, Policy

POLICIES: dict[str, type[Policy]] = {
    FixedPolicy.name: FixedPolicy,
}


def make_policy(spec: dict[str, Any], where: str = "policy") -> Policy:
    """Instantiate a registered policy; unknown names or parameters name the key that is wrong."""
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"{where}: expected a mapping with 'name' (one of {sorted(POLICIES)}), got {spec!r}")
    name = spec["name"]
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(f"{where}.name: unknown policy {name!r}; expected one of {sorted(POLICIES)}")
    params = {k: v for k, v in spec.items() if k != "name"}
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = set(params) - accepted
    if unknown:
        raise ValueError(f"{where}: unknown parameter(s) {sorted(unknown)} for policy {name!r}; "
                         f"expected some of {sorted(accepted)}")
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from e


def policy_parameters(name: str) -> dict[str, Any]:
    """Parameter name -> default (inspect.Parameter.empty when required) of a registered policy."""
    sig = inspect.signature(POLICIES[name].__init__)
    return {p.name: p.default for p in sig.parameters.values() if p.name != "self"}
