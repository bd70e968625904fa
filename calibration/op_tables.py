"""Measured per-op latency tables (aiconfigurator-core's parquet files), read into grids that answer lookups.

aiconfigurator-core (PyPI, Apache-2.0; the optional extra `draftsim[aiconfigurator]`) ships, per GPU system,
backend and backend version, tables measured on real GPUs: `gemm_perf` (m x n x k, bf16), `context_attention_perf`
and `generation_attention_perf` (batch x sequence length x query heads, per KV heads and head dim; generation at
one query token per sequence) and `custom_allreduce_perf` (message elements x GPUs). Latencies are milliseconds.

Lookup rule, every table: piecewise linear in each axis over the measured grid (multilinear); beyond the last
grid point of an axis the last segment's slope continues (linear extrapolation), but never below the last
measured value (every axis is work: more of it never costs less; before the first point, never above the
first) nor below zero. Cells a table
leaves unmeasured inside its grid (the collector's out-of-memory corners: large batch x long context) are filled
the same way, along the sequence-length axis, from that row's last two measured points.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TABLES = {"gemm": "gemm", "context_attention": "attention", "generation_attention": "attention",
          "custom_allreduce": "comm"}
EXTRA_HINT = "install the optional extra: pip install 'draftsim[aiconfigurator]' (aiconfigurator-core==0.12.0)"


def default_root() -> Path:
    """aiconfigurator-core's `systems/data` folder; a clear error when the package is not installed."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"measured op tables need aiconfigurator-core: {EXTRA_HINT}")
    return Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"


def package_version() -> str:
    """aiconfigurator-core's installed version ('' when the tables come from elsewhere)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return ""


@dataclass
class Grid:
    """A latency surface on a rectangular grid (axes ascending), answered multilinearly with linear extrapolation."""

    axes: tuple[np.ndarray, ...]
    values: np.ndarray  # milliseconds, shape = tuple(len(a) for a in axes), no NaN

    def __post_init__(self) -> None:
        if self.values.shape != tuple(len(a) for a in self.axes):
            raise ValueError(f"grid values of shape {self.values.shape} for axes of lengths "
                             f"{[len(a) for a in self.axes]}")
        if np.isnan(self.values).any():
            raise ValueError("grid has unmeasured cells; fill them first (fill_along)")

    def __call__(self, *point: float) -> float:
        return max(0.0, _interp(self.axes, self.values, [float(p) for p in point]))


def _interp(axes: tuple[np.ndarray, ...], values: np.ndarray, point: list[float]) -> float:
    """Multilinear interpolation; outside an axis, the end segment's line held monotone (one point: constant)."""
    if not axes:
        return float(values)
    a, x = axes[0], point[0]
    if len(a) == 1:
        return _interp(axes[1:], values[0], point[1:])
    i = int(np.clip(np.searchsorted(a, x, side="right") - 1, 0, len(a) - 2))
    w = (x - a[i]) / (a[i + 1] - a[i])
    lo = _interp(axes[1:], values[i], point[1:])
    hi = _interp(axes[1:], values[i + 1], point[1:])
    v = lo + w * (hi - lo)
    if x > a[-1]:  # more work than measured: never cheaper than the last measured point
        return max(v, hi)
    if x < a[0]:  # less work than measured: never dearer than the first
        return min(v, lo)
    return v


def fill_along(axis_values: np.ndarray, values: np.ndarray, axis: int, where: str) -> np.ndarray:
    """Fill the unmeasured (NaN) tail of every line along `axis` by continuing its last two measured points;
    a line with a gap before a measured point, or fewer than two measured points, is an error naming `where`."""
    out = np.moveaxis(values.copy(), axis, -1)
    flat = out.reshape(-1, out.shape[-1])
    x = axis_values.astype(float)
    for row in flat:
        ok = ~np.isnan(row)
        if ok.all():
            continue
        n = int(ok.sum())
        if n < 2 or not ok[:n].all():
            raise ValueError(f"{where}: a line of the table has {n} measured point(s) or a gap inside its "
                             "grid; cannot fill it by extrapolation")
        slope = (row[n - 1] - row[n - 2]) / (x[n - 1] - x[n - 2])
        row[n:] = row[n - 1] + slope * (x[n:] - x[n - 1])
    return np.moveaxis(flat.reshape(out.shape), -1, axis)


