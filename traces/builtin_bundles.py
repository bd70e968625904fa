"""Trace bundles shipped in the package (`builtin:NAME` in configs): folders under traces/data/ with a trace.yaml."""
from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"


def builtin_bundles() -> dict[str, Path]:
    """Name -> folder of every shipped bundle."""
    return {p.name: p for p in sorted(DATA_DIR.iterdir()) if (p / "trace.yaml").is_file()}


def builtin_bundle_path(name: str) -> Path:
    """Folder of the shipped bundle `name`; ValueError naming the ones that exist."""
    found = builtin_bundles()
    if name not in found:
        raise ValueError(f"no built-in trace bundle {name!r}; built-in: {', '.join(found) or 'none'}")
    return found[name]
