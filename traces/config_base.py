"""One strict base for every config model and one way to turn a validation error into a message.

Every config family (experiment, server, cluster/router, plan, sweep, workload, synthetic specs, studies,
validate) derives from `StrictModel`: unknown keys are refused, nothing is coerced (`"20"`, `true` and `1.0`
are not integers, `"inf"` is not a number), NaN and infinity are refused, and a model is immutable once built.
`format_validation_error` is the one formatter: each line names the source (file), the dotted key path,
what was expected and a short excerpt of what was given.
"""
from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from traces.errors import shorten

STRICT_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base of every config model: no unknown keys, no coercion, finite numbers only, frozen."""

    model_config = STRICT_CONFIG


class ConfigError(ValueError):
    """A config that fails validation; the message names the file and every bad key."""


# pydantic names the member of a union a value failed to match ("str", "dict[str,...]"): not a config key
_UNION_BRANCH = re.compile(r"^(str|int|float|bool|none|constrained-\w+|(list|dict|tuple|literal|union|function-\w+|"
                           r"constrained-\w+|json-or-python|lax-or-strict|tagged-union|nullable|"
                           r"chain|model|default|definition-ref)\[.*)$", re.I)
# a validator's message that already names the key below the location: "key.sub: rest"
_KEYED_MESSAGE = re.compile(r"^(?P<key>[A-Za-z_][\w\-]*(?:\.[\w\-\[\]]+)*): (?P<rest>.*)$", re.S)


def _key_path(loc: tuple, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    parts = [str(p) for p in _walk(model, loc)[0]]
    return ".".join(p for p in (prefix, *parts) if p)


def _join_keys(loc: str, sub: str) -> str:
    """`loc` + `sub`, where `sub` may already start with the last parts of `loc` (a validator naming its key)."""
    head, tail = loc.split(".") if loc else [], sub.split(".")
    for n in range(min(len(head), len(tail)), 0, -1):
        if head[-n:] == tail[:n]:
            return ".".join(head[:-n] + tail)
    return ".".join(head + tail)


def _expectation(err: dict[str, Any]) -> str:
    kind, msg = err["type"], err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "finite_number":
        return "expected a finite number (not inf or NaN)"
    return msg.replace("Input should be", "expected")


def _members(annotation: Any) -> list[Any]:
    """The types a value of `annotation` may take (Optional and unions unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [m for a in typing.get_args(annotation) for m in _members(a)]
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    return [annotation]


def _models(current: list[Any]) -> list[type[BaseModel]]:
    return [a for c in current for a in _members(c) if isinstance(a, type) and issubclass(a, BaseModel)]


def _tagged(models: list[type[BaseModel]], part: Any) -> list[type[BaseModel]]:
    """The members of a discriminated union whose tag (a one-value Literal field) is `part`."""
    return [m for m in models for f in m.model_fields.values()
            if typing.get_origin(f.annotation) is typing.Literal and typing.get_args(f.annotation) == (part,)]


def _walk(model: type[BaseModel] | None, loc: tuple) -> tuple[tuple, list[str]]:
    """(`loc` without its union-branch and discriminator-tag parts, the keys the model takes in the mapping
    holding `loc`'s last part), found by walking the field annotations; ([], ...) keys where the walk meets no
    model. Without a model, only the branch names pydantic adds are dropped."""
    if model is None:
        return tuple(p for p in loc if not _UNION_BRANCH.match(str(p))), []
    current: list[Any] = [model]
    kept: list[Any] = []
    for j, part in enumerate(loc):
        if _UNION_BRANCH.match(str(part)):
            continue
        models = _models(current)
        last = j == len(loc) - 1
        if models and not any(isinstance(part, str) and part in m.model_fields for m in models) \
                and _tagged(models, part) and not last:
            current = list(_tagged(models, part))  # a discriminated union's tag: not a key the user wrote
            continue
        kept.append(part)
        if last:
            break
        nxt: list[Any] = []
        for a in (m for c in current for m in _members(c)):
            if isinstance(a, type) and issubclass(a, BaseModel):
                if isinstance(part, str) and part in a.model_fields:
                    nxt.append(a.model_fields[part].annotation)
            elif typing.get_origin(a) in (list, tuple, dict) and typing.get_args(a):
                nxt.append(typing.get_args(a)[-1])
        current = nxt
    return tuple(kept), sorted({k for m in _models(current) for k in m.model_fields})


def _close(word: str, candidates: list[str]) -> str | None:
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def error_lines(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """(key path, what was expected and what was given) of every error in `err`; `prefix` is prepended.

    The errors of the members of a union at one key are joined into one line ("expected A, or B"); when a member
    took the value and failed below it, only its errors are shown. An unknown
    key close to a key the model takes (`model`: the model validated) or to a required key reported missing
    beside it gets "did you mean"; that missing key names the likely misspelling."""
    errors = err.errors(include_url=False)
    missing: dict[tuple, list[str]] = {}  # parent location -> required keys missing there
    unknown: dict[tuple, list[str]] = {}  # parent location -> unknown keys given there
    for e in errors:
        if e["type"] in ("missing", "extra_forbidden") and e["loc"]:
            into = missing if e["type"] == "missing" else unknown
            into.setdefault(tuple(e["loc"][:-1]), []).append(str(e["loc"][-1]))
    by_loc: dict[str, list[str]] = {}
    got_at: dict[str, str] = {}
    mismatch_only: dict[str, bool] = {}  # key path -> every error there is a union member not matching the value
    for e in errors:
        loc = _key_path(e["loc"], prefix, model)
        mismatch_only[loc] = mismatch_only.get(loc, True) and bool(e["loc"]) \
            and bool(_UNION_BRANCH.match(str(e["loc"][-1])))
        msg = _expectation(e)
        nested = _KEYED_MESSAGE.match(msg) if e["type"] in ("value_error", "assertion_error") else None
        if nested:  # a validator's message that already names the key below `loc`
            loc, msg = _join_keys(loc, nested["key"]), nested["rest"]
        if e["type"] == "extra_forbidden" and e["loc"]:
            key, parent = str(e["loc"][-1]), tuple(e["loc"][:-1])
            near = _close(key, missing.get(parent, [])) or _close(key, _walk(model, tuple(e["loc"]))[1])
            if near:
                msg += f" (did you mean {near!r}?)"
        if e["type"] == "missing" and e["loc"]:
            typo = _close(str(e["loc"][-1]), unknown.get(tuple(e["loc"][:-1]), []))
            if typo:
                msg += f" (given as {typo!r}?)"
        got = e.get("input")
        if e["type"] not in ("missing", "extra_forbidden") and not isinstance(got, (dict, list, BaseModel)) \
                and f" (got {shorten(got)})" not in msg:  # a nested model's message may already say it
            got_at.setdefault(loc, f" (got {shorten(got)})")
        msgs = by_loc.setdefault(loc, [])
        if msg not in msgs:
            msgs.append(msg)
    # a union member that took the value and found errors below it says what is wrong: the other members' "expected
    # a valid string" at the same key is left out
    deeper = [loc for loc in by_loc if any(o.startswith(loc + ".") for o in by_loc)] if len(by_loc) > 1 else []
    for loc in deeper:
        if mismatch_only[loc]:
            del by_loc[loc]
    return [(loc or "(top level)", ", or ".join(msgs) + got_at.get(loc, "")) for loc, msgs in by_loc.items()]


def format_validation_error(err: ValidationError, source: str, what: str = "config", prefix: str = "",
                            model: type[BaseModel] | None = None) -> str:
    """The one message for a failed validation: '<source>: invalid <what>' then '  <key path>: <expected>'."""
    lines = [f"{source}: invalid {what}"]
    lines += [f"  {loc}: {msg}" for loc, msg in error_lines(err, prefix, model)]
    return "\n".join(lines)


def first_error(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """'<key path>: <expected> (got ...)' of the first error: for a validator nested in another model."""
    loc, msg = error_lines(err, prefix, model)[0]
    return f"{loc}: {msg}"


def validate_model(model: type[M], doc: Any, where: str = "") -> M:
    """`model` validated from `doc`; else ValueError '<where>.<key>: <expected> (got ...)' (first error)."""
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        raise ValueError(first_error(e, where, model)) from None


def validate_document(model: type[M], doc: Any, source: str, what: str = "config") -> M:
    """`model` validated from a whole document read from `source`; else ConfigError listing every bad key."""
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source, what, model=model)) from None
