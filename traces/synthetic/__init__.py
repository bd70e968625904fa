"""Seeded synthetic acceptance generators (i.i.d., per-position, bursty n-gram) and synthetic bundles.

The names below load their module on first use (PEP 562), so `import traces.synthetic` (and the CLI's
argument registration, which only needs MODEL_NAMES) stays free of pydantic and scipy."""
from __future__ import annotations

import importlib
from typing import Any

# the acceptance models a synthetic spec can name, in the order `draftsim traces fit --help` lists them
MODEL_NAMES = ("iid", "positional", "bursty")

_WHERE = {
    "BurstyAcceptance": "bursty", "IidAcceptance": "iid", "PositionalAcceptance": "positional",
    "BetaParams": "tv", "TvModel": "tv",
    **{name: "spec" for name in ("MODELS", "CategorySpec", "DrafterDecl", "SynthSpec", "fit_category",
                                 "fit_synth_spec", "load_synth_spec", "make_synthetic_bundle", "parse_synth_spec",
                                 "spec_to_yaml", "split_by_category", "synth_requests")},
}

__all__ = ["MODEL_NAMES", *_WHERE]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'traces.synthetic' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"traces.synthetic.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
