"""Trace bundles on disk: `trace.yaml` + `requests.jsonl[.gz]`, loaded with full validation.

A bundle holds, per request and per drafter, the acceptance trace of DESIGN "Data model":
`acc_len[p]` (tokens one verify step emits when drafting starts at output position p, uncapped,
>= 1), and optionally `tv[p]`, `proposal_len[p]` and `tree_rank[p]` (the ranks a static draft tree is replayed
from, traces/tree.py; the drafter's params then declare tree_top_k and tree_depth).
"""
from __future__ import annotations


import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from traces.atomic import atomic_open, atomic_write_text
from traces.errors import TraceFormatError, shorten
from traces.limits import MAX_TOKENS_PER_REQUEST
from traces.parsing import iter_jsonl, load_yaml_file, resolved_path
from traces.tree import rank_dtype, tail_violation, tree_params

SCHEMA_VERSION = 1
TOOL_VERSION = "0.1.0"
DRAFTER_KINDS = ("eagle", "ngram", "draft_model", "int8", "truncated", "mtp", "suffix", "synthetic")

_META_KEYS = {"schema_version", "target", "temperature", "drafters", "dataset", "source", "tool_version", "extra"}
_REQUEST_KEYS = {"id", "prompt_len", "output_len", "category", "arrival_time", "prompt_token_ids",
                 "output_token_ids", "drafters"}
_DRAFTER_TRACE_KEYS = {"acc_len", "tv", "proposal_len", "tree_rank"}


@dataclass(frozen=True)
class DrafterSpec:
    """A drafter named in a bundle: its kind and the name of the cost model that prices its steps."""

    name: str
    kind: str
    cost_model: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class DrafterTrace:
    """Per-position acceptance of one drafter on one request (arrays of length output_len)."""

    acc_len: np.ndarray  # int32, >= 1
    tv: np.ndarray | None = None  # float32 in [0, 1]
    proposal_len: np.ndarray | None = None  # int32 >= 0; 0 = drafter has nothing to propose
    # int8/int16 (output_len, tree_depth): [p, j] = rank of the target's token at p + j among the drafter's top
    # tree_top_k candidates when drafting from p with the depth < j drafts accepted; tree_top_k = not among them
    # (traces/tree.py replays a static tree from it)
    tree_rank: np.ndarray | None = None


@dataclass
class RequestTrace:
    """One request: lengths, optional tokens and arrival, and each drafter's acceptance trace."""

    id: str
    prompt_len: int
    output_len: int
    drafters: dict[str, DrafterTrace]
    category: str | None = None
    arrival_time: float | None = None
    prompt_token_ids: list[int] | None = None
    output_token_ids: list[int] | None = None


@dataclass
class BundleMeta:
    """Contents of `trace.yaml`."""

    target: str
    drafters: dict[str, DrafterSpec]
    temperature: float = 0.0
    dataset: str = "unknown"
    source: dict[str, Any] = field(default_factory=dict)
    tool_version: str = TOOL_VERSION
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TraceBundle:
    """A validated bundle held in memory."""

    meta: BundleMeta
    requests: list[RequestTrace]

    @property
    def drafter_names(self) -> list[str]:
        return list(self.meta.drafters)

    def validate(self, where: str = "<memory>") -> None:
        """Check cross-field rules (lengths, ranges, drafter names); raise TraceFormatError."""
        _check_meta(self.meta, where)
        seen: set[str] = set()
        for i, r in enumerate(self.requests, start=1):
            _check_request(r, self.meta, where, i)
            if r.id in seen:
                raise TraceFormatError(where, f"duplicate request id {shorten(r.id)}", line=i, field="id")
            seen.add(r.id)


# ---------------------------------------------------------------- validation helpers


def _fail(path: str, msg: str, line: int | None = None, fld: str | None = None) -> None:
    raise TraceFormatError(path, msg, line=line, field=fld)


