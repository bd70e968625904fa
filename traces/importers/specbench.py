"""SpecDecode-Bench JSONL: a raw reader that keeps each proposer's own list, and conversion to a bundle.

Format (one JSON object per line, see `../shared/reference-traces/README.md`): `id`,
`prompt_token_ids`, `generated_token_ids`, `acc_eagle: {acc_len: [...]}`, `acc_ngram: {acc_len: [...]}`.
In the published files the EAGLE list sometimes has a different length from the n-gram list (the
EAGLE run generated a different output). The raw reader keeps both lists as they are (the
compatibility mode needs their exact lengths); `to_bundle` resolves a mismatch only by an explicit
policy and records what it did in `trace.yaml` `source`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection

from traces.errors import TraceFormatError, key_names, shorten
from traces.limits import MAX_TOKENS_PER_REQUEST
from traces.parsing import iter_jsonl_text, parse_json

if TYPE_CHECKING:  # the bundle (and numpy) are imported only by `to_bundle`: `draftsim specbench` needs neither
    from traces.bundle import DrafterSpec, TraceBundle

MAX_TOKEN_ID = 2**31 - 1  # token ids and acceptance lengths are stored as 32-bit integers

# proposer name (ours) -> key of its object in a SpecDecode-Bench line
PROPOSER_KEYS: dict[str, str] = {"eagle3": "acc_eagle", "ngram": "acc_ngram"}


def drafter_specs() -> dict[str, DrafterSpec]:
    """The drafters of a converted bundle (built on use: the bundle module imports numpy)."""
    from traces.bundle import DrafterSpec

    return {"eagle3": DrafterSpec("eagle3", "eagle", "eagle3-llama3.1-8b-h100-specbench"),
            "ngram": DrafterSpec("ngram", "ngram", "ngram")}


TARGET = "llama3.1-8b"
SOURCE_REPOSITORY = "SpecDecode-Bench/simulator"
MISMATCH_POLICIES = ("error", "shortest", "skip")
_TOKEN_LISTS = ("prompt_token_ids", "generated_token_ids")
_LINE_KEYS = {"id", *_TOKEN_LISTS, *PROPOSER_KEYS.values()}
_SORTED_LINE_KEYS = sorted(_LINE_KEYS)


@dataclass(frozen=True)
class SpecBenchRecord:
    """One line of a SpecDecode-Bench file, each proposer's `acc_len` list kept at its own length.

    Read with `token_ids=False`, the token-id lists are checked and counted but not kept (None): the
    compatibility mode needs only their lengths, and building ~350k integer objects is most of a file's read.
    Read with `acc_lists`, only the named proposers' lists are kept; every list's length is in `acc_lens`."""

    id: str
    line: int
    prompt_token_ids: list[int] | None
    generated_token_ids: list[int] | None
    acc_len: dict[str, list[int]]  # proposer name ("eagle3", "ngram") -> values >= 1 that fit 32-bit integers
    prompt_len: int = -1  # from prompt_token_ids when they are kept
    generated_len: int = -1  # from generated_token_ids when they are kept
    # proposer -> length of its acc_len list: given for lists read but not kept, filled in for those in acc_len
    acc_lens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for ids, length in (("prompt_token_ids", "prompt_len"), ("generated_token_ids", "generated_len")):
            values = getattr(self, ids)
            if values is not None:
                object.__setattr__(self, length, len(values))
            elif getattr(self, length) < 0:
                raise ValueError(f"SpecBenchRecord {self.id!r}: give {ids} or {length}")
        lens = dict(self.acc_lens)
        for name, values in self.acc_len.items():
            if lens.setdefault(name, len(values)) != len(values):
                raise ValueError(f"SpecBenchRecord {self.id!r}: acc_lens[{name!r}] is {lens[name]}, "
                                 f"its list has {len(values)} values")
        object.__setattr__(self, "acc_lens", lens)

    def output_len(self, proposer: str) -> int:
        """Output length as the reference counts it: the proposer's list length (combined: the shorter)."""
        if proposer == "combined":
            return min(self.acc_lens.values())
        return self.acc_lens[proposer]

    @property
    def lengths_agree(self) -> bool:
        """True when every acc_len list has as many positions as there are generated tokens."""
        n = self.generated_len
        return all(v == n for v in self.acc_lens.values())


