"""PNG plots of a comparison of runs: latency CDFs, throughput vs latency, acceptance lengths, batch and KV over time.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend switch), so it is
safe to call from notebooks and headless machines alike. Every file is written atomically.

Readable at a glance and at any number of runs, and honest about scale: throughput axes start at zero and bars
(one row per run) carry their ratio to the baseline, so a 2% spread looks like 2%; runs on different GPU counts
are compared per GPU; overloaded runs are marked; runs with identical acceptance share one labelled histogram,
and many histograms get a panel each; legends go under or beside the panels in columns; KV use is a share of
the KV capacity with the capacity drawn; TTFT and TPOT are in ms, E2E in s. Cheap for large
runs: a CDF is drawn from at most CDF_POINTS quantiles per run and time series from fixed bins, so a plot
costs the same for 1,000 or 1,000,000 requests; fixed margins replace matplotlib's layout engine (which
draws every figure twice).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from simulator.measure.metrics import per_request_acceptance_length
from traces.atomic import atomic_open

if TYPE_CHECKING:  # matplotlib (~0.5 s to import) loads when a figure is drawn, not with the module
    from matplotlib.figure import Figure

PLOT_FILES = ("latency_cdf.png", "throughput_latency.png", "acceptance_length.png", "batch_kv_over_time.png")
_STYLES = ("-", "--", "-.", ":")
_DPI = 100
CDF_POINTS = 400  # quantiles per run drawn in a CDF: finer than the panel's pixels
# major tick intervals per linear axis at most: matplotlib picks up to ~10 on a wide panel, and tick marks, labels
# and grid lines are most of a figure's drawing time (a log axis keeps its own locator)
MAX_TICKS = 5
PNG_COMPRESS_LEVEL = 1  # zlib level: level 6 (the default) spends ~0.1 s more per figure for ~25% smaller files
LEGEND_COLUMNS = 6  # run names per legend row under a wide figure
NAMED_POINTS = 12  # up to this many runs every scatter point carries its name; above it only the Pareto runs
LEGEND_ROWS_BESIDE = 24  # legend entries per column beside the batch/KV panels
OVERLAID_HISTOGRAMS = 8  # more distinct acceptance histograms than this: one small panel each


def load_matplotlib() -> None:
    """Import what the figures need (a forked plots child does it while its parent summarizes the runs)."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import matplotlib.ticker  # noqa: F401


def _figure(nrows: int, ncols: int, width: float, height: float,
            margins: dict[str, float] | None = None) -> tuple[Figure, np.ndarray]:
    """A figure on the Agg canvas and its axes as a flat array; `margins` (subplots_adjust fractions) fix the
    layout, otherwise matplotlib's constrained layout places it (slower: it draws the figure twice)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(width, height), dpi=_DPI, layout=None if margins else "constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat:  # fewer ticks: each one is several artists, most of a figure's drawing time
        ax.xaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKS))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKS))
    if margins:
        fig.subplots_adjust(**margins)
    return fig, axes.ravel()


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: float | None = None, tight: bool = False) -> Path:
    """The one PNG saver: atomic write, no timestamp or software metadata (reruns give the same bytes);
    closes figures that pyplot made so they do not pile up."""
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi, metadata={"Software": None}, bbox_inches="tight" if tight else None,
                    pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
    if getattr(fig.canvas, "manager", None) is not None:  # a pyplot figure
        import matplotlib.pyplot as plt

        plt.close(fig)
    return Path(path)


def _style(i: int) -> dict:
    """Colour and line style of the i-th run (10 colours x 4 styles before repeating)."""
    return {"color": f"C{i % 10}", "linestyle": _STYLES[(i // 10) % len(_STYLES)]}


def _finished(df: pd.DataFrame) -> pd.DataFrame:
    return df[np.isfinite(df["finish_time"].to_numpy(dtype=float))]


def cdf_points(values: np.ndarray, points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, F(x)) of the empirical CDF of finite `values`: every value when there are at most `points`, else
    `points` evenly spaced quantiles (the exact minimum and maximum included), so big runs draw cheaply."""
    v = np.sort(values[np.isfinite(values)])
    n = v.size
    if n == 0:
        return v, v
    if n <= points:
        return v, np.arange(1, n + 1) / n
    idx = np.unique(np.rint(np.linspace(0, n - 1, points)).astype(np.int64))
    return v[idx], (idx + 1) / n


