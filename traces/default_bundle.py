"""The built-in default trace bundle shipped in the package (synthetic, chat-like; see its synth-spec.yaml)."""
from __future__ import annotations

from pathlib import Path

from traces.bundle import TraceBundle, load_bundle


def default_bundle_path() -> Path:
    """Folder of the built-in bundle: traces/data/default/."""
    return Path(__file__).resolve().parent / "data" / "default"


def default_spec_path() -> Path:
    """The spec the built-in bundle was drawn from (its trace.yaml names the exact command)."""
    return default_bundle_path() / "synth-spec.yaml"


def load_default_bundle() -> TraceBundle:
    """Load and validate the built-in bundle."""
    return load_bundle(default_bundle_path())
