"""Policy registry: build a policy from its config mapping `{name: ..., **params}`; list them all.

Online policies are registered by class. Oracles live in `oracle/`, which sits above `policies/`
in the layering: `oracle/registry.py` registers them with `register_policy` when it is imported (the
experiment layer does), and their names are known here so that asking for one before that says so.

Plug-ins (docs/policies.md): a `name` holding a colon is an import path, `package.module:Class` or
`path/to/file.py:Class`; an installed package may also register names through the entry-point group
`draftsim.policies` (`name = "package.module:Class"`). Both resolve here, so every caller of
`make_policy` (configs, sweeps, plans, live runs) accepts them and checks their parameters alike.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, create_model, model_serializer

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
from traces.parsing import resolved_path

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


ENTRY_POINT_GROUP = "draftsim.policies"
_IMPORTED: dict[str, type[Policy]] = {}  # import path -> class, so a file is executed once per process


def register_policy(cls: type[Policy]) -> None:
    """Add a policy class under its `name` (an existing name is an error)."""
    if cls.name in POLICIES and policy_class(cls.name) is not cls:
        raise ValueError(f"a policy named {cls.name!r} is already registered")
    POLICIES[cls.name] = cls


def plugin_entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Entry points of the `draftsim.policies` group by name (installed packages' plug-in policies)."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return found


def known_policy_names() -> list[str]:
    """Every name `policy_class` resolves without an import path: built-ins, oracles, entry points."""
    return sorted(set(POLICIES) | set(GROUND_TRUTH_POLICIES) | set(plugin_entry_points()))


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def _checked_class(obj: Any, what: str) -> type[Policy]:
    """`obj` if it is a Policy subclass, else ValueError naming where it came from."""
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise ValueError(f"{what} is {obj!r}, not a subclass of policies.base.Policy")
    return obj


def _load_module(target: str) -> Any:
    """The module named by `target`: a dotted module name, or a `.py` file (loaded once under a private name)."""
    if target.endswith(".py"):
        path = resolved_path(target)
        if not path.is_file():
            raise ValueError(f"policy file {target!r} not found (relative paths are taken from the working "
                             f"directory {Path.cwd()})")
        mod_name = f"draftsim_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module  # before exec: dataclasses and pickling look the module up
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[mod_name]
            raise
        return module
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name and target.split(".")[0] == e.name.split(".")[0]:
            raise ValueError(f"module {target!r} is not importable: install its package, add the folder holding "
                             f"it to PYTHONPATH, or name the file instead (path/to/module.py:Class)") from None
        raise


def _import_policy(path: str) -> type[Policy]:
    """The class named by an import path `module:Class` or `file.py:Class`."""
    if path in _IMPORTED:
        return _IMPORTED[path]
    target, _, attr = path.rpartition(":")
    if not target or not attr or not attr.replace(".", "_").isidentifier():
        raise ValueError(f"policy {path!r}: an import path is 'package.module:Class' or 'path/to/file.py:Class'")
    try:
        module = _load_module(target)
    except ValueError as e:
        raise ValueError(f"policy {path!r}: {e}") from None
    except Exception as e:  # the plug-in's own code failed while importing: say where
        raise ValueError(f"policy {path!r}: importing {target!r} failed: {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(module) if isinstance(getattr(module, n), type)
                     and issubclass(getattr(module, n), Policy) and getattr(module, n) is not Policy]
            raise ValueError(f"policy {path!r}: {target!r} has no attribute {part!r}"
                             + (_did_you_mean(part, names) or (f"; its policy classes: {names}" if names else "")))
        obj = getattr(obj, part)
    cls = _checked_class(obj, f"policy {path!r}")
    _IMPORTED[path] = cls
    return cls


def policy_class(name: str) -> type[Policy]:
    """The class registered under `name`, named by an import path (`module:Class`, `file.py:Class`), or
    registered by an installed package through the `draftsim.policies` entry-point group."""
    entry = POLICIES.get(name)
    if entry is not None:
        return entry
    if name in GROUND_TRUTH_POLICIES:
        raise ValueError(f"policy {name!r} is an oracle (it reads the ground-truth trace): it is registered by "
                         "oracle/registry.py, which offline simulations import; it cannot run on a live server")
    if ":" in name:
        return _import_policy(name)
    ep = plugin_entry_points().get(name)
    if ep is not None:
        try:
            obj = ep.load()
        except Exception as e:
            raise ValueError(f"policy {name!r} (entry point {ep.value!r} of {ENTRY_POINT_GROUP}): loading failed: "
                             f"{type(e).__name__}: {e}") from e
        return _checked_class(obj, f"policy {name!r} (entry point {ep.value!r} of {ENTRY_POINT_GROUP})")
    known = known_policy_names()
    raise ValueError(f"unknown policy {name!r}{_did_you_mean(name, known)}; expected one of {known}, "
                     "or an import path 'package.module:Class' / 'path/to/file.py:Class'")


class PolicySpec(BaseModel):
    """A policy as a config gives it, parsed once (`policy_spec`): the name it was given by and the parameters
    set, typed by the class's `__init__` (one record class per policy class, `spec_model`). It dumps as the
    mapping it came from (only the parameters given, as written), so `--set`, sweeps and hashing see the config's document;
    `instantiate` makes a fresh policy object."""

    model_config = _PARAMS_CONFIG
    name: str

    def given(self) -> dict[str, Any]:
        """The parameters the config set, in the order of the class's signature."""
        return {k: getattr(self, k) for k in type(self).model_fields if k != "name" and k in self.model_fields_set}

    def instantiate(self, where: str = "policy", seed: int | None = None) -> Policy:
        """A new policy object; `seed` reaches a policy that takes one unless the spec sets its own."""
        cls = policy_class(self.name)
        params = self.given()
        if seed is not None and "seed" in type(self).model_fields and "seed" not in params:
            params["seed"] = int(seed)
        try:
            return cls(**params)
        except (TypeError, ValueError, ArithmeticError) as e:
            raise ValueError(f"{where}: {e}") from e

    _doc: dict[str, Any] | None = PrivateAttr(None)  # the mapping `policy_spec` parsed

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any) -> Any:
        if self._doc is not None:  # as given: `beta: 1` stays 1, so hashes and sweep seeds do not move
            return copy.deepcopy(self._doc)
        out = handler(self)
        return {k: v for k, v in out.items() if k == "name" or k in self.model_fields_set}

    def __reduce__(self) -> Any:  # record classes are made at run time: pickle as the document
        return policy_spec, (self.model_dump(),)