@dataclass
class MismatchReport:
    """What a mismatch policy did: recorded verbatim in the bundle's `trace.yaml` `source`."""

    policy: str
    mismatched_requests: int = 0
    positions_cut: dict[str, int] = field(default_factory=dict)  # list name -> positions removed in all
    skipped_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"on_mismatch": self.policy, "mismatched_requests": self.mismatched_requests,
                "positions_cut": dict(self.positions_cut), "skipped_requests": len(self.skipped_ids),
                "skipped_ids": list(self.skipped_ids)}


# ---------------------------------------------------------------- raw reader


def _int_list(value: Any, path: str, line: int, fld: str, minimum: int, plain_line: bool) -> list[int]:
    """`value` if it is a list of integers in [minimum, MAX_TOKEN_ID]; else TraceFormatError naming the index.

    `plain_line`: the line's text holds no `-`, `true` or `false`, so no number in it is negative and no value a
    JSON boolean (which would pass as 0/1). Then the common case costs one C pass, two for acc_len: `sum` is an int
    only if no item is a float (it fails on a string, null, list or object), and a sum of non-negative integers
    within MAX_TOKEN_ID bounds every item; `min` checks acc_len's lower bound. Otherwise, or if a check fails,
    the plain checks and then the loop below find what is wrong."""
    if not isinstance(value, list):
        raise TraceFormatError(path, f"expected a list of integers, got {type(value).__name__}", line=line, field=fld)
    if len(value) > MAX_TOKENS_PER_REQUEST:
        raise TraceFormatError(path, f"{len(value):,} items; at most {MAX_TOKENS_PER_REQUEST:,} tokens per request",
                               line=line, field=fld)
    if not value:
        return value
    if plain_line:
        try:
            total = sum(value)
        except TypeError:
            total = None
        if type(total) is int and (total <= MAX_TOKEN_ID or max(value) <= MAX_TOKEN_ID) \
                and (minimum <= 0 or min(value) >= minimum):
            return value
    elif set(map(type, value)) <= {int} and minimum <= min(value) and max(value) <= MAX_TOKEN_ID:
        return value
    for i, v in enumerate(value):  # only finds what is wrong
        if type(v) is not int or not minimum <= v <= MAX_TOKEN_ID:
            raise TraceFormatError(path, f"expected 32-bit integers >= {minimum}, got {shorten(v, 40)} at index {i}",
                                   line=line, field=fld)
    return value


def parse_line(doc: Any, path: str, line: int, *, plain_line: bool = False,
               counted: dict[str, int] | None = None, keep: Collection[str] | None = None) -> SpecBenchRecord:
    """Validate one parsed JSON line, every value's type and range; every error names file, line and field.

    `plain_line`: the line's text holds no `-`, `true` or `false` (a faster check of the integer lists).
    `counted`: lists already checked in the text and replaced by null there (`_count_lists`): field
    (`prompt_token_ids`, `acc_ngram.acc_len`, ...) -> length; the record keeps their lengths only.
    `keep`: the proposers whose acc_len values the record keeps (None: every one); the others' lengths only."""
    counted = counted or {}
    if not isinstance(doc, dict):
        raise TraceFormatError(path, f"expected a JSON object, got {type(doc).__name__}", line=line)
    unknown = set(doc) - _LINE_KEYS
    if unknown:
        raise TraceFormatError(path, f"unknown key(s) {key_names(unknown)}; expected only "
                               f"{sorted(_LINE_KEYS)}", line=line)
    if len(doc) != len(_LINE_KEYS):
        for key in _SORTED_LINE_KEYS:
            if key not in doc:
                raise TraceFormatError(path, "missing required field", line=line, field=key)
    rid = doc["id"]
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
        raise TraceFormatError(path, f"expected a non-empty string (or integer), got {shorten(rid)}", line=line, field="id")
    if isinstance(rid, str) and not rid.isascii():
        try:
            rid.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate (JSON "\ud800") cannot be written out later
            raise TraceFormatError(path, f"text with a lone surrogate at character {e.start}, which is not valid "
                                   "Unicode; expected UTF-8 text", line=line, field="id") from None
    if isinstance(rid, int) and not -2**63 <= rid < 2**63:
        raise TraceFormatError(path, f"expected an integer that fits in 64 bits, got {shorten(rid)}", line=line,
                               field="id")
    ids: dict[str, list[int] | None] = {}
    for key in _TOKEN_LISTS:
        ids[key] = None if key in counted else _int_list(doc[key], path, line, key, 0, plain_line)
    if not (counted.get("prompt_token_ids") or ids["prompt_token_ids"]):
        raise TraceFormatError(path, "expected at least one prompt token", line=line, field="prompt_token_ids")
    acc: dict[str, list[int]] = {}
    lens: dict[str, int] = {}
    for name, key in PROPOSER_KEYS.items():
        obj = doc[key]
        if not isinstance(obj, dict) or "acc_len" not in obj:
            raise TraceFormatError(path, "expected an object with key 'acc_len'", line=line, field=key)
        if len(obj) != 1:
            raise TraceFormatError(path, f"unknown key(s) {key_names(set(obj) - {'acc_len'})}; expected only "
                                   "acc_len", line=line, field=key)
        fld = f"{key}.acc_len"
        if fld in counted:
            lens[name] = counted[fld]
            continue
        values = _int_list(obj["acc_len"], path, line, fld, 1, plain_line)
        if keep is None or name in keep:
            acc[name] = values
        else:
            lens[name] = len(values)
    return SpecBenchRecord(str(rid), line, ids["prompt_token_ids"], ids["generated_token_ids"], acc,
                           prompt_len=counted.get("prompt_token_ids", -1),
                           generated_len=counted.get("generated_token_ids", -1), acc_lens=lens)