def _names(keys: Any) -> str:
    """At most 5 key names, each cut short: an error never echoes a file's content."""
    keys = sorted(map(str, keys))
    shown = [k if len(k) <= 40 else k[:40] + "..." for k in keys[:5]]
    return f"{shown}{f' and {len(keys) - 5} more' if len(keys) > 5 else ''}"


def _check_meta(meta: BundleMeta, path: str) -> None:
    if meta.schema_version != SCHEMA_VERSION:
        _fail(path, f"schema_version {meta.schema_version} is not supported (expected {SCHEMA_VERSION})",
              fld="schema_version")
    if not (isinstance(meta.temperature, (int, float)) and 0.0 <= meta.temperature <= 10.0):
        _fail(path, f"expected a number in [0, 10], got {shorten(meta.temperature)}", fld="temperature")
    if not meta.drafters:
        _fail(path, "expected at least one drafter", fld="drafters")
    for name, spec in meta.drafters.items():
        if spec.kind not in DRAFTER_KINDS:
            _fail(path, f"unknown kind {shorten(spec.kind)}; expected one of {', '.join(DRAFTER_KINDS)}",
                  fld=f"drafters.{name}.kind")
        try:
            tree_params(spec.params)
        except ValueError as e:
            key, _, msg = str(e).partition(": ")
            _fail(path, msg, fld=f"drafters.{name}.{key}")


def _check_request(r: RequestTrace, meta: BundleMeta, path: str, line: int) -> None:
    for key in ("prompt_len", "output_len"):
        n = getattr(r, key)
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) \
                or not 1 <= n <= MAX_TOKENS_PER_REQUEST:
            _fail(path, f"expected an integer in [1, {MAX_TOKENS_PER_REQUEST}], got {shorten(n)}", line, key)
    if r.arrival_time is not None and not (math.isfinite(r.arrival_time) and r.arrival_time >= 0):
        _fail(path, f"expected a finite number >= 0, got {shorten(r.arrival_time)}", line, "arrival_time")
    if r.prompt_token_ids is not None and len(r.prompt_token_ids) != r.prompt_len:
        _fail(path, f"has {len(r.prompt_token_ids)} ids but prompt_len is {r.prompt_len}", line,
              "prompt_token_ids")
    if r.output_token_ids is not None and len(r.output_token_ids) != r.output_len:
        _fail(path, f"has {len(r.output_token_ids)} ids but output_len is {r.output_len}", line,
              "output_token_ids")
    missing = set(meta.drafters) - set(r.drafters)
    if missing:
        _fail(path, f"no trace for drafter(s) {sorted(missing)} named in trace.yaml", line, "drafters")
    extra = set(r.drafters) - set(meta.drafters)
    if extra:
        _fail(path, f"drafter(s) {sorted(extra)} are not declared in trace.yaml", line, "drafters")
    for d, t in r.drafters.items():
        f = f"drafters.{d}"
        if t.acc_len.shape != (r.output_len,):
            _fail(path, f"expected {r.output_len} values (output_len), got {t.acc_len.shape[0]}", line,
                  f + ".acc_len")
        if t.acc_len.size and t.acc_len.min() < 1:
            p = int(np.argmin(t.acc_len))
            _fail(path, f"expected integers >= 1, got {int(t.acc_len[p])} at position {p}", line, f + ".acc_len")
        if t.tv is not None:
            if t.tv.shape != (r.output_len,):
                _fail(path, f"expected {r.output_len} values (output_len), got {t.tv.shape[0]}", line, f + ".tv")
            bad = ~((t.tv >= 0) & (t.tv <= 1))
            if bad.any():
                p = int(np.argmax(bad))
                _fail(path, f"expected numbers in [0, 1], got {float(t.tv[p])} at position {p}", line, f + ".tv")
        if t.proposal_len is not None:
            if t.proposal_len.shape != (r.output_len,):
                _fail(path, f"expected {r.output_len} values (output_len), got {t.proposal_len.shape[0]}", line,
                      f + ".proposal_len")
            if t.proposal_len.size and t.proposal_len.min() < 0:
                p = int(np.argmin(t.proposal_len))
                _fail(path, f"expected integers >= 0, got {int(t.proposal_len[p])} at position {p}", line,
                      f + ".proposal_len")
        if t.tree_rank is not None:
            _check_tree_rank(t.tree_rank, r, meta.drafters[d], path, line, f + ".tree_rank")