def grid_from_rows(rows, axes: list[str], where: str, fill_axis: str | None = None) -> Grid:
    """A Grid over `axes` from table rows (a pandas frame with those columns and `latency`); duplicates averaged."""
    import pandas as pd

    if rows.empty:
        raise ValueError(f"{where}: no rows")
    g = rows.groupby(axes)["latency"].mean()
    levels = [np.array(sorted(rows[a].unique()), dtype=float) for a in axes]
    full = pd.MultiIndex.from_product([sorted(rows[a].unique()) for a in axes]) if len(axes) > 1 else \
        pd.Index(sorted(rows[axes[0]].unique()))
    vals = g.reindex(full)
    arr = vals.to_numpy(dtype=float).reshape(tuple(len(v) for v in levels))
    if np.isnan(arr).any():
        if fill_axis is None:
            raise ValueError(f"{where}: the table does not measure every combination of {axes}")
        ax = axes.index(fill_axis)
        levels, arr = _prune(levels, arr, ax)
        arr = fill_along(levels[ax], arr, ax, where)
    return Grid(tuple(levels), arr)


def _fillable(line: np.ndarray) -> bool:
    ok = ~np.isnan(line)
    n = int(ok.sum())
    return n >= 2 and bool(ok[:n].all())


def _prune(levels: list[np.ndarray], arr: np.ndarray, ax: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Drop the grid values (of the axes other than `ax`) whose lines along `ax` cannot be filled (fewer than two
    measured points, or a gap before a measured one), the value with the most such lines first, until every line
    can be: the table's irregular corners are left out rather than guessed across."""
    levels = list(levels)
    while True:
        moved = np.moveaxis(arr, ax, -1)
        bad = np.apply_along_axis(lambda r: not _fillable(r), -1, moved)  # shape: the other axes
        if not bad.any():
            return levels, arr
        others = [i for i in range(arr.ndim) if i != ax]
        worst = None
        for j, i in enumerate(others):
            counts = bad.sum(axis=tuple(t for t in range(bad.ndim) if t != j)) / max(bad.size / bad.shape[j], 1)
            v = int(np.argmax(counts))
            if len(levels[i]) > 2 and (worst is None or counts[v] > worst[0]):
                worst = (counts[v], i, v)
        if worst is None:
            return levels, arr  # nothing left to drop: fill_along names the line it cannot fill
        _, i, v = worst
        levels[i] = np.delete(levels[i], v)
        arr = np.delete(arr, v, axis=i)


@dataclass
class OpTables:
    """One system's tables for one backend version: the lookups a step price needs, and where they came from."""

    system: str
    backend: str
    version: str
    files: dict[str, str]  # table -> file (relative to the data root) actually read
    gemm: Grid  # (m, n, k) -> ms, bf16
    generation_attention: dict[tuple[int, int], Grid]  # (kv heads, head dim) -> Grid(batch, kv_len, heads)
    context_attention: dict[tuple[int, int], Grid]  # (kv heads, head dim) -> Grid(batch, isl, heads)
    allreduce: dict[int, Grid]  # GPUs -> Grid(elements) for the CUDA-graph kernel
    allreduce_eager: dict[int, Grid] = field(default_factory=dict)  # GPUs -> Grid(elements), eager kernel
    device: str = ""

    def gemm_s(self, m: float, n: float, k: float) -> float:
        return self.gemm(m, n, k) * 1e-3

    def generation_attention_s(self, batch: float, kv_len: float, heads: float, kv_heads: int,
                               head_dim: int) -> float:
        return self._attn(self.generation_attention, "generation_attention", kv_heads, head_dim)(
            batch, kv_len, heads) * 1e-3

    def context_attention_s(self, batch: float, isl: float, heads: float, kv_heads: int, head_dim: int) -> float:
        return self._attn(self.context_attention, "context_attention", kv_heads, head_dim)(batch, isl, heads) * 1e-3

    def allreduce_s(self, elements: float, gpus: int, graph: bool = True) -> float:
        table = self.allreduce if graph or not self.allreduce_eager else self.allreduce_eager
        if gpus not in table:
            raise ValueError(f"{self.system} {self.backend} {self.version}: no all-reduce measured on {gpus} GPUs "
                             f"(measured: {sorted(table)})")
        return table[gpus](elements) * 1e-3

    def _attn(self, grids: dict, name: str, kv_heads: int, head_dim: int) -> Grid:
        if (kv_heads, head_dim) not in grids:
            raise ValueError(f"{self.system} {self.backend} {self.version} {name}: no rows for {kv_heads} KV heads "
                             f"of dimension {head_dim} (measured: {sorted(grids)})")
        return grids[(kv_heads, head_dim)]


def _versions(root: Path, system: str, folder: str, backend: str) -> list[str]:
    d = root / system / folder / backend
    return sorted((p.name for p in d.iterdir() if p.is_dir()), key=_version_key) if d.is_dir() else []


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in v.replace("rc", ".").split("."))


