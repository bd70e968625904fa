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
    """Folder of the shipped bundle `name` (as `builtin_bundles()` maps it: of the two places a name may be, the later
    in sorted order); ValueError naming the ones that exist. Looks in those two places, not every folder (a plan
    resolves it once per simulation)."""
    if name and Path(name).name == name and name not in (".", ".."):
        hits = [p for p in sorted((DATA_DIR / name, DATA_DIR / "bundles" / name)) if (p / "trace.yaml").is_file()]
        if hits:
            return hits[-1]
    found = builtin_bundles()
    raise ValueError(f"no built-in trace bundle {name!r}; built-in: {', '.join(found) or 'none'}")


BUILTIN_PREFIX = "builtin:"


def bundle_folder(ref: str | Path) -> Path:
    """The folder a bundle reference names, as configs and `draftsim traces` read it: `builtin:NAME` (a shipped
    bundle; ValueError naming those that exist) or a folder path (not checked here)."""
    text = str(ref)
    if text.startswith(BUILTIN_PREFIX):
        return builtin_bundle_path(text[len(BUILTIN_PREFIX):])
    return Path(ref)