def _plain_line(text: str) -> bool:
    """No `-` (so no negative number), no `true`, no `false` anywhere in the line (three C scans)."""
    return "-" not in text and "true" not in text and "false" not in text


def _byte_classes() -> bytes:
    """`bytes.translate` table: a digit 1-9 -> 0x01, 0 -> 0x03 (digit and zero bits), `,` -> 0x04, space -> 0x08,
    any other byte -> 0x10."""
    table = bytearray([0x10] * 256)
    table[ord("1"):ord("9") + 1] = b"\x01" * 9
    table[ord("0")], table[ord(",")], table[ord(" ")] = 0x03, 0x04, 0x08
    return bytes(table)


_BYTE_CLASSES = _byte_classes()


def _item_count(body: str, minimum: int) -> int | None:
    """How many items `body` holds if it is certainly a list of integers in [minimum, 2**31 - 1] (minimum 0 or
    1) as the release writes them (`12, 0, 345`: ASCII digits, exactly ", " between items, no leading zero, at
    most nine digits each); None at any doubt (the JSON parser then decides).

    Every byte's class (`_BYTE_CLASSES`) is one bit of a byte of one big integer, so each rule about neighbouring
    bytes is a shift and an AND over the whole list in C: `x >> 8 * k` moves byte i onto byte i + k, and a shift by
    8 * k - b also moves bit j onto bit j + b. Only digits, commas and spaces; the first and last bytes digits;
    a space right after every comma and nowhere else; no comma two bytes after a comma (`, ,`: an empty item) --
    so the text is digits separated by ", "; no run of ten digits; no item that starts with 0 and goes on."""
    if not body.isascii():
        return None
    raw = body.encode("ascii")
    if not (raw[:1].isdigit() and raw[-1:].isdigit()):  # also refuses an empty list
        return None
    classes = raw.translate(_BYTE_CLASSES)
    if b"\x10" in classes:  # a byte other than a digit, a comma or a space
        return None
    x = int.from_bytes(classes, "big")
    ones = int.from_bytes(b"\x01" * len(raw), "big")  # bit 0 of every byte
    digits, commas, spaces = x & ones, x & (ones << 2), x & (ones << 3)
    if commas >> 7 != spaces or commas >> 16 & commas:  # comma bit 2 of byte i onto space bit 3 of byte i + 1
        return None
    two = digits & digits >> 8
    four = two & two >> 16
    if four & four >> 32 & two >> 64:  # ten digits in a row: more than 32 bits
        return None
    zero_starts = spaces >> 10 & x  # space bit 3 of byte i onto the zero bit 1 of byte i + 1: an item starting with 0
    if raw[:1] == b"0" and (minimum > 0 or raw[1:2].isdigit()):  # 0 itself (below the minimum), or a leading zero
        return None
    if zero_starts and (minimum > 0 or zero_starts >> 9 & digits):
        return None
    return commas.bit_count() + 1


def _list_head(fld: str) -> str:
    """How the release writes the start of a list field: `"prompt_token_ids": [`, `"acc_ngram": {"acc_len": [`."""
    key, _, inner = fld.partition(".")
    return f'"{key}": {{"{inner}": [' if inner else f'"{key}": ['


# the list fields in the order the release writes them, and how each one starts in its text
_HEADS = {fld: _list_head(fld) for fld in (*_TOKEN_LISTS, *(f"{key}.acc_len" for key in PROPOSER_KEYS.values()))}


