"""PNG plots of a comparison of runs: latency CDFs, throughput vs latency, acceptance lengths, batch and KV over time.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend switch), so it is
safe to call from notebooks and headless machines alike. Every file is written atomically.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from simulator.metrics import per_request_acceptance_length
from traces.atomic import atomic_open

if TYPE_CHECKING:  # matplotlib (~0.5 s to import) loads when a figure is drawn, not with the module
    from matplotlib.figure import Figure

PLOT_FILES = ("latency_cdf.png", "throughput_latency.png", "acceptance_length.png", "batch_kv_over_time.png")
_STYLES = ("-", "--", "-.", ":")
_DPI = 110


def _figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    """A figure on the Agg canvas and its axes as a flat array."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes.ravel()


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: float | None = None, tight: bool = False) -> Path:
    """The one PNG saver: atomic write, no timestamp or software metadata (reruns give the same bytes);
    closes figures that pyplot made so they do not pile up."""
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi, metadata={"Software": None}, bbox_inches="tight" if tight else None)
    if getattr(fig.canvas, "manager", None) is not None:  # a pyplot figure
        import matplotlib.pyplot as plt

        plt.close(fig)
    return Path(path)


def _style(i: int) -> dict:
    """Colour and line style of the i-th run (10 colours x 4 styles before repeating)."""
    return {"color": f"C{i % 10}", "linestyle": _STYLES[(i // 10) % len(_STYLES)]}


def _finished(df: pd.DataFrame) -> pd.DataFrame:
    return df[np.isfinite(df["finish_time"].to_numpy(dtype=float))]


def _heavy_tailed(series: Mapping[str, np.ndarray], ratio: float = 20.0) -> bool:
    """True when a log axis reads better: positive values whose max exceeds `ratio` times the smallest run median."""
    vals = [v for v in series.values() if v.size]
    if not vals or min(float(v.min()) for v in vals) <= 0:
        return False
    return max(float(v.max()) for v in vals) > ratio * min(float(np.median(v)) for v in vals)


def plot_latency_cdfs(requests_by_run: Mapping[str, pd.DataFrame], path: str | os.PathLike) -> Path:
    """Empirical CDFs of TTFT, TPOT (ms) and E2E (s) per run, finished requests only."""
    fig, axes = _figure(1, 3, 15, 4.6)
    panels = (("ttft", "TTFT (ms)", 1e3), ("tpot", "TPOT (ms)", 1e3), ("e2e", "E2E latency (s)", 1.0))
    for ax, (col, label, scale) in zip(axes, panels):
        series = {}
        for run, df in requests_by_run.items():
            v = np.sort(_finished(df)[col].to_numpy(dtype=float))
            series[run] = v[np.isfinite(v)] * scale
        for i, (run, v) in enumerate(series.items()):
            if v.size == 0:
                continue
            y = np.arange(1, v.size + 1) / v.size
            ax.step(np.concatenate(([v[0]], v)), np.concatenate(([0.0], y)), where="post", label=run,
                    linewidth=1.6, **_style(i))
        if _heavy_tailed(series):
            ax.set_xscale("log")
            label += ", log scale"
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Latency CDFs per run")
    return save_figure(fig, path)


def plot_throughput_latency(summary_by_run: Mapping[str, Mapping], path: str | os.PathLike) -> Path:
    """Bars of output throughput per run, and a scatter of throughput against E2E p50 labelled by run.

    Runs without a throughput (nothing finished, or the configuration did not fit) are left out.
    """
    fig, axes = _figure(1, 2, 14, 5.0)
    runs = [r for r in summary_by_run if summary_by_run[r].get("throughput_tok_s") is not None]
    thr = np.array([summary_by_run[r]["throughput_tok_s"] for r in runs], dtype=float)
    p50 = np.array([np.nan if summary_by_run[r].get("e2e_p50_s") is None else summary_by_run[r]["e2e_p50_s"]
                    for r in runs], dtype=float)
    ax = axes[0]
    colors = [_style(i)["color"] for i in range(len(runs))]
    bars = ax.bar(range(len(runs)), thr, color=colors)
    ax.bar_label(bars, labels=[f"{t:,.0f}" for t in thr], fontsize=8, padding=2)
    ax.set_xticks(range(len(runs)), runs, rotation=30, ha="right", fontsize=9)
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_title("Throughput per run")
    ax.grid(True, axis="y", alpha=0.3)
    ax.margins(y=0.12)
    ax = axes[1]
    for i, r in enumerate(runs):
        if np.isfinite(p50[i]):
            ax.scatter(p50[i], thr[i], s=60, color=colors[i], zorder=3)
            ax.annotate(r, (p50[i], thr[i]), xytext=(6, 4), textcoords="offset points", fontsize=8)
    ax.set_xlabel("E2E latency p50 (s)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_title("Throughput vs median latency (up-left is better)")
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.15, y=0.12)
    return save_figure(fig, path)


def plot_acceptance_lengths(requests_by_run: Mapping[str, pd.DataFrame], path: str | os.PathLike) -> Path | None:
    """Histogram of per-request acceptance length (tokens per verify step) for runs that drafted; None if none did."""
    data = {r: per_request_acceptance_length(df) for r, df in requests_by_run.items()
            if int(df["proposed_tokens"].sum()) > 0}
    data = {r: v for r, v in data.items() if v.size}
    if not data:
        return None
    fig, axes = _figure(1, 1, 9, 4.8)
    ax = axes[0]
    hi = max(float(v.max()) for v in data.values())
    bins = np.linspace(1.0, max(hi, 1.0) + 1e-9, 41)
    order = list(requests_by_run)
    for r, v in data.items():
        i = order.index(r)
        ax.hist(v, bins=bins, histtype="step", linewidth=1.6, label=f"{r} (mean {v.mean():.2f})",
                color=_style(i)["color"], linestyle=_style(i)["linestyle"])
    ax.set_xlabel("tokens emitted per verify step (per request)")
    ax.set_ylabel("requests")
    ax.set_title("Acceptance length per request")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return save_figure(fig, path)


def binned_time_mean(start: np.ndarray, end: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Duration-weighted mean of `values` per time bin (slice assigned by its midpoint); NaN for empty bins."""
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    w = end - start
    idx = np.clip(np.searchsorted(edges, (start + end) / 2, side="right") - 1, 0, len(edges) - 2)
    num = np.bincount(idx, weights=w * np.asarray(values, dtype=float), minlength=len(edges) - 1)
    den = np.bincount(idx, weights=w, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def plot_batch_and_kv(steps_by_run: Mapping[str, pd.DataFrame], path: str | os.PathLike, bins: int = 150) -> Path:
    """Sequences per target verify/decode forward and target KV blocks used over time, as time-binned means."""
    fig, axes = _figure(2, 1, 12, 7.0)
    ends = [float(df["end"].max()) for df in steps_by_run.values() if len(df)]
    t_max = max(ends) if ends else 1.0
    edges = np.linspace(0.0, t_max if t_max > 0 else 1.0, bins + 1)
    mids = (edges[:-1] + edges[1:]) / 2
    for i, (run, df) in enumerate(steps_by_run.items()):
        tgt = df[df["device"] == "target"]
        work = tgt[tgt["phase"].isin(["decode", "verify", "mixed"])]
        if len(work):
            axes[0].plot(mids, binned_time_mean(work["start"], work["end"], work["num_seqs"], edges),
                         linewidth=1.4, label=run, **_style(i))
        if len(tgt):
            axes[1].plot(mids, binned_time_mean(tgt["start"], tgt["end"], tgt["kv_blocks_used"], edges),
                         linewidth=1.4, label=run, **_style(i))
    width = t_max / bins
    axes[0].set_ylabel("sequences per verify/decode forward")
    axes[0].set_title(f"Running batch size (time-weighted mean per {width:.3g} s bin)")
    axes[1].set_ylabel("KV blocks used (target)")
    axes[1].set_title(f"KV cache usage (time-weighted mean per {width:.3g} s bin)")
    for ax in axes:
        ax.set_xlabel("simulated time (s)")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.set_xlim(0, t_max if t_max > 0 else 1.0)
    if steps_by_run:
        axes[0].legend(fontsize=8, loc="upper right", ncols=2)
    return save_figure(fig, path)


def write_plots(
    plot_dir: str | os.PathLike,
    requests_by_run: Mapping[str, pd.DataFrame],
    steps_by_run: Mapping[str, pd.DataFrame],
    summary_by_run: Mapping[str, Mapping],
) -> list[Path]:
    """Write every plot into `plot_dir`; returns the files written (no acceptance plot when no run drafted)."""
    d = Path(plot_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = [
        plot_latency_cdfs(requests_by_run, d / "latency_cdf.png"),
        plot_throughput_latency(summary_by_run, d / "throughput_latency.png"),
        plot_acceptance_lengths(requests_by_run, d / "acceptance_length.png"),
        plot_batch_and_kv(steps_by_run, d / "batch_kv_over_time.png"),
    ]
    return [p for p in written if p is not None]
