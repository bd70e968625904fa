"""Content hashes of sweep points and the seeds derived from them (never from execution order)."""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(doc: Any) -> str:
    """One text per value: sorted keys, no whitespace, non-JSON leaves as str."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str, allow_nan=False)


def content_hash(doc: Any) -> str:
    """sha256 hex of the canonical JSON of `doc`."""
    return hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()


def derive_seed(sweep_seed: int, key: str) -> int:
    """A 31-bit seed from the sweep's seed and a point key (e.g. its config hash)."""
    digest = hashlib.sha256(f"{int(sweep_seed)}/{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
