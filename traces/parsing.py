"""Safe parsing of the YAML and JSON text every input file is made of.

One place for the rules every loader shares, each failure a `TraceFormatError` naming the file, the
line and the key: text must be UTF-8; a mapping must not repeat a key (YAML and JSON would silently
keep the last one); numbers must be finite (YAML `.nan`/`.inf`, JSON `NaN`/`Infinity`, `1e999`);
nesting is limited to `MAX_NESTING` levels and a document to `MAX_NODES` values (deep nesting
overflows Python's stack later, YAML aliases can expand a small file exponentially); JSON integers
and YAML integers must fit in 64 bits. Only regular files are read (a FIFO, a device such as `/dev/zero` or a
folder is refused before any read, so nothing blocks or reads without end), a text file is at most
`MAX_TEXT_BYTES` and a JSONL line at most `MAX_LINE_BYTES`. YAML nesting is refused while the document is
composed, before it is built, and numbers follow YAML 1.2 (`1e3` is the number 1000, not a string).
"""
from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
import stat
import zlib
from pathlib import Path
from typing import IO, Any, Iterator


from traces.errors import TraceFormatError
from traces.limits import MAX_LINE_BYTES, MAX_TEXT_BYTES

MAX_NESTING = 64
MAX_NODES = 1_000_000
MAX_INT = 2**63 - 1  # integers must fit int64


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def resolved_path(path: str | os.PathLike) -> Path:
    """`path` made absolute with every symbolic link followed; a link loop (`trace.yaml -> trace.yaml`) is a
    TraceFormatError naming the path (pathlib raises RuntimeError or OSError for it, by Python version)."""
    try:
        return Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as e:
        raise TraceFormatError(str(path), f"cannot be resolved: a symbolic link loop or an unreadable link "
                               f"({e.strerror if isinstance(e, OSError) else 'symlink loop'})") from None


def open_regular(path: str | Path) -> IO[bytes]:
    """`path` opened for binary reading if it is a regular file (symlinks followed); else TraceFormatError.

    Opened non-blocking and checked with fstat on the open descriptor, so a FIFO or a device never blocks
    or streams forever and a file swapped after a check cannot slip through."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.EISDIR:
            raise TraceFormatError(where, "is a folder, expected a regular file") from None
        raise TraceFormatError(where, f"cannot be read: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TraceFormatError(where, f"is {_kind_of(mode)}, expected a regular file")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, limit: int = MAX_TEXT_BYTES) -> bytes:
    """A regular file's bytes, at most `limit` of them (a larger file is an error naming it)."""
    with open_regular(path) as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise TraceFormatError(str(path), f"cannot be read: {e.strerror or e}") from None
    if len(data) > limit:
        raise TraceFormatError(str(path), f"too large: more than {limit:,} bytes")
    return data


def read_text(path: str | Path, limit: int = MAX_TEXT_BYTES) -> str:
    """A regular file's text as UTF-8; unreadable, oversized or non-UTF-8 files are errors naming the file."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TraceFormatError(str(path), f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
                               line=line) from None


class _TooDeep(Exception):
    def __init__(self, mark: Any):
        super().__init__("too deep")
        self.mark = mark


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first: int, again: int):
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


@functools.cache
def _loader() -> type:
    """The checking YAML loader class, built on first use (PyYAML is imported only by commands that read YAML)."""
    import yaml

    class _UniqueKeyLoader(yaml.SafeLoader):
        """SafeLoader that refuses a mapping that repeats a key or nests deeper than MAX_NESTING, reading YAML 1.2
        floats (`1e3`, not only `1.0e+3`)."""

        def __init__(self, stream: Any):
            super().__init__(stream)
            self._depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            """Compose one node, refusing depth as it is reached (before the deeper levels are even parsed)."""
            self._depth += 1
            try:
                if self._depth > MAX_NESTING:
                    raise _TooDeep(self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    # YAML 1.2 floats: YAML 1.1 (PyYAML) reads `1e3` as a string; a user who typed a number means a number.
    _UniqueKeyLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"))

    def _construct_mapping(loader: Any, node: Any, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:  # before merging: a key may override a `<<` merged one, not repeat itself
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(key, seen[key], line)
                seen[key] = line
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a mapping key must be a plain value, got {type(key).__name__}",
                    key_node.start_mark) from None
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    _UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

    return _UniqueKeyLoader


_FLOW_TOKENS = re.compile(r"[\[\]{}\"'#\n]")


def _flow_depth_line(text: str) -> int | None:
    """Line where `[`/`{` flow nesting first exceeds MAX_NESTING (quotes and comments skipped), else None.

    PyYAML's scanner reads a whole flow collection ahead before the composer sees its first node, in time
    quadratic in its depth, so deep flow nesting is refused from the raw text, before any parsing."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return None
    depth, quote, comment, line = 0, "", False, 1
    for m in _FLOW_TOKENS.finditer(text):
        c, i = m.group(), m.start()
        if c == "\n":
            line, comment = line + 1, False
            continue
        if comment:
            continue
        if quote:
            if c == quote and not (quote == '"' and _escaped(text, i)):
                if quote == "'" and text.startswith("''", i):  # '' is an escaped quote inside '...'
                    continue
                quote = ""
            continue
        prev = text[i - 1] if i else " "
        if c == "#" and prev in " \t\n":
            comment = True
        elif c in "\"'" and prev in " \t\n[{,:":
            quote = c
        elif c in "[{" and (depth > 0 or prev in " \t\n"):  # in block context mid-word: plain text
            depth += 1
            if depth > MAX_NESTING:
                return line
        elif c in "]}":
            depth = max(0, depth - 1)
    return None