def _count_lists(text: str, fields: tuple[str, ...]) -> tuple[str, dict[str, int]]:
    """`text` with each list of `fields` (in line order) written as the release writes it replaced by null, and
    the lists' lengths; a list in any other form is left for the JSON parser.

    A list is taken only if it is certainly valid (`_item_count`); any doubt leaves it to the parser (slower, same
    result). The first `]` after `[` closes such a list, and null is a whole JSON value, so the rest of the line
    parses as before; the caller checks that the parsed line holds null exactly where a list was counted (else it
    parses the original text)."""
    counted: dict[str, int] = {}
    pieces: list[str] = []
    at = 0  # text[at:] is still to be copied
    for fld in fields:
        head = _HEADS[fld]
        start = text.find(head, at)
        if start < 0:
            continue
        body_start = start + len(head)
        end = text.find("]", body_start)
        if end < 0:
            continue
        n = _item_count(text[body_start:end], 0 if fld in _TOKEN_LISTS else 1)
        if n is None:
            continue
        counted[fld] = n
        pieces += (text[at:body_start - 1], "null")
        at = end + 1
    if not counted:
        return text, counted
    pieces.append(text[at:])
    return "".join(pieces), counted


def _null_at(doc: Any, fld: str) -> bool:
    """True if the parsed line holds null at `fld` (`key` or `key.acc_len`)."""
    key, _, inner = fld.partition(".")
    value = doc.get(key, 0) if isinstance(doc, dict) else 0
    if inner:
        value = value.get(inner, 0) if isinstance(value, dict) else 0
    return value is None


def read_specbench(path: str | Path, *, token_ids: bool = True,
                   acc_lists: Collection[str] | None = None) -> list[SpecBenchRecord]:
    """Read a SpecDecode-Bench `.jsonl` (or `.jsonl.gz`) file in file order, fully validated.

    `token_ids=False`: the token-id lists are checked and counted but not kept (`SpecBenchRecord`).
    `acc_lists`: the proposers (`eagle3`, `ngram`) whose acc_len values are kept; the other lists are checked
    and counted alike (default: every one kept)."""
    path = Path(path)
    where = str(path)
    if acc_lists is not None and not set(acc_lists) <= set(PROPOSER_KEYS):
        raise ValueError(f"acc_lists: expected some of {sorted(PROPOSER_KEYS)}, got {sorted(acc_lists)}")
    if not path.exists():
        raise TraceFormatError(where, "file not found (expected a SpecDecode-Bench .jsonl file)")
    fields = (() if token_ids else _TOKEN_LISTS) + tuple(
        f"{key}.acc_len" for name, key in PROPOSER_KEYS.items() if acc_lists is not None and name not in acc_lists)
    records: list[SpecBenchRecord] = []
    seen: dict[str, int] = {}
    for line_no, text in iter_jsonl_text(path):
        # parse_line checks every value of the schema (unknown keys refused), so the generic walk is not needed
        doc, counted, short = None, {}, text
        if fields:
            short, counted = _count_lists(text, fields)
            if counted:
                try:
                    doc = parse_json(short, where, line_no, check_values=False)
                except TraceFormatError:
                    doc = None  # the original text's own error is reported below
                if not all(_null_at(doc, fld) for fld in counted):
                    doc, counted, short = None, {}, text
        if doc is None:
            doc = parse_json(text, where, line_no, check_values=False)
        # the counted lists hold digits, commas and spaces only, so the text left decides the plain check
        rec = parse_line(doc, where, line_no, plain_line=_plain_line(short), counted=counted, keep=acc_lists)
        if rec.id in seen:
            raise TraceFormatError(where, f"duplicate id {shorten(rec.id)} (first on line {seen[rec.id]})",
                                   line=line_no, field="id")
        seen[rec.id] = line_no
        records.append(rec)
    if not records:
        raise TraceFormatError(where, "contains no requests")
    return records


# ---------------------------------------------------------------- conversion to a bundle


def dataset_from_filename(path: str | Path) -> str:
    """`combined_gsm8k.jsonl` -> `gsm8k`; otherwise the file stem."""
    stem = Path(path).name
    stem = re.sub(r"\.jsonl(\.gz)?$", "", stem)
    return stem[len("combined_"):] if stem.startswith("combined_") else stem


def _json_field(name: str) -> str:
    """Our list name -> the field path in the JSONL line (`eagle3` -> `acc_eagle.acc_len`)."""
    return f"{PROPOSER_KEYS[name]}.acc_len" if name in PROPOSER_KEYS else name


