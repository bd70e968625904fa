"""Fitted synthetic specs, cached by content: fitting the acceptance models of a bundle takes seconds, and the
same bundle is fitted again by every run with parametric lengths.

The key is a SHA-256 of everything the fit reads (each source's metadata, lengths and acceptance arrays), the
fit's arguments, the source code of the fitting modules and the numpy/scipy versions, so a changed bundle, a
changed fitting rule or another library version never reuses an old fit. Two levels: a dict in this process,
and YAML files under `$DRAFTSIM_CACHE_DIR` (default `$XDG_CACHE_HOME/draftsim` or `~/.cache/draftsim`; set it
to an empty string to switch the disk cache off), written atomically. A cached spec loads to the same
`SynthSpec` the fit returned (floats round-trip exactly through YAML), so results do not depend on whether the
cache was warm.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from importlib import metadata
from pathlib import Path

import yaml

from traces.atomic import atomic_write_text
from traces.bundle import TraceBundle
from traces.errors import TraceFormatError
from traces.parsing import load_yaml_file
from traces.synthetic.spec import SynthSpec, fit_synth_spec, parse_synth_spec, spec_to_yaml

CACHE_FORMAT = 1
_MEMORY: dict[str, SynthSpec] = {}
_MEMORY_LIMIT = 32
_HERE = Path(__file__).resolve().parent
# every module whose code decides a fitted spec (the generators, length fits, the replay walk behind the fits)
_FIT_SOURCES = (*sorted(_HERE.glob("*.py")), _HERE.parent / "lengths.py", _HERE.parent / "walk.py")


def cache_dir() -> Path | None:
    """Folder of the on-disk cache, or None when DRAFTSIM_CACHE_DIR is set to an empty string."""
    env = os.environ.get("DRAFTSIM_CACHE_DIR")
    if env is not None:
        return Path(env).expanduser() / "synth-specs" if env else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "draftsim" / "synth-specs"


def _library_versions() -> str:
    out = []
    for name in ("numpy", "scipy"):
        try:
            out.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=absent")
    return ",".join(out)


def fit_key(sources: dict[str, TraceBundle], models: dict[str, str] | None, num_requests: int | None,
            dataset: str, description: str) -> str:
    """Hex SHA-256 of every input of `fit_synth_spec`, the fitting code and the library versions."""
    h = hashlib.sha256()

    def put(*parts: object) -> None:
        for p in parts:
            h.update(repr(p).encode())
            h.update(b"\0")

    put(CACHE_FORMAT, _library_versions(), sorted((models or {}).items()), num_requests, dataset, description)
    for path in _FIT_SOURCES:
        put(path.name)
        h.update(path.read_bytes())
    for cat, b in sources.items():
        m = b.meta
        put(cat, m.target, m.temperature, m.dataset, [(n, d.kind, d.cost_model) for n, d in m.drafters.items()],
            len(b.requests))
        for r in b.requests:
            put(r.prompt_len, r.output_len)
            for name in m.drafters:
                t = r.drafters[name]
                for arr in (t.acc_len, t.tv, t.proposal_len):
                    if arr is None:
                        put(None)
                    else:
                        put(arr.dtype.str, arr.shape)
                        h.update(arr.tobytes())
    return h.hexdigest()


def _read(path: Path) -> SynthSpec | None:
    """The cached spec, or None when the file is absent or unreadable (it is then fitted and rewritten)."""
    try:
        return parse_synth_spec(load_yaml_file(path), str(path))
    except FileNotFoundError:
        return None
    except TraceFormatError as e:
        if not path.exists():
            return None
        warnings.warn(f"{path}: ignoring a damaged cached spec ({e}); fitting again", stacklevel=3)
        return None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TraceFormatError) as e:
        warnings.warn(f"{path}: ignoring a damaged cached spec ({e}); fitting again", stacklevel=3)
        return None


def _write(path: Path, spec: SynthSpec) -> None:
    try:
        atomic_write_text(path, spec_to_yaml(spec))
    except OSError as e:
        warnings.warn(f"{path}: cannot write the fitted-spec cache ({e}); the next run fits again", stacklevel=3)


def fit_synth_spec_cached(sources: dict[str, TraceBundle], models: dict[str, str] | None = None,
                          num_requests: int | None = None, dataset: str = "synthetic",
                          description: str = "") -> SynthSpec:
    """`fit_synth_spec` with the same arguments, from the cache when this exact fit was done before."""
    key = fit_key(sources, models, num_requests, dataset, description)
    spec = _MEMORY.get(key)
    folder = cache_dir()
    path = folder / f"{key}.yaml" if folder is not None else None
    if spec is None and path is not None:
        spec = _read(path)
    if spec is None:
        spec = fit_synth_spec(sources, models, num_requests=num_requests, dataset=dataset, description=description)
        if path is not None:
            _write(path, spec)
    if len(_MEMORY) >= _MEMORY_LIMIT and key not in _MEMORY:
        _MEMORY.pop(next(iter(_MEMORY)))
    _MEMORY[key] = spec
    return spec.model_copy(deep=True)


def clear_memory_cache() -> None:
    """Forget the fits held in this process (the disk cache stays)."""
    _MEMORY.clear()