def _escaped(text: str, i: int) -> bool:
    n = 0
    while i - n - 1 >= 0 and text[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def parse_yaml(text: str, path: str, *, what: str = "YAML") -> Any:
    """Parse YAML text (safe tags only) and check keys, numbers, nesting and size.

    A document in JSON syntax (YAML 1.2 is a superset of JSON: same values) is read by the JSON parser with the
    same checks, without loading PyYAML (~30 ms of a command's start-up); anything else, JSON-like YAML flow
    style such as `{a: 1}` included, goes to PyYAML."""
    if text.lstrip()[:1] == "{":
        try:
            return parse_json(text, path)
        except TraceFormatError:
            pass  # not JSON: PyYAML reads it (and names what is wrong in YAML's terms)
    deep = _flow_depth_line(text)
    if deep is not None:
        raise TraceFormatError(path, f"nested too deeply (more than {MAX_NESTING} levels)", line=deep)
    import yaml

    try:
        doc = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as e:
        raise TraceFormatError(path, f"duplicate key {e.key!r} (first on line {e.first}); each key may appear once",
                               line=e.again) from None
    except _TooDeep as e:
        raise TraceFormatError(path, f"nested too deeply (more than {MAX_NESTING} levels)",
                               line=e.mark.line + 1 if e.mark is not None else None) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise TraceFormatError(path, f"not valid {what}: {problem}",
                               line=None if mark is None else mark.line + 1) from None
    except RecursionError:
        raise TraceFormatError(path, f"nested too deeply (more than {MAX_NESTING} levels)") from None
    check_plain_data(doc, path)
    return doc


def load_yaml_file(path: str | Path, *, what: str = "YAML") -> Any:
    """read_text + parse_yaml."""
    return parse_yaml(read_text(path), str(path), what=what)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}; each key may appear once")
        out[k] = v
    return out


_JSON = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_reject_constant)  # built once: a
# decoder per call (what json.loads with hooks does) costs as much as parsing a short line