def _file_sha256(path: Path) -> str:
    import hashlib  # only when a bundle is written: keeps OpenSSL out of `draftsim specbench` start-up

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def to_bundle(records: list[SpecBenchRecord], *, on_mismatch: str = "error", dataset: str = "unknown",
              source_path: str | Path | None = None) -> tuple[TraceBundle, MismatchReport]:
    """Convert records to a TraceBundle (drafters eagle3 and ngram) under an explicit mismatch policy.

    A mismatch is a request whose acc_len lists and generated_token_ids do not all have one length.
    `error` raises TraceFormatError naming the line; `shortest` cuts every list to the shortest;
    `skip` leaves the request out. The report is also written into the bundle's `source`.
    """
    import numpy as np

    from traces.bundle import TOOL_VERSION, BundleMeta, DrafterTrace, RequestTrace, TraceBundle

    if on_mismatch not in MISMATCH_POLICIES:
        raise ValueError(f"on_mismatch: expected one of {MISMATCH_POLICIES}, got {shorten(on_mismatch)}")
    where = str(source_path) if source_path is not None else "<records>"
    report = MismatchReport(on_mismatch, positions_cut={"generated_token_ids": 0, **{d: 0 for d in PROPOSER_KEYS}})
    requests: list[RequestTrace] = []
    for rec in records:
        if rec.prompt_token_ids is None or rec.generated_token_ids is None:
            raise ValueError(f"request {rec.id!r} was read without its token ids; a bundle needs them "
                             "(read_specbench(..., token_ids=True))")
        if set(rec.acc_len) != set(PROPOSER_KEYS):
            raise ValueError(f"request {rec.id!r} was read without every acc_len list (kept: {sorted(rec.acc_len)}); "
                             "a bundle needs them all (read_specbench(..., acc_lists=None))")
        lengths = {"generated_token_ids": len(rec.generated_token_ids),
                   **{d: len(a) for d, a in rec.acc_len.items()}}
        n = min(lengths.values())
        if not rec.lengths_agree:
            report.mismatched_requests += 1
            if on_mismatch == "error":
                desc = ", ".join(f"{_json_field(k)} {v}" for k, v in lengths.items())
                odd = next(k for k in PROPOSER_KEYS if lengths[k] != lengths["generated_token_ids"])
                raise TraceFormatError(where, f"lists of request {rec.id!r} differ in length ({desc}); "
                                       "choose --on-mismatch shortest or skip", line=rec.line,
                                       field=_json_field(odd))
            if on_mismatch == "skip":
                report.skipped_ids.append(rec.id)
                continue
            for k, v in lengths.items():
                report.positions_cut[k] += v - n
        if n < 1:
            raise TraceFormatError(where, f"request {rec.id!r} has no output positions after the "
                                   f"{on_mismatch!r} policy (lengths {lengths}); a bundle needs output_len >= 1",
                                   line=rec.line, field="generated_token_ids")
        requests.append(RequestTrace(
            id=rec.id, prompt_len=rec.prompt_len, output_len=n,
            drafters={d: DrafterTrace(acc_len=np.array(a[:n], dtype=np.int32)) for d, a in rec.acc_len.items()},
            prompt_token_ids=list(rec.prompt_token_ids), output_token_ids=list(rec.generated_token_ids[:n]),
        ))
    if not requests:
        raise TraceFormatError(where, f"no request left after the {on_mismatch!r} mismatch policy")
    source: dict[str, Any] = {"format": "specdecode-bench-jsonl", "repository": SOURCE_REPOSITORY,
                              "requests_read": len(records), "requests_written": len(requests), **report.as_dict()}
    if source_path is not None:
        p = Path(source_path)
        source["file"] = p.name
        if p.is_file():
            source["sha256"] = _file_sha256(p)
    meta = BundleMeta(target=TARGET, drafters=drafter_specs(), temperature=0.0, dataset=dataset,
                      source=source, tool_version=TOOL_VERSION)
    bundle = TraceBundle(meta, requests)
    bundle.validate(where)
    return bundle, report


def import_specbench(path: str | Path, *, on_mismatch: str = "error",
                     dataset: str | None = None) -> tuple[TraceBundle, MismatchReport]:
    """Read a SpecDecode-Bench file and convert it to a bundle (dataset defaults to the file name's)."""
    records = read_specbench(path)
    return to_bundle(records, on_mismatch=on_mismatch, dataset=dataset or dataset_from_filename(path),
                     source_path=path)
