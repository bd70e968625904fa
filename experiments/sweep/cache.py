"""Per-point results cached by content hash under a sweep's output folder, written atomically, so an
interrupted sweep resumes where it stopped and never reads half a file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traces.atomic import atomic_write_text


class PointCache:
    """`<folder>/<hash[:2]>/<hash>.json` holding {"key": hash, "result": ...}."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        """The cached result, or None when absent. A file that is not ours is an error naming it."""
        p = self.path(key)
        if not p.is_file():
            return None
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{p}: unreadable cached sweep point ({e}); delete it to recompute") from e
        if not isinstance(doc, dict) or doc.get("key") != key or "result" not in doc:
            raise ValueError(f"{p}: not a cached result of point {key}; delete it to recompute")
        return doc["result"]

    def put(self, key: str, result: Any) -> None:
        write_json_atomic(self.path(key), {"key": key, "result": result})


def write_json_atomic(path: str | Path, doc: Any, indent: int | None = None) -> None:
    """Sorted-key JSON written atomically (traces.atomic: temp file, fsync, rename)."""
    atomic_write_text(path, json.dumps(doc, indent=indent, sort_keys=True, allow_nan=False) + "\n")
