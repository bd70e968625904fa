"""Per-process memo of what files parse to, keyed by each file's resolved path, modification time and size.

A plan or sweep point re-reads the same trace bundle and profiles for every simulation (the bundle's parse was ~0.3 s
per point, a third of a compiled plan's CPU); this keeps the parsed object per process. A file changed on disk (new
mtime or size) is parsed again, so an edited bundle is never served stale; a file that fails to parse is never
stored, so every call raises the loader's own error naming the file. Callers get the stored object: what they are
given must be immutable or copied by the caller (traces/bundle.py load_bundle_cached).
"""
from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")
MAX_ENTRIES = 32  # distinct (kind, files) kept; the least recently used goes first
_STORE: "OrderedDict[tuple, Any]" = OrderedDict()


def files_key(paths: Sequence[str | Path]) -> tuple:
    """(resolved path, mtime_ns, size) of each file; a missing file keys as (path, None, None)."""
    out = []
    for p in paths:
        path = Path(p)
        try:
            st = os.stat(path)
        except OSError:
            out.append((str(path.absolute()), None, None))
            continue
        out.append((str(path.resolve()), st.st_mtime_ns, st.st_size))
    return tuple(out)


def cached_parse(kind: str, paths: Sequence[str | Path], parse: Callable[[], T]) -> T:
    """`parse()`'s result for these files as they are now: stored per process under `kind` and the files' key."""
    key = (kind, files_key(paths))
    if key in _STORE:
        _STORE.move_to_end(key)
        return _STORE[key]
    value = parse()  # an error propagates and nothing is stored
    if files_key(paths) == key[1]:  # unchanged while it was read: safe to keep
        _STORE[key] = value
        while len(_STORE) > MAX_ENTRIES:
            _STORE.popitem(last=False)
    return value


def clear() -> None:
    """Forget every stored parse (tests)."""
    _STORE.clear()