def _check_tree_rank(ranks: np.ndarray, r: RequestTrace, spec: DrafterSpec, path: str, line: int, fld: str) -> None:
    """tree_rank's shape (output_len, tree_depth), range [0, tree_top_k] and its tail (drafts past the output's
    end are never among the top K) against the drafter's declared params; errors name the request by its line
    (as every request error here: an id is the file's text, never echoed)."""
    where = ""  # the field names the drafter: drafters.<name>.tree_rank
    declared = tree_params(spec.params)
    if declared is None:
        _fail(path, where + "given, but this drafter's trace.yaml params declare no "
              "tree_top_k and tree_depth", line, fld)
    top_k, depth = declared
    if ranks.shape != (r.output_len, depth):
        _fail(path, where + f"expected {r.output_len} rows (output_len) of {depth} ranks (tree_depth), got shape "
              f"{tuple(ranks.shape)}", line, fld)
    bad = (ranks < 0) | (ranks > top_k)
    if bad.any():
        p, j = (int(x) for x in np.argwhere(bad)[0])
        _fail(path, where + f"expected ranks in [0, {top_k}] (tree_top_k = not among the top {top_k}), got "
              f"{int(ranks[p, j])} at position {p}, depth {j}", line, fld)
    tail = tail_violation(ranks, top_k)
    if tail is not None:
        p, j = tail
        _fail(path, where + f"position {p}, depth {j} lies past the output's end ({r.output_len} tokens) and "
              f"must be {top_k} (not among the top {top_k}), got {int(ranks[p, j])}", line, fld)


_INT32 = np.iinfo(np.int32)
_INT32_MIN, _INT32_MAX = int(_INT32.min), int(_INT32.max)  # plain ints: iinfo's properties are computed per read