def parse_json(text: str, path: str, line: int | None = None, *, check_values: bool = True) -> Any:
    """Parse one JSON document (a JSONL line) and check keys, numbers, nesting and size (`check_values=False`: the
    caller's schema checks every value's type and range itself, so the walk over all values is skipped)."""
    try:
        doc = _JSON.decode(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(path, f"not valid JSON: {e.msg} at column {e.colno}", line=line) from None
    except RecursionError:
        raise TraceFormatError(path, f"not valid JSON: nested too deeply (more than {MAX_NESTING} levels)",
                               line=line) from None
    except ValueError as e:
        raise TraceFormatError(path, f"not valid JSON: {e}", line=line) from None
    if check_values:
        check_plain_data(doc, path, line, max_nodes=None)  # JSON has no aliases: its size is the file's
    return doc


def iter_jsonl(path: str | Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) of every line of a `.jsonl` or `.jsonl.gz` file; a blank line, a line that
    is not UTF-8 or not JSON or longer than `max_line_bytes`, a file that is not a regular file, and a truncated
    or corrupt gzip stream are errors naming the file and line."""
    where = str(path)
    for line_no, text in iter_jsonl_text(path, max_line_bytes):
        yield line_no, parse_json(text, where, line_no)


def iter_jsonl_text(path: str | Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line of a `.jsonl` or `.jsonl.gz` file, checked as `iter_jsonl` does but not
    parsed: for a reader whose schema checks every value itself (`parse_json(..., check_values=False)`)."""
    where = str(path)
    line_no = 0
    try:
        with open_regular(path) as raw_file:
            f: IO[bytes] = raw_file
            if where.endswith(".gz"):
                import gzip  # only for .gz files: plain JSONL is read without it

                f = gzip.GzipFile(fileobj=raw_file, mode="rb")
            with f:
                while True:
                    raw = f.readline(max_line_bytes + 1)
                    if not raw:
                        break
                    line_no += 1
                    if len(raw) > max_line_bytes:
                        raise TraceFormatError(where, f"line longer than {max_line_bytes:,} bytes", line=line_no)
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        raise TraceFormatError(where, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                               f"{e.start + 1})", line=line_no) from None
                    if not text.strip():
                        raise TraceFormatError(where, "blank line (expected one JSON object per line)", line=line_no)
                    yield line_no, text
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise TraceFormatError(where, f"cannot be read completely ({type(e).__name__}: {e}); the file may be "
                               "truncated or corrupt", line=line_no + 1) from None


def check_plain_data(doc: Any, path: str, line: int | None = None, *, max_nodes: int | None = MAX_NODES) -> None:
    """Refuse non-finite floats, nesting deeper than MAX_NESTING and more than `max_nodes` values (iteratively)."""
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    nodes = 0
    while stack:
        value, where, depth = stack.pop()
        nodes += 1
        if max_nodes is not None and nodes > max_nodes:
            raise TraceFormatError(path, f"too large: more than {max_nodes:,} values (YAML aliases expand "
                                   "where they are used)", line=line)
        if depth > MAX_NESTING:
            raise TraceFormatError(path, f"nested too deeply (more than {MAX_NESTING} levels)", line=line,
                                   field=(where[:60] + "...") if len(where) > 60 else where or None)
        if isinstance(value, dict):
            for k in value:
                if isinstance(k, str) and not _text_ok(k):
                    _bad_text(k, path, line, where or None)
            stack.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, str):
            if not _text_ok(value):
                _bad_text(value, path, line, where or None)
        elif isinstance(value, list):
            if _plain_numbers(value):  # fast path for long acc_len / tv lists: checked in C loops
                nodes += len(value)
                bad = next((i for i, v in enumerate(value) if not _number_ok(v)), None) \
                    if not _numbers_ok(value) else None
                if bad is not None:
                    _bad_number(value[bad], path, line, f"{where}[{bad}]")
            else:
                stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
        elif not _number_ok(value):
            _bad_number(value, path, line, where)


_NUMBER_TYPES = {int, float}


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_ok(text: str) -> bool:
    """False for a string holding a lone surrogate (JSON `\\ud800`): it cannot be written as UTF-8 later."""
    return text.isascii() or _SURROGATE.search(text) is None


def _bad_text(text: str, path: str, line: int | None, where: str | None) -> None:
    i = _SURROGATE.search(text).start()
    raise TraceFormatError(path, f"text with a lone surrogate (U+{ord(text[i]):04X} at character {i}), which is "
                           "not valid Unicode; expected UTF-8 text", line=line, field=where)


def _plain_numbers(values: list) -> bool:
    return set(map(type, values)) <= _NUMBER_TYPES  # one C pass (a token-id list has ~1,000 values)


def _numbers_ok(values: list) -> bool:
    """All finite and within int64 (values are ints and floats only)."""
    if not values:
        return True
    if float not in set(map(type, values)):  # ints only: two C passes
        return -MAX_INT - 1 <= min(values) and max(values) <= MAX_INT
    ints = [v for v in values if type(v) is int]
    floats = [v for v in values if type(v) is float]
    return (not ints or (-MAX_INT - 1 <= min(ints) and max(ints) <= MAX_INT)) and all(map(math.isfinite, floats))


def _number_ok(value: Any) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is int:
        return -MAX_INT - 1 <= value <= MAX_INT
    return True


def _bad_number(value: Any, path: str, line: int | None, where: str) -> None:
    what = "a finite number" if isinstance(value, float) else "an integer that fits in 64 bits"
    shown = value if isinstance(value, float) or abs(value) < 10**30 else f"{str(value)[:12]}... ({len(str(value))} digits)"
    raise TraceFormatError(path, f"expected {what}, got {shown}", line=line, field=where or None)