_SPEC_MODELS: dict[type[Policy], type[PolicySpec]] = {}


def spec_model(cls: type[Policy]) -> type[PolicySpec]:
    """The PolicySpec record class of `cls`: a field per `__init__` parameter, typed by its annotation (strict:
    1.5 or "3" is not an int) with its default."""
    model = _SPEC_MODELS.get(cls)
    if model is not None:
        return model
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception as e:  # a plug-in whose annotations do not resolve
        raise ValueError(f"the type hints of {cls.__module__}.{cls.__qualname__}.__init__ do not resolve "
                         f"({type(e).__name__}: {e})") from None
    sig = inspect.signature(cls.__init__)
    fields = {n: (hints.get(n, Any), ... if p.default is inspect.Parameter.empty else p.default)
              for n, p in sig.parameters.items()
              if n not in ("self", "name") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    try:
        model = create_model(f"{cls.__name__}Spec", __base__=PolicySpec, __module__=__name__, **fields)
    except (NameError, TypeError, ValueError) as e:  # a parameter named like a PolicySpec attribute
        raise ValueError(f"{cls.__module__}.{cls.__qualname__}.__init__: its parameters cannot form a config "
                         f"record ({type(e).__name__}: {e})") from None
    _SPEC_MODELS[cls] = model
    return model


def policy_spec(doc: "dict[str, Any] | PolicySpec", where: str = "policy") -> PolicySpec:
    """A policy's config mapping `{name: ..., **params}` parsed into its class's PolicySpec, after checking that
    the policy builds (the constructor's own range checks); unknown names or parameters name the key."""
    if isinstance(doc, PolicySpec):
        return doc
    if not isinstance(doc, dict) or "name" not in doc:
        raise ValueError(f"{where}: expected a mapping with 'name' (one of {known_policy_names()} or an import "
                         f"path), got {doc!r}")
    name = doc["name"]
    if not isinstance(name, str):
        raise ValueError(f"{where}.name: unknown policy {name!r}; expected a policy name, one of "
                         f"{known_policy_names()}, or an import path")
    try:
        cls = policy_class(name)
    except ValueError as e:
        raise ValueError(f"{where}.name: {e}") from None
    params = {k: v for k, v in doc.items() if k != "name"}
    accepted = {n for n, p in inspect.signature(cls.__init__).parameters.items()
                if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    unknown = set(params) - accepted
    if unknown:
        raise ValueError(f"{where}: unknown parameter(s) {sorted(unknown)} for policy {name!r}; "
                         f"expected some of {sorted(accepted)}")
    check_parameters(cls, params, where)
    try:
        spec = spec_model(cls).model_validate({"name": name, **params})
    except ValidationError as e:
        raise ValueError(first_error(e, where, spec_model(cls))) from None
    spec._doc = copy.deepcopy({"name": name, **params})
    spec.instantiate(where)  # the constructor's own checks (ranges across parameters), before anything runs
    return spec


def make_policy(spec: "dict[str, Any] | PolicySpec", where: str = "policy", seed: int | None = None) -> Policy:
    """Instantiate a registered policy from its config mapping or parsed PolicySpec; unknown names or
    parameters name the key that is wrong.

    `seed` (the run's seed) reaches every policy that takes one, unless the spec sets its own."""
    return policy_spec(spec, where).instantiate(where, seed)


def _is_draft_length(key: str) -> bool:
    return key == "k" or key.startswith("k_")


def check_parameters(cls: type[Policy], params: dict[str, Any], where: str) -> None:
    """Check `params` against the types of `cls.__init__` (strict: 1.5 or "3" is not an int, NaN and inf are
    not numbers) and size bounds: a draft length (`k`, `k_*`) in [0, MAX_DRAFT_TOKENS], a seed >= 0, any
    other integer at most 2**62 in size. Raises ValueError naming the parameter and what was expected."""
    try:
        model = spec_model(cls)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    try:
        model.model_validate({"name": "-", **params})
    except ValidationError as e:
        raise ValueError(first_error(e, where, model)) from None
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
    return {p.name: p.default for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
