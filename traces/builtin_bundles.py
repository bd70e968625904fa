"""Trace bundles shipped in the package (`builtin:NAME` in configs): traces/data/default and the measured
bundles in traces/data/bundles/ (any folder there with a trace.yaml)."""
from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"


def builtin_bundles() -> dict[str, Path]:
    """Name -> folder of every shipped bundle."""
    folders = [*DATA_DIR.iterdir(), *(DATA_DIR / "bundles").glob("*")]
    return {p.name: p for p in sorted(folders) if (p / "trace.yaml").is_file()}


def builtin_bundle_path(name: str) -> Path:
    """Folder of the shipped bundle `name`; ValueError naming the ones that exist."""
    found = builtin_bundles()
    if name not in found:
        raise ValueError(f"no built-in trace bundle {name!r}; built-in: {', '.join(found) or 'none'}")
    return found[name]


BUILTIN_PREFIX = "builtin:"


def bundle_folder(ref: str | Path) -> Path:
    """The folder a bundle reference names, as configs and `draftsim traces` read it: `builtin:NAME` (a shipped
    bundle; ValueError naming those that exist) or a folder path (not checked here)."""
    text = str(ref)
    if text.startswith(BUILTIN_PREFIX):
        return builtin_bundle_path(text[len(BUILTIN_PREFIX):])
    return Path(ref)