def _int_array(value: Any, path: str, line: int, fld: str) -> np.ndarray:
    """A JSON list of 32-bit integers (no bools) as int32; checked in C where the list is plain ints in range (a
    bundle holds hundreds of thousands), element by element only to name the first bad one."""
    if not isinstance(value, list) or not (set(map(type, value)) <= {int}  # plain ints: JSON's only kind
                                           or all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        _fail(path, "expected a list of integers", line, fld)
    try:
        wide = np.array(value, dtype=np.int64)
    except OverflowError:  # beyond 64 bits: certainly out of range, found below
        wide = None
    if wide is None or (wide.size and (int(wide.min()) < _INT32_MIN or int(wide.max()) > _INT32_MAX)):
        for p, v in enumerate(value):
            if not _INT32_MIN <= v <= _INT32_MAX:
                _fail(path, f"expected 32-bit integers, got {v} at position {p}", line, fld)
    return wide.astype(np.int32)


def _rank_table(value: Any, path: str, line: int, fld: str) -> np.ndarray:
    """tree_rank as a 2-D int32 array (rows of equal length of integers); shape and range are checked against
    the drafter's params in _check_tree_rank, then parse_request stores it compactly (traces/tree.rank_dtype)."""
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        _fail(path, "expected a list (one per output position) of lists of ranks", line, fld)
    width = len(value[0]) if value else 0
    for p, row in enumerate(value):
        if len(row) != width:
            _fail(path, f"expected every row to hold {width} ranks like row 0, got {len(row)} at position {p}",
                  line, fld)
        for v in row:
            if type(v) is not int or not _INT32_MIN <= v <= _INT32_MAX:
                _fail(path, f"expected 32-bit integers, got {shorten(v)} at position {p}", line, fld)
    return np.asarray(value, dtype=np.int32).reshape(len(value), width)


def _float_array(value: Any, path: str, line: int, fld: str) -> np.ndarray:
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        _fail(path, "expected a list of numbers", line, fld)
    return np.asarray(value, dtype=np.float32)


# ---------------------------------------------------------------- parsing


def parse_meta(doc: Any, path: str) -> BundleMeta:
    """Build BundleMeta from the parsed `trace.yaml`, naming the key that is wrong."""
    if not isinstance(doc, dict):
        _fail(path, f"expected a mapping at the top level, got {type(doc).__name__}")
    unknown = set(doc) - _META_KEYS
    if unknown:
        _fail(path, f"unknown key(s) {_names(unknown)}; expected only {sorted(_META_KEYS)}")
    for key in ("target", "drafters"):
        if key not in doc:
            _fail(path, "missing required key", fld=key)
    if not isinstance(doc["target"], str) or not doc["target"]:
        _fail(path, f"expected a model name (string), got {shorten(doc['target'])}", fld="target")
    drafters_doc = doc["drafters"]
    if not isinstance(drafters_doc, dict) or not drafters_doc:
        _fail(path, "expected a non-empty mapping of drafter name -> {kind, cost_model}", fld="drafters")
    drafters: dict[str, DrafterSpec] = {}
    for name, spec in drafters_doc.items():
        f = f"drafters.{name}"
        if not isinstance(spec, dict):
            _fail(path, "expected a mapping with keys kind, cost_model[, params]", fld=f)
        unknown = set(spec) - {"kind", "cost_model", "params"}
        if unknown:
            _fail(path, f"unknown key(s) {_names(unknown)}; expected kind, cost_model, params", fld=f)
        if "kind" not in spec:
            _fail(path, "missing required key", fld=f + ".kind")
        for key in ("kind", "cost_model"):
            if key in spec and (not isinstance(spec[key], str) or not spec[key]):
                _fail(path, f"expected a non-empty string, got {shorten(spec[key])}", fld=f"{f}.{key}")
        params = spec.get("params") or {}
        if not isinstance(params, dict):
            _fail(path, "expected a mapping", fld=f + ".params")
        drafters[str(name)] = DrafterSpec(str(name), str(spec["kind"]), str(spec.get("cost_model", name)), params)
    for key in ("source", "extra"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            _fail(path, f"expected a mapping, got {type(doc[key]).__name__}", fld=key)
    for key in ("dataset", "tool_version"):
        if key in doc and not isinstance(doc[key], str):
            _fail(path, f"expected a string, got {type(doc[key]).__name__} {shorten(doc[key])}", fld=key)
    temperature = doc.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        _fail(path, f"expected a number, got {shorten(temperature)}", fld="temperature")
    schema = doc.get("schema_version", SCHEMA_VERSION)
    if isinstance(schema, bool) or not isinstance(schema, int):
        _fail(path, f"expected an integer, got {shorten(schema)}", fld="schema_version")
    meta = BundleMeta(
        target=doc["target"],
        drafters=drafters,
        temperature=float(temperature),
        dataset=str(doc.get("dataset", "unknown")),
        source=dict(doc.get("source") or {}),
        tool_version=str(doc.get("tool_version", TOOL_VERSION)),
        schema_version=schema,
        extra=dict(doc.get("extra") or {}),
    )
    _check_meta(meta, path)
    return meta


def parse_request(doc: Any, meta: BundleMeta, path: str, line: int) -> RequestTrace:
    """Build one RequestTrace from a parsed JSONL line, naming the field that is wrong."""
    if not isinstance(doc, dict):
        _fail(path, f"expected a JSON object, got {type(doc).__name__}", line)
    unknown = set(doc) - _REQUEST_KEYS
    if unknown:
        _fail(path, f"unknown key(s) {_names(unknown)}; expected only {sorted(_REQUEST_KEYS)}", line)
    for key in ("id", "drafters"):
        if key not in doc:
            _fail(path, "missing required field", line, key)
    rid = doc["id"]
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
        _fail(path, f"expected a non-empty string (or an integer), got {shorten(rid)}", line, "id")
    drafters_doc = doc["drafters"]
    if not isinstance(drafters_doc, dict):
        _fail(path, "expected an object of drafter name -> {acc_len, tv?, proposal_len?}", line, "drafters")
    drafters: dict[str, DrafterTrace] = {}
    for name, t in drafters_doc.items():
        f = f"drafters.{name}"
        if not isinstance(t, dict):
            _fail(path, "expected an object with acc_len[, tv, proposal_len]", line, f)
        unknown = set(t) - _DRAFTER_TRACE_KEYS
        if unknown:
            _fail(path, f"unknown key(s) {_names(unknown)}; expected acc_len, tv, proposal_len", line, f)
        if "acc_len" not in t:
            _fail(path, "missing required field", line, f + ".acc_len")
        drafters[name] = DrafterTrace(
            acc_len=_int_array(t["acc_len"], path, line, f + ".acc_len"),
            tv=None if t.get("tv") is None else _float_array(t["tv"], path, line, f + ".tv"),
            proposal_len=None if t.get("proposal_len") is None
            else _int_array(t["proposal_len"], path, line, f + ".proposal_len"),
            tree_rank=None if t.get("tree_rank") is None
            else _rank_table(t["tree_rank"], path, line, f + ".tree_rank"),
        )
    first = next(iter(drafters.values()), None)
    output_len = doc.get("output_len", None if first is None else int(first.acc_len.shape[0]))
    prompt_ids = doc.get("prompt_token_ids")
    output_ids = doc.get("output_token_ids")
    if prompt_ids is not None:
        prompt_ids = _int_array(prompt_ids, path, line, "prompt_token_ids").tolist()
    if output_ids is not None:
        output_ids = _int_array(output_ids, path, line, "output_token_ids").tolist()
    prompt_len = doc.get("prompt_len", None if prompt_ids is None else len(prompt_ids))
    if prompt_len is None:
        _fail(path, "missing: give prompt_len or prompt_token_ids", line, "prompt_len")
    for key, val in (("prompt_len", prompt_len), ("output_len", output_len)):
        if isinstance(val, bool) or not isinstance(val, int):
            _fail(path, f"expected an integer, got {shorten(val)}", line, key)
    arrival = doc.get("arrival_time")
    if arrival is not None and (isinstance(arrival, bool) or not isinstance(arrival, (int, float))):
        _fail(path, f"expected a number or null, got {shorten(arrival)}", line, "arrival_time")
    category = doc.get("category")
    if category is not None and not isinstance(category, str):
        _fail(path, f"expected a string or null, got {shorten(category)}", line, "category")
    req = RequestTrace(
        id=str(doc["id"]),
        prompt_len=prompt_len,
        output_len=output_len,
        drafters=drafters,
        category=category,
        arrival_time=None if arrival is None else float(arrival),
        prompt_token_ids=prompt_ids,
        output_token_ids=output_ids,
    )
    _check_request(req, meta, path, line)
    for name, t in drafters.items():
        if t.tree_rank is not None:
            t.tree_rank = t.tree_rank.astype(rank_dtype(tree_params(meta.drafters[name].params)[0]))
    return req


REQUEST_FILES = ("requests.jsonl", "requests.jsonl.gz")
BUNDLE_FILES = frozenset({"trace.yaml", *REQUEST_FILES})


def _inside(path: Path, folder: Path) -> Path:
    """`path` if it is a regular file inside `folder` (a symlink may point within the bundle, never out of it);
    else TraceFormatError naming it, without reading it."""
    if path.is_symlink():
        target = resolved_path(path)
        if resolved_path(folder) not in target.parents:
            raise TraceFormatError(str(path), "is a symbolic link to a file outside the bundle folder; bundle files "
                                   "must be regular files inside it (copy the file in instead)")
    if path.exists() and not path.is_file():
        raise TraceFormatError(str(path), "is not a regular file")
    return path


def _requests_file(folder: Path) -> Path:
    found = [_inside(folder / n, folder) for n in REQUEST_FILES if (folder / n).exists() or (folder / n).is_symlink()]
    if len(found) > 1:
        raise TraceFormatError(str(folder), f"holds both {found[0].name} and {found[1].name}; which one is "
                               "the bundle's is ambiguous: remove one")
    if not found:
        raise TraceFormatError(str(folder), "no requests.jsonl or requests.jsonl.gz in the bundle folder")
    if not found[0].is_file():
        raise TraceFormatError(str(found[0]), "is not a file")
    return found[0]


def load_bundle(path: str | Path) -> TraceBundle:
    """Load and validate a bundle folder; errors name the file, line and field."""
    folder = Path(path)
    if not folder.is_dir():
        raise TraceFormatError(str(folder), "not a trace bundle folder (expected a folder with trace.yaml)")
    meta_path = _inside(folder / "trace.yaml", folder)
    if not meta_path.is_file():
        raise TraceFormatError(str(meta_path), "missing: every bundle needs a trace.yaml")
    meta = parse_meta(load_yaml_file(meta_path), str(meta_path))
    req_path = _requests_file(folder)
    requests: list[RequestTrace] = []
    seen: set[str] = set()
    for line_no, doc in iter_jsonl(req_path):
        req = parse_request(doc, meta, str(req_path), line_no)
        if req.id in seen:
            raise TraceFormatError(str(req_path), f"duplicate request id {shorten(req.id)}", line=line_no, field="id")
        seen.add(req.id)
        requests.append(req)
    if not requests:
        raise TraceFormatError(str(req_path), "contains no requests")
    return TraceBundle(meta, requests)


def load_bundle_cached(path: str | Path) -> TraceBundle:
    """`load_bundle(path)` parsed once per process while its files are unchanged (traces/file_cache.py: keyed by
    path, mtime and size; a bundle that fails to load is never kept, so each call names the bad file again).
    Each call gets its own request list, request and meta objects; the acceptance arrays are shared, read-only."""
    from dataclasses import replace

    from traces.file_cache import cached_parse

    folder = Path(path)
    files = [folder / "trace.yaml", *(folder / n for n in REQUEST_FILES)]
    stored = cached_parse("trace-bundle", files, lambda: _frozen_arrays(load_bundle(folder)))
    m = stored.meta
    meta = replace(m, drafters=dict(m.drafters), source=dict(m.source), extra=dict(m.extra))
    return TraceBundle(meta, [_own_copy(r) for r in stored.requests])


def _own_copy(r: RequestTrace) -> RequestTrace:
    """A shallow copy of a cached request with its own drafters mapping: its fields copied as they are (a plan loads
    the bundle once per simulation; dataclasses.replace, re-running __init__, and copy.copy take about 3x longer)."""
    c = object.__new__(RequestTrace)
    c.__dict__.update(r.__dict__)
    c.drafters = dict(r.drafters)
    return c


def _frozen_arrays(bundle: TraceBundle) -> TraceBundle:
    """Mark every acceptance array read-only: a cached bundle is shared by later loads."""
    for r in bundle.requests:
        for t in r.drafters.values():
            for a in (t.acc_len, t.tv, t.proposal_len, t.tree_rank):
                if a is not None:
                    a.setflags(write=False)
    return bundle


def meta_to_dict(meta: BundleMeta) -> dict[str, Any]:
    """Plain-data form of BundleMeta, as written to trace.yaml."""
    return {
        "schema_version": meta.schema_version,
        "target": meta.target,
        "temperature": meta.temperature,
        "dataset": meta.dataset,
        "drafters": {
            n: {"kind": s.kind, "cost_model": s.cost_model, **({"params": s.params} if s.params else {})}
            for n, s in meta.drafters.items()
        },
        "source": meta.source,
        "tool_version": meta.tool_version,
        **({"extra": meta.extra} if meta.extra else {}),
    }


def request_to_dict(r: RequestTrace) -> dict[str, Any]:
    """Plain-data form of one request, as written to requests.jsonl."""
    out: dict[str, Any] = {"id": r.id, "prompt_len": int(r.prompt_len), "output_len": int(r.output_len)}
    if r.category is not None:
        out["category"] = r.category
    if r.arrival_time is not None:
        out["arrival_time"] = r.arrival_time
    if r.prompt_token_ids is not None:
        out["prompt_token_ids"] = list(map(int, r.prompt_token_ids))
    if r.output_token_ids is not None:
        out["output_token_ids"] = list(map(int, r.output_token_ids))
    drafters = {}
    for d, t in r.drafters.items():
        entry: dict[str, Any] = {"acc_len": t.acc_len.astype(int).tolist()}
        if t.tv is not None:
            entry["tv"] = [round(float(x), 5) for x in t.tv]
        if t.proposal_len is not None:
            entry["proposal_len"] = t.proposal_len.astype(int).tolist()
        if t.tree_rank is not None:
            entry["tree_rank"] = t.tree_rank.astype(int).tolist()
        drafters[d] = entry
    out["drafters"] = drafters
    return out


def check_bundle_target(path: str | Path, compress: bool = False) -> Path:
    """`path` if a bundle may be written there, else ValueError saying why: a new or empty folder, or a bundle
    folder (nothing but trace.yaml and its requests file) in the same format. Nothing is ever deleted: a
    requests file of the other format (which may be the user's only copy) is refused, not replaced."""
    folder = Path(path).expanduser()
    resolved = resolved_path(folder)
    if resolved == Path(resolved.anchor):
        raise ValueError(f"{folder}: refusing to write a bundle into the root folder; choose another folder")
    if folder.exists() or folder.is_symlink():
        if not folder.is_dir():
            raise ValueError(f"{folder}: exists and is not a folder; choose another output folder")
        names = {p.name for p in folder.iterdir()}
        foreign = sorted(n for n in names - BUNDLE_FILES if not n.startswith("."))  # hidden: tools' own state
        if foreign:
            raise ValueError(f"{folder}: holds files a trace bundle does not ({_names(foreign)}); refusing to write "
                             "a bundle into it; choose a new or empty folder")
        other = REQUEST_FILES[0] if compress else REQUEST_FILES[1]
        if other in names:
            raise ValueError(f"{folder}: holds {other}; writing {REQUEST_FILES[1] if compress else REQUEST_FILES[0]} "
                             f"beside it would make the bundle ambiguous and draftsim never deletes it; remove it "
                             "yourself or choose another folder")
        for name in names & BUNDLE_FILES:
            if (folder / name).is_symlink() or not (folder / name).is_file():
                raise ValueError(f"{folder / name}: is a link or not a regular file; refusing to replace it")
    return folder


def save_bundle(bundle: TraceBundle, path: str | Path, *, compress: bool = False) -> Path:
    """Validate and write a bundle folder (see check_bundle_target for where), each file via temp + rename,
    requests first: a reader sees the old bundle or the new one."""
    folder = check_bundle_target(path, compress)
    bundle.validate(str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    name = REQUEST_FILES[1] if compress else REQUEST_FILES[0]
    try:
        with atomic_open(folder / name, "w") as f:
            for r in bundle.requests:
                f.write(json.dumps(request_to_dict(r), separators=(",", ":")) + "\n")
        import yaml

        atomic_write_text(folder / "trace.yaml", yaml.safe_dump(meta_to_dict(bundle.meta), sort_keys=False))
    except UnicodeEncodeError as e:
        raise TraceFormatError(str(folder / "trace.yaml"), f"text that is not valid Unicode ({e.reason}: "
                               f"{shorten(e.object[e.start:e.end])}); every name must be UTF-8 text") from None
    return folder