def _heavy_tailed(series: Mapping[str, np.ndarray], ratio: float = 20.0) -> bool:
    """True when a log axis reads better: positive values whose max exceeds `ratio` times the smallest run median."""
    vals = [v for v in series.values() if v.size]
    if not vals or min(float(v.min()) for v in vals) <= 0:
        return False
    return max(float(v.max()) for v in vals) > ratio * min(float(np.median(v)) for v in vals)


def overloaded_runs(summary_by_run: Mapping[str, Mapping] | None) -> set[str]:
    """Runs whose summary flags `overloaded` (the queue kept growing over the steady window)."""
    return {r for r, s in (summary_by_run or {}).items() if s.get("overloaded")}


def _legend_below(fig, handles, labels) -> None:
    """A figure legend under the panels, in as many columns as fit, so a long run list never overflows."""
    if not handles:
        return
    ncol = min(len(labels), LEGEND_COLUMNS)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, 0.0))


def plot_latency_cdfs(requests_by_run: Mapping[str, pd.DataFrame], path: str | os.PathLike,
                      summary_by_run: Mapping[str, Mapping] | None = None) -> Path:
    """Empirical CDFs of TTFT, TPOT (ms) and E2E (s) per run, finished requests only; a run flagged overloaded
    in its summary is marked in the legend and drawn thin, since its latencies grow with the run's length."""
    over = overloaded_runs(summary_by_run)
    n = len(requests_by_run)
    rows = -(-n // LEGEND_COLUMNS)  # legend rows under the panels
    legend_in = 0.2 * rows + 0.25
    height = 4.2 + legend_in
    fig, axes = _figure(1, 3, 15, height, margins=dict(left=0.045, right=0.99, bottom=(legend_in + 0.55) / height,
                                                      top=1 - 0.55 / height, wspace=0.22))
    panels = (("ttft", "TTFT (ms)", 1e3), ("tpot", "TPOT (ms)", 1e3), ("e2e", "E2E latency (s)", 1.0))
    handles, labels = [], []
    for ax, (col, label, scale) in zip(axes, panels):
        series = {run: _finished(df)[col].to_numpy(dtype=float) * scale for run, df in requests_by_run.items()}
        for i, (run, v) in enumerate(series.items()):
            x, y = cdf_points(v)
            if x.size == 0:
                continue
            name = f"{run} (overloaded)" if run in over else run
            (line,) = ax.step(np.concatenate(([x[0]], x)), np.concatenate(([0.0], y)), where="post", label=name,
                              linewidth=0.9 if run in over else 1.6, **_style(i))
            if run in over:  # an x at the run's largest latency: where its growing queue ends, not a tail
                ax.plot([x[-1]], [1.0], marker="x", ms=7, mew=1.6, color=_style(i)["color"], zorder=4)
            if name not in labels:
                handles.append(line)
                labels.append(name)
        if _heavy_tailed({r: v[np.isfinite(v)] for r, v in series.items()}):
            ax.set_xscale("log")
            label += ", log scale"
        else:
            ax.set_xlim(left=0)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
    _legend_below(fig, handles, labels)
    title = "Latency CDFs per run (finished requests)"
    if over:
        title += f"; x / (overloaded): {len(over)} run(s) whose queue grew over the steady window"
    fig.suptitle(title)
    return save_figure(fig, path)


def pareto_runs(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Runs (name -> (latency, throughput)) that no other run beats on both: lower-or-equal latency and
    higher-or-equal throughput, better on at least one. In the given order."""
    front = []
    for r, (lat, thr) in points.items():
        if not any((l2 <= lat and t2 >= thr) and (l2 < lat or t2 > thr) for o, (l2, t2) in points.items() if o != r):
            front.append(r)
    return front


def gpu_counts(summary_by_run: Mapping[str, Mapping]) -> set[int]:
    """The GPU counts (`num_gpus`) the runs report."""
    return {int(s["num_gpus"]) for s in summary_by_run.values() if s.get("num_gpus") is not None}


def throughput_key(summary_by_run: Mapping[str, Mapping]) -> str:
    """The throughput runs are compared on: per GPU when their GPU counts differ, else the total."""
    return "throughput_tok_s_per_gpu" if len(gpu_counts(summary_by_run)) > 1 else "throughput_tok_s"


def plot_throughput_latency(summary_by_run: Mapping[str, Mapping], path: str | os.PathLike,
                            baseline: str | None = None) -> Path:
    """Horizontal bars of output throughput per run (from zero, each with its ratio to `baseline`, default the
    first run), and throughput against E2E p50 on axes from zero with the Pareto runs marked and named (every
    run named when there are few). When the runs use different GPU counts (PSD's draft GPU) both panels are per
    GPU, so a run is not ranked above another only for holding more GPUs.

    Runs without a throughput (nothing finished, or the configuration did not fit) are left out.
    """
    from experiments.tables import has_steady_window, summary_value

    key = throughput_key(summary_by_run)
    per_gpu = key.endswith("_per_gpu")
    # the throughput the run table shows: the steady-state window's when the run has one (experiments/tables.py)
    runs = [r for r in summary_by_run if summary_value(summary_by_run[r], key) is not None]
    thr = np.array([summary_value(summary_by_run[r], key) for r in runs], dtype=float)
    steady = any(has_steady_window(summary_by_run[r]) for r in runs)
    thr_label = ("output throughput" + (" per GPU" if per_gpu else "") + (", steady window" if steady else "")
                 + (" (tok/s/GPU)" if per_gpu else " (tok/s)"))
    p50 = np.array([np.nan if summary_by_run[r].get("e2e_p50_s") is None else summary_by_run[r]["e2e_p50_s"]
                    for r in runs], dtype=float)
    base = baseline if baseline in runs else (runs[0] if runs else None)
    base_thr = thr[runs.index(base)] if base is not None else np.nan
    shown = {r: (float(p50[i]), float(thr[i])) for i, r in enumerate(runs) if np.isfinite(p50[i])}
    front = set(pareto_runs(shown))
    n = max(len(runs), 1)
    height = max(5.0, 1.3 + 0.24 * n)
    fig, axes = _figure(1, 2, 15, height, margins=dict(left=0.13, right=0.985, bottom=0.75 / height,
                                                      top=1 - 0.75 / height, wspace=0.28))
    colors = [_style(i)["color"] for i in range(len(runs))]
    ax = axes[0]
    ys = np.arange(len(runs))[::-1]  # the first run on top, in the table's order
    bars = ax.barh(ys, thr, color=colors, height=0.75)
    ratio = [f"  {t / base_thr:.2f}x" if base_thr > 0 else "" for t in thr]
    ax.bar_label(bars, labels=[f" {t:,.0f}{q}" for t, q in zip(thr, ratio)], fontsize=7, padding=1)
    over = overloaded_runs(summary_by_run)
    ax.set_yticks(ys, [r + (" (overloaded)" if r in over else "") + (" *" if r in front else "") for r in runs],
                  fontsize=8 if n <= 24 else 7)
    ax.set_ylim(-0.6, len(runs) - 0.4)
    ax.set_xlabel(thr_label)
    what = "Throughput per GPU" if per_gpu else "Throughput"
    gpus = sorted(gpu_counts(summary_by_run))
    ax.set_title(f"{what} per run (ratio to {base}; * Pareto)" if base else f"{what} per run", y=1.0, pad=6,
                 fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlim(0, (np.nanmax(thr) if thr.size and np.isfinite(thr).any() else 1.0) * 1.3)
    ax = axes[1]
    named = len(shown) <= NAMED_POINTS
    labelled = sorted((r for r in shown if named or r in front), key=lambda r: shown[r])
    # labels of points close in latency (within 8% of the axis) stack outwards, alternating above and below
    span = max((shown[r][0] for r in labelled), default=1.0) or 1.0
    offset: dict[str, float] = {}
    run_of_close = 0
    for j, r in enumerate(labelled):
        run_of_close = run_of_close + 1 if j and shown[r][0] - shown[labelled[j - 1]][0] < 0.08 * span else 0
        tier = run_of_close // 2
        offset[r] = 5 + 10 * tier if run_of_close % 2 == 0 else -11 - 10 * tier
    for i, r in enumerate(runs):
        if r not in shown:
            continue
        on = r in front
        ax.scatter(p50[i], thr[i], s=70 if on else 30, color=colors[i], zorder=3, marker="o" if on else "s",
                   edgecolors="k" if on else "none")
        if r in labelled:
            ax.annotate(r, (p50[i], thr[i]), xytext=(6, offset[r]), textcoords="offset points", fontsize=7,
                        fontweight="bold" if on else "normal")
    if front:
        pts = sorted(shown[r] for r in front)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="0.4", linewidth=1, linestyle="--", zorder=2)
    ax.set_xlabel("E2E latency p50 (s)")
    ax.set_ylabel(thr_label)
    title = "Throughput vs median latency (up-left is better; circled: Pareto"
    title += ")" if named else ", the only runs named)"
    if per_gpu:
        title += f"\nper GPU: the runs use {' or '.join(str(g) for g in gpus)} GPUs"
    ax.set_title(title, y=1.0, pad=6, fontsize=10)
    ax.grid(True, alpha=0.3)
    hi_x = np.nanmax(p50) if np.isfinite(p50).any() else 1.0
    ax.set_xlim(0, hi_x * 1.15)
    ax.set_ylim(0, (np.nanmax(thr) if thr.size and np.isfinite(thr).any() else 1.0) * 1.1)
    return save_figure(fig, path)


def identical_groups(data: Mapping[str, np.ndarray]) -> list[list[str]]:
    """Runs grouped by identical per-request values (same requests, same acceptance: one histogram), in the
    order each group's first run appears."""
    groups: list[list[str]] = []
    for r, v in data.items():
        same = next((g for g in groups if np.array_equal(data[g[0]], v)), None)
        if same is None:
            groups.append([r])
        else:
            same.append(r)
    return groups


def plot_acceptance_lengths(requests_by_run: Mapping[str, pd.DataFrame], path: str | os.PathLike) -> Path | None:
    """Histogram of per-request acceptance length (tokens per verify step) for runs that drafted; None if none did.
    Runs with identical values share one histogram, labelled with every run's name (one drawn over another
    would hide it); more than OVERLAID_HISTOGRAMS distinct histograms get a small panel each."""
    data = {r: per_request_acceptance_length(df) for r, df in requests_by_run.items()
            if int(df["proposed_tokens"].sum()) > 0}
    data = {r: v for r, v in data.items() if v.size}
    if not data:
        return None
    groups = identical_groups(data)
    order = list(requests_by_run)
    hi = max(float(v.max()) for v in data.values())
    bins = np.linspace(1.0, max(hi, 1.0) + 1e-9, 41)

    def label(g: list[str]) -> str:
        mean = f"mean {data[g[0]].mean():.2f}"
        return f"{g[0]} ({mean})" if len(g) == 1 else f"{' = '.join(g)} ({mean}; identical)"

    if len(groups) <= OVERLAID_HISTOGRAMS:
        fig, axes = _figure(1, 1, 9, 4.8, margins=dict(left=0.09, right=0.98, bottom=0.12, top=0.92))
        ax = axes[0]
        for g in groups:
            i = order.index(g[0])
            ax.hist(data[g[0]], bins=bins, histtype="step", linewidth=1.6, label=label(g),
                    color=_style(i)["color"], linestyle=_style(i)["linestyle"])
        ax.set_xlabel("tokens emitted per verify step (per request)")
        ax.set_ylabel("requests")
        ax.set_title("Acceptance length per request", y=1.0, pad=6)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
        return save_figure(fig, path)
    ncols = 5
    nrows = -(-len(groups) // ncols)
    height = 1.0 + 1.9 * nrows
    fig, axes = _figure(nrows, ncols, 15, height, margins=dict(left=0.05, right=0.99, bottom=0.5 / height,
                                                              top=1 - 0.8 / height, hspace=0.55, wspace=0.25))
    counts = [np.histogram(data[g[0]], bins=bins)[0] for g in groups]
    top = max(int(c.max()) for c in counts) * 1.08
    for ax, g, c in zip(axes, groups, counts):
        i = order.index(g[0])
        ax.stairs(c, bins, fill=True, color=_style(i)["color"], alpha=0.75)
        ax.set_title(label(g) if len(g) < 3 else f"{g[0]} and {len(g) - 1} identical (mean "
                     f"{data[g[0]].mean():.2f})", fontsize=7, pad=3)
        ax.set_ylim(0, top)
        ax.set_xlim(bins[0], bins[-1])
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(groups):]:
        ax.set_visible(False)
    fig.suptitle("Acceptance length per request: tokens emitted per verify step (x), requests (y), same axes in "
                 "every panel", fontsize=10)
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


def binned_time_max(start: np.ndarray, end: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Largest value of the slices per time bin (slice assigned by its midpoint); NaN for empty bins."""
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    idx = np.clip(np.searchsorted(edges, (start + end) / 2, side="right") - 1, 0, len(edges) - 2)
    out = np.full(len(edges) - 1, -np.inf)
    np.maximum.at(out, idx, np.asarray(values, dtype=float))
    return np.where(np.isfinite(out), out, np.nan)


def plot_batch_and_kv(steps_by_run: Mapping[str, pd.DataFrame], path: str | os.PathLike, bins: int = 150,
                      summary_by_run: Mapping[str, Mapping] | None = None) -> Path:
    """Sequences per target verify/decode forward (time-binned mean) and target KV use over time (per-bin peak),
    as a share of each run's KV capacity (from its summary) with the capacity drawn at 100%; in blocks when no
    capacity is known."""
    ncol = max(1, -(-len(steps_by_run) // LEGEND_ROWS_BESIDE))  # legend columns beside the panels
    width = 10.3 + 1.7 * ncol
    fig, axes = _figure(2, 1, width, 7.4, margins=dict(left=0.7 / width, right=1 - (0.1 + 1.6 * ncol) / width,
                                                       bottom=0.08, top=0.95, hspace=0.38))
    ends = [float(df["end"].max()) for df in steps_by_run.values() if len(df)]
    t_max = max(ends) if ends else 1.0
    t_max = t_max if t_max > 0 else 1.0
    edges = np.linspace(0.0, t_max, bins + 1)
    mids = (edges[:-1] + edges[1:]) / 2
    caps = {r: (summary_by_run or {}).get(r, {}).get("kv_capacity_blocks") for r in steps_by_run}
    as_share = bool(steps_by_run) and all(c for c in caps.values())
    peak = 0.0
    for i, (run, df) in enumerate(steps_by_run.items()):
        # the target's slices as arrays of the four columns drawn (not a copy of the whole table per filter)
        tgt = df["device"].to_numpy() == "target"
        start, end = df["start"].to_numpy()[tgt], df["end"].to_numpy()[tgt]
        work = pd.Series(df["phase"].to_numpy()[tgt]).isin(["decode", "verify", "mixed"]).to_numpy()
        if work.any():
            axes[0].plot(mids, binned_time_mean(start[work], end[work], df["num_seqs"].to_numpy()[tgt][work], edges),
                         linewidth=1.4, label=run, **_style(i))
        if tgt.any():
            kv = binned_time_max(start, end, df["kv_blocks_used"].to_numpy()[tgt], edges)
            if as_share:
                kv = 100.0 * kv / caps[run]
            peak = max(peak, float(np.nanmax(kv)) if np.isfinite(kv).any() else 0.0)
            axes[1].plot(mids, kv, linewidth=1.4, label=run, **_style(i))
    bin_s = t_max / bins
    axes[0].set_ylabel("sequences per forward")
    axes[0].set_title(f"Running batch size (time-weighted mean per {bin_s:.3g} s bin)", y=1.0, pad=6)
    if as_share:
        axes[1].axhline(100.0, color="k", linewidth=1.2, linestyle="--")
        axes[1].text(0.005, 100.0, " KV capacity", transform=axes[1].get_yaxis_transform(), va="bottom",
                     fontsize=8)
        axes[1].set_ylim(0, max(105.0, peak * 1.05))
        axes[1].set_ylabel("KV used (% of capacity)")
        axes[1].set_title(f"KV cache use against its capacity (peak per {bin_s:.3g} s bin; highest {peak:.1f}%)",
                          y=1.0, pad=6)
    else:
        axes[1].set_ylim(bottom=0)
        axes[1].set_ylabel("KV blocks used (target)")
        axes[1].set_title(f"KV cache usage (peak per {bin_s:.3g} s bin)", y=1.0, pad=6)
    for ax in axes:
        ax.set_xlabel("simulated time (s)")
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, t_max)
    axes[0].set_ylim(bottom=0)
    if steps_by_run:
        axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=ncol)
    return save_figure(fig, path)


def write_plots(
    plot_dir: str | os.PathLike,
    requests_by_run: Mapping[str, pd.DataFrame],
    steps_by_run: Mapping[str, pd.DataFrame],
    summary_by_run: Mapping[str, Mapping],
    baseline: str | None = None,
) -> list[Path]:
    """Write every plot into `plot_dir`; returns the files written (no acceptance plot when no run drafted).
    `baseline` (default: the first run) is the run the throughput ratios are taken to."""
    d = Path(plot_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = [
        plot_latency_cdfs(requests_by_run, d / "latency_cdf.png", summary_by_run),
        plot_throughput_latency(summary_by_run, d / "throughput_latency.png", baseline=baseline),
        plot_acceptance_lengths(requests_by_run, d / "acceptance_length.png"),
        plot_batch_and_kv(steps_by_run, d / "batch_kv_over_time.png", summary_by_run=summary_by_run),
    ]
    return [p for p in written if p is not None]
