"""Latency profiles: how long one forward step takes for the batch it actually has.

A profile maps (num_seqs, batched_tokens, kv_tokens) to seconds for one (model, hardware,
backend, dtype). Kinds: `linear` (a*kv + b*batched + c*seqs + d), `table` (interpolated from
measurements, linear fit outside them) and `roofline` (from catalogs; see simulator/costs/roofline.py).
Every profile carries its provenance and, when fitted, the raw measurements and fit error.
Profile files are YAML; built-in ones live in traces/data/profiles/.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import traces
from traces.errors import TraceFormatError, shorten
from simulator.costs.profile_records import MAX_COEFFICIENT_S, Measurement, Provenance, check_coefficients
from traces.parsing import load_yaml_file

TERMS = ("kv_tokens", "batched_tokens", "num_seqs", "const")


@runtime_checkable
class LatencyProfile(Protocol):
    """Anything that prices one forward step of a batch."""

    name: str

    def step_time(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float: ...


def linear_step_time(a, b, s, d, num_seqs, batched_tokens, kv_tokens):
    """a * kv_tokens + b * batched_tokens + s * num_seqs + d, in that order: the one linear-profile rule (plain
    Python; the compiled engine compiles it)."""
    return a * kv_tokens + b * batched_tokens + s * num_seqs + d


@dataclass
class LinearProfile:
    """t = kv_tokens*a + batched_tokens*b + num_seqs*c + const."""

    name: str
    coefficients: dict[str, float]
    model: str = ""
    provenance: Provenance = field(default_factory=lambda: Provenance("unknown"))
    measurements: list[Measurement] = field(default_factory=list)
    fit: dict[str, Any] = field(default_factory=dict)
    kind: str = "linear"

    def __post_init__(self) -> None:
        unknown = set(self.coefficients) - set(TERMS)
        if unknown:
            raise ValueError(f"profile {self.name!r}: unknown coefficient(s) {sorted(unknown)}; "
                             f"expected some of {TERMS}")
        check_coefficients(f"profile {self.name!r}", self.coefficients)
        c = self.coefficients
        self._a, self._b = float(c.get("kv_tokens", 0.0)), float(c.get("batched_tokens", 0.0))
        self._s, self._d = float(c.get("num_seqs", 0.0)), float(c.get("const", 0.0))

    @property
    def terms(self) -> tuple[float, float, float, float]:
        """(a, b, s, d): seconds per KV token, per batched token, per sequence, and per step."""
        return self._a, self._b, self._s, self._d

    def step_time(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        return linear_step_time(self._a, self._b, self._s, self._d, num_seqs, batched_tokens, kv_tokens)


# scipy's LinearNDInterpolator: a point within this many units of a simplex (barycentric) is inside it
TABLE_EPS = 100 * 2.0 ** -52
TABLE_HEAD = 7  # TableProfile.data's numbers before the simplices: the axes and the linear fit


def table_step_time(data, num_seqs, batched_tokens, kv_tokens):
    """A table profile's seconds: (num_seqs, batched_tokens, kv_tokens) in log1p space, read on the axes the
    measurements vary along, interpolated linearly in the first simplex of their Delaunay triangulation that holds
    the point; outside them all (and everywhere when there is none), the linear fit. `data` (TableProfile.data):
    the axes (data[0:3]: 0 sequences, 1 tokens, 2 KV; -1 past the nd used), the linear fit's (a, b, s, d), then the
    simplices one after another: scipy's Delaunay.transform rows ((nd + 1) x nd), then the seconds at the nd + 1
    vertices. One array, not a record: the compiled engine passes profile records by value, and each field of
    theirs costs every step. scipy's LinearNDInterpolator's barycentric arithmetic in its order; the one table rule
    (plain Python; the compiled engine compiles it)."""
    u = (math.log1p(num_seqs), math.log1p(batched_tokens), math.log1p(kv_tokens))
    nd = 3 if data[2] >= 0 else 2
    x = (u[int(data[0])], u[int(data[1])], u[int(data[nd - 1])])
    width = (nd + 1) * (nd + 1)
    for t in range(TABLE_HEAD, len(data), width):
        if data[t] != data[t]:  # NaN: a degenerate simplex, which holds no volume
            continue
        origin = t + nd * nd  # the transform's last row: the simplex's last vertex
        rest = 1.0
        inside = True
        for i in range(nd):
            c = 0.0
            for j in range(nd):
                c += data[t + i * nd + j] * (x[j] - data[origin + j])
            rest -= c
            if not -TABLE_EPS <= c <= 1.0 + TABLE_EPS:
                inside = False
                break
        if not inside or not -TABLE_EPS <= rest <= 1.0 + TABLE_EPS:
            continue
        seconds = 0.0
        rest = 1.0
        for i in range(nd):
            c = 0.0
            for j in range(nd):
                c += data[t + i * nd + j] * (x[j] - data[origin + j])
            rest -= c
            seconds += c * data[origin + nd + i]
        return seconds + rest * data[origin + nd + nd]
    return linear_step_time(data[3], data[4], data[5], data[6], num_seqs, batched_tokens, kv_tokens)


@dataclass
class TableProfile:
    """Interpolates measured points (piecewise linear in log1p space over the batch dimensions that vary among
    them: sequences, batched tokens, KV tokens; scipy's Delaunay triangulation, read by `table_step_time`); the
    linear fit of the same points (`fallback`) answers outside them, and everywhere when they span no volume."""

    name: str
    measurements: list[Measurement]
    model: str = ""
    provenance: Provenance = field(default_factory=lambda: Provenance("unknown"))
    fit: dict[str, Any] = field(default_factory=dict)
    kind: str = "table"

    def __post_init__(self) -> None:
        import numpy as np  # here, not at the top: reading a linear profile (`draftsim specbench`) needs no numpy
        from scipy.spatial import Delaunay

        if len(self.measurements) < 4:
            raise ValueError(f"table profile {self.name!r} needs at least 4 measurements, "
                             f"got {len(self.measurements)}")
        self.fallback = fit_linear(self.name, self.measurements).profile
        pts = np.array([[math.log1p(m.num_seqs), math.log1p(m.batched_tokens), math.log1p(m.kv_tokens)]
                        for m in self.measurements])
        vals = np.array([m.seconds for m in self.measurements], dtype=float)
        axes = [i for i in range(3) if np.ptp(pts[:, i]) > 0]
        rows = np.zeros(0)  # no simplex: the linear fit answers everywhere
        sub = pts[:, axes]
        if len(axes) >= 2 and np.linalg.matrix_rank(sub - sub.mean(axis=0)) == len(axes):
            tri = Delaunay(sub)  # as scipy's LinearNDInterpolator triangulates
            rows = np.concatenate([tri.transform.reshape(len(tri.simplices), -1), vals[tri.simplices]], axis=1)
        head = [*axes, *[-1] * (3 - len(axes)), *self.fallback.terms]
        self.data = np.concatenate([np.array(head, dtype=float), rows.ravel()])

    def step_time(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        return table_step_time(self.data, num_seqs, batched_tokens, kv_tokens)


@dataclass
class LinearFit:
    profile: LinearProfile
    mape: float  # mean absolute percentage error over the measurements, in percent
    per_term_share: dict[str, float]  # mean share of predicted time from each term


def fit_linear(name: str, measurements: list[Measurement], terms: tuple[str, ...] = TERMS, *,
               model: str = "", provenance: Provenance | None = None,
               weighting: Literal["relative", "absolute"] = "relative") -> LinearFit:
    """Least-squares fit (non-negative coefficients) of a linear profile. `relative` error weighting makes small
    steps matter as much as big ones; `absolute` keeps the fitted total time unbiased under noise (what
    predicting mean latencies needs: relative weighting pulls the fit below the mean of noisy steps)."""
    import numpy as np
    from scipy.optimize import nnls

    if not measurements:
        raise ValueError(f"cannot fit profile {name!r}: no measurements")
    cols = {
        "kv_tokens": [m.kv_tokens for m in measurements],
        "batched_tokens": [m.batched_tokens for m in measurements],
        "num_seqs": [m.num_seqs for m in measurements],
        "const": [1.0] * len(measurements),
    }
    X = np.array([cols[t] for t in terms], dtype=float).T
    y = np.array([m.seconds for m in measurements], dtype=float)
    if weighting not in ("relative", "absolute"):
        raise ValueError(f"weighting: expected 'relative' or 'absolute', got {shorten(weighting)}")
    w = 1.0 / np.maximum(y, 1e-12) if weighting == "relative" else np.ones_like(y)
    coef, _ = nnls(X * w[:, None], y * w)
    pred = X @ coef
    mape = float(np.mean(np.abs(pred - y) / np.maximum(y, 1e-12)) * 100.0)
    share = {t: float(np.mean(X[:, i] * coef[i] / np.maximum(pred, 1e-12))) for i, t in enumerate(terms)}
    prof = LinearProfile(name=name, coefficients={t: float(c) for t, c in zip(terms, coef)}, model=model,
                         provenance=provenance or Provenance("measured"), measurements=list(measurements),
                         fit={"method": f"nnls, {weighting} error", "mape_percent": mape, "term_share": share})
    return LinearFit(prof, mape, share)


def mape(profile: LatencyProfile, measurements: list[Measurement]) -> float:
    """Mean absolute percentage error of `profile` over measured points, in percent."""
    import numpy as np

    errs = [abs(profile.step_time(m.num_seqs, m.batched_tokens, m.kv_tokens) - m.seconds) / m.seconds
            for m in measurements if m.seconds > 0]
    return float(np.mean(errs) * 100.0) if errs else float("nan")


# ---------------------------------------------------------------- files


def profile_to_dict(profile: LinearProfile | TableProfile) -> dict[str, Any]:
    if profile.kind == "structured":
        from simulator.costs.step_model import structured_to_dict

        return structured_to_dict(profile)
    out: dict[str, Any] = {"kind": profile.kind, "name": profile.name, "model": profile.model,
                           "provenance": asdict(profile.provenance)}
    if isinstance(profile, LinearProfile):
        out["coefficients"] = dict(profile.coefficients)
    if profile.fit:
        out["fit"] = profile.fit
    out["measurements"] = [asdict(m) for m in profile.measurements]
    return out


def save_profile(profile: LinearProfile | TableProfile, path: str | Path) -> Path:
    """Write a profile YAML atomically, raw measurements and provenance included."""
    path = Path(path)
    import yaml

    from traces.atomic import atomic_write_text  # here: reading a profile needs no tempfile or gzip

    atomic_write_text(path, yaml.safe_dump(_plain(profile_to_dict(profile)), sort_keys=False))
    return path


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0:  # a numpy scalar; numpy need not be loaded
        return x.item()
    return x


def profile_from_dict(doc: Any, path: str) -> LinearProfile | TableProfile:
    """Parse a profile document; errors name the file and key."""
    if not isinstance(doc, dict):
        raise TraceFormatError(path, "expected a mapping at the top level")
    kind = doc.get("kind")
    allowed = {"kind", "name", "model", "provenance", "coefficients", "fit", "measurements"}
    if kind == "structured":
        allowed.add("form")
    unknown = set(doc) - allowed
    if unknown:
        raise TraceFormatError(path, f"unknown key(s) {sorted(unknown)}; expected some of {sorted(allowed)}")
    if kind not in ("linear", "table", "structured"):
        raise TraceFormatError(path, f"expected 'linear', 'table' or 'structured', got {shorten(kind)}", field="kind")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise TraceFormatError(path, "expected a non-empty string", field="name")
    prov_doc = doc.get("provenance") or {"source": "unknown"}
    try:
        prov = Provenance(**prov_doc)
    except TypeError as e:
        raise TraceFormatError(path, f"bad provenance: {e}", field="provenance") from e
    if not isinstance(prov_doc, dict) or not all(isinstance(v, (str, dict)) for v in prov_doc.values()):
        raise TraceFormatError(path, "expected a mapping of strings (source, backend, device, ...)",
                               field="provenance")
    for key in ("fit",):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise TraceFormatError(path, f"expected a mapping, got {shorten(doc[key])}", field=key)
    if doc.get("model") is not None and not isinstance(doc["model"], str):
        raise TraceFormatError(path, f"expected a model name (string), got {shorten(doc['model'])}", field="model")
    raw = doc.get("measurements") or []
    if not isinstance(raw, list):
        raise TraceFormatError(path, f"expected a list of measurements, got {type(raw).__name__}",
                               field="measurements")
    meas = [_measurement(m, path, f"measurements[{i}]") for i, m in enumerate(raw)]
    if kind == "structured":
        return _structured(doc, path, name, prov, meas)
    if kind == "linear":
        coef = doc.get("coefficients")
        if not isinstance(coef, dict) or not coef:
            raise TraceFormatError(path, f"expected a mapping of some of {TERMS} to seconds", field="coefficients")
        for t, v in coef.items():
            if t not in TERMS:
                raise TraceFormatError(path, f"unknown term; expected one of {TERMS}", field=f"coefficients.{t}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_COEFFICIENT_S:
                raise TraceFormatError(path, f"expected a number in [0, {MAX_COEFFICIENT_S}] (seconds), got {shorten(v)}",
                                       field=f"coefficients.{t}")
        return LinearProfile(name=name, coefficients={k: float(v) for k, v in coef.items()},
                             model=str(doc.get("model", "")), provenance=prov, measurements=meas,
                             fit=dict(doc.get("fit") or {}))
    try:
        return TableProfile(name=name, measurements=meas, model=str(doc.get("model", "")), provenance=prov,
                            fit=dict(doc.get("fit") or {}))
    except (ValueError, RuntimeError) as e:  # RuntimeError: scipy's Qhull on degenerate points
        raise TraceFormatError(path, str(e), field="measurements") from e


def _structured(doc: dict[str, Any], path: str, name: str, prov: Provenance, meas: list[Measurement]):
    """A `kind: structured` profile (simulator/costs/step_model.py): form and coefficients checked."""
    from simulator.costs.step_model import FORMS, LINEAR_TERMS, ROOFLINE_TERMS, StructuredProfile

    form = doc.get("form", "linear")
    if form not in FORMS:
        raise TraceFormatError(path, f"expected one of {FORMS}, got {shorten(form)}", field="form")
    terms = ROOFLINE_TERMS if form == "roofline" else LINEAR_TERMS
    coef = doc.get("coefficients")
    if not isinstance(coef, dict) or not coef:
        raise TraceFormatError(path, f"expected a mapping of some of {terms} to seconds", field="coefficients")
    for t, v in coef.items():
        if t not in terms:
            raise TraceFormatError(path, f"unknown term; expected one of {terms}", field=f"coefficients.{t}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_COEFFICIENT_S:
            raise TraceFormatError(path, f"expected a number in [0, {MAX_COEFFICIENT_S}] (seconds), got {shorten(v)}",
                                   field=f"coefficients.{t}")
    return StructuredProfile(name, {k: float(v) for k, v in coef.items()}, form, model=str(doc.get("model", "")),
                             provenance=prov, measurements=meas, fit=dict(doc.get("fit") or {}))


_MEASUREMENT_INTS = ("num_seqs", "batched_tokens", "kv_tokens", "repeats")
_MEASUREMENT_FLOATS = ("seconds", "spread", "load")


def _measurement(m: Any, path: str, where: str) -> Measurement:
    """One measured point from a profile file, every field checked (integers, finite seconds)."""
    if not isinstance(m, dict):
        raise TraceFormatError(path, f"expected a mapping with num_seqs, batched_tokens, kv_tokens, seconds, got "
                               f"{type(m).__name__}", field=where)
    unknown = set(m) - set(_MEASUREMENT_INTS) - set(_MEASUREMENT_FLOATS) - {"extra"}
    if unknown:
        raise TraceFormatError(path, "unknown key", field=f"{where}.{sorted(unknown)[0]}")
    for key in ("num_seqs", "batched_tokens", "kv_tokens", "seconds"):
        if key not in m:
            raise TraceFormatError(path, "required key is missing", field=f"{where}.{key}")
    for key in _MEASUREMENT_INTS:
        v = m.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2**40:
            raise TraceFormatError(path, f"expected an integer in [0, 2**40], got {shorten(v)}", field=f"{where}.{key}")
    for key in _MEASUREMENT_FLOATS:
        v = m.get(key, 0.0)
        if key == "load" and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1e6:
            raise TraceFormatError(path, f"expected a finite number in [0, 1e6], got {shorten(v)}", field=f"{where}.{key}")
    if m.get("extra") is not None and not isinstance(m["extra"], dict):
        raise TraceFormatError(path, f"expected a mapping, got {shorten(m['extra'])}", field=f"{where}.extra")
    return Measurement(**{k: v for k, v in m.items() if not (k == "extra" and v is None)})


def load_profile(path: str | Path) -> LinearProfile | TableProfile:
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(str(path), "latency profile file not found")
    return profile_from_dict(load_yaml_file(path), str(path))


def builtin_profile_dir() -> Path:
    # the package folder itself: importlib.resources would import zipfile, a slower start-up
    return Path(traces.__file__).resolve().parent / "data" / "profiles"


def builtin_profiles() -> dict[str, Path]:
    """Name -> file of every profile shipped with the package."""
    folder = builtin_profile_dir()
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def builtin_profile_file(name: str) -> Path | None:
    """The shipped profile file named `name` (a key of `builtin_profiles()`), None when there is none; one look, not
    a listing (a plan resolves profiles once per simulation)."""
    if not name or Path(name).name != name or name in (".", ".."):
        return None
    f = builtin_profile_dir() / f"{name}.yaml"
    return f if f.is_file() else None


def resolve_profile(name_or_path: str) -> LinearProfile | TableProfile:
    """A built-in profile by name, or a profile file by path."""
    builtin = builtin_profile_file(name_or_path)
    if builtin is not None:
        return load_profile(builtin)
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return load_profile(p)
    raise TraceFormatError(name_or_path, "no such latency profile: not a built-in name "
                           f"({', '.join(builtin_profiles()) or 'none'}) and not a file")