def _pick_version(root: Path, system: str, folder: str, backend: str, version: str, table: str) -> str:
    """`version` if the table exists there, else the newest older version that has it (named in provenance)."""
    have = [v for v in _versions(root, system, folder, backend)
            if (root / system / folder / backend / v / f"{table}_perf.parquet").is_file()]
    older = [v for v in have if _version_key(v) <= _version_key(version)]
    if not older:
        raise FileNotFoundError(f"{root / system / folder / backend}: no {table}_perf.parquet at version {version} "
                                f"or older (versions with it: {have or 'none'})")
    return older[-1]


def load_op_tables(system: str, version: str, backend: str = "vllm", root: str | Path | None = None) -> OpTables:
    """Read one system's GEMM, attention and all-reduce tables for `backend` `version` (bf16 weights and KV cache,
    full attention, FlashAttention-3 rows where the table has several kernels)."""
    import pandas as pd
    import pyarrow.parquet as pq

    root = Path(root) if root is not None else default_root()
    if not (root / system).is_dir():
        have = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise FileNotFoundError(f"{root}: no system {system!r} (have: {', '.join(have) or 'none'})")
    files: dict[str, str] = {}

    def read(table: str) -> pd.DataFrame:
        folder = TABLES[table]
        v = _pick_version(root, system, folder, backend, version, table)
        path = root / system / folder / backend / v / f"{table}_perf.parquet"
        files[table] = str(path.relative_to(root))
        return pq.read_table(path).to_pandas()

    def need(df: pd.DataFrame, table: str, cols: list[str]) -> None:
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"{files[table]}: missing column(s) {missing}; expected {cols}")

    g = read("gemm")
    need(g, "gemm", ["m", "n", "k", "latency", "gemm_dtype"])
    g = g[g["gemm_dtype"] == "bfloat16"]
    if "kernel_source" in g.columns and g["kernel_source"].nunique() > 1:
        g = g[g["kernel_source"] == g["kernel_source"].value_counts().idxmax()]
    gemm = grid_from_rows(g, ["m", "n", "k"], f"{files['gemm']} (bfloat16)", fill_axis="k")

    attn: dict[str, dict[tuple[int, int], Grid]] = {}
    for table, seq_axis in (("generation_attention", "step"), ("context_attention", "isl")):
        a = read(table)
        need(a, table, ["batch_size", seq_axis, "num_heads", "num_key_value_heads", "head_dim", "latency"])
        for col, want in (("kv_cache_dtype", "bfloat16"), ("window_size", 0), ("attn_dtype", "bfloat16")):
            if col in a.columns:
                a = a[a[col] == want]
        if "kernel_source" in a.columns and a["kernel_source"].nunique() > 1:
            a = a[a["kernel_source"] == a["kernel_source"].value_counts().idxmax()]
        a = a.copy()
        if table == "generation_attention":  # one query on top of isl + step cached tokens: the KV it reads
            a["kv_len"] = a["isl"] + a["step"] if "isl" in a.columns else a["step"] + 1
            seq_axis = "kv_len"
        grids = {}
        for (kvh, hd), rows in a.groupby(["num_key_value_heads", "head_dim"]):
            if rows["num_heads"].nunique() < 2 or rows["batch_size"].nunique() < 2 or rows[seq_axis].nunique() < 2:
                continue  # a table line too thin to interpolate: not offered (the lookup names what is)
            grids[(int(kvh), int(hd))] = grid_from_rows(rows, ["batch_size", seq_axis, "num_heads"],
                                                        f"{files[table]} (kv heads {kvh}, head dim {hd})",
                                                        fill_axis=seq_axis)
        attn[table] = grids

    ar = read("custom_allreduce")
    need(ar, "custom_allreduce", ["num_gpus", "message_size", "latency"])
    if "allreduce_dtype" in ar.columns:
        ar = ar[ar["allreduce_dtype"] == "bfloat16"]
    graph, eager = {}, {}
    for gpus, rows in ar.groupby("num_gpus"):
        kinds = rows["backend"] if "backend" in rows.columns else pd.Series(["graph"] * len(rows), index=rows.index)
        for store, pick in ((graph, kinds.str.contains("graph")), (eager, kinds.str.contains("eager"))):
            if pick.any():
                store[int(gpus)] = grid_from_rows(rows[pick], ["message_size"], f"{files['custom_allreduce']}")
        if int(gpus) not in graph:
            graph[int(gpus)] = grid_from_rows(rows, ["message_size"], f"{files['custom_allreduce']}")
    device = str(g["device"].iloc[0]) if "device" in g.columns and len(g) else ""
    return OpTables(system, backend, version, files, gemm, attn["generation_attention"], attn["context_attention"],
                    graph, eager, device)
