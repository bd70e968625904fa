"""Plots for the PSD bounds: pipeline saving vs t/V (analytic and simulated) and the frontier ratio vs alpha*V."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from oracle.bounds import MINEDRAFT_RATIO, MINEDRAFT_SAVING, pipeline_saving, saving_band  # noqa: E402
from oracle.frontier import frontier_point  # noqa: E402
from experiments.plots import save_figure  # noqa: E402


def save_psd_figure(fig, path: str | Path) -> Path:
    """The PSD figures' settings for `experiments.plots.save_figure` (psd_report calls this too)."""
    return save_figure(fig, path, dpi=120, tight=True)


def plot_pipeline_saving(path: str | Path, simulated: dict[str, list[tuple[float, float]]] | None = None,
                         lo: float = 0.05, hi: float = 5.0) -> Path:
    """Analytic saving min(t,V)/(t+V) vs t/V, the 50% ceiling, the 37% band, and simulated points per series."""
    r = np.geomspace(lo, hi, 400)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(r, [pipeline_saving(x, 1.0) * 100 for x in r], color="black", lw=2, label="analytic min(t,V)/(t+V)")
    ax.axhline(50, color="tab:red", ls="--", lw=1, label="50% ceiling (t = V)")
    b_lo, b_hi = saving_band(MINEDRAFT_SAVING)
    ax.axhline(MINEDRAFT_SAVING * 100, color="tab:orange", ls=":", lw=1, label="37% (MineDraft claim)")
    ax.axvspan(b_lo, b_hi, color="tab:orange", alpha=0.12, label=f"t/V in [{b_lo:.2f}, {b_hi:.2f}]: saving >= 37%")
    for (label, pts), marker in zip((simulated or {}).items(), "osD^v<>"):
        xs, ys = zip(*sorted(pts)) if pts else ((), ())
        ax.plot(xs, [y * 100 for y in ys], marker=marker, ls="-", lw=0.8, ms=4, label=f"simulated: {label}")
    ax.set_xscale("log")
    ax.set_xlabel("draft time / verify time (t/V)")
    ax.set_ylabel("E2E latency saving of PSD over SD (%)")
    lows = [y for pts in (simulated or {}).values() for _, y in pts if np.isfinite(y)]
    ax.set_ylim(min([-5.0] + [y * 100 - 5 for y in lows]), 60)
    ax.axhline(0, color="grey", lw=0.6)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_psd_figure(fig, path)


def plot_frontier(path: str | Path, ks: tuple[int, ...] = (1, 3, 5), lo: float = 0.01, hi: float = 100.0,
                  mark: float | None = None, points: int = 161) -> Path:
    """T_SD / T_PSD vs alpha*V under the exponential frontier, with the 1.59 claim and the 2x ceiling."""
    xs = np.geomspace(lo, hi, points)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for k in ks:
        ax.plot(xs, [frontier_point(float(x), k).ratio for x in xs], lw=1.8, label=f"k = {k}")
    ax.axhline(MINEDRAFT_RATIO, color="tab:orange", ls=":", label="1.59 (37% saving claim)")
    ax.axhline(2.0, color="tab:red", ls="--", lw=1, label="2.0 ceiling (50% saving)")
    if mark is not None:
        for k in ks:
            p = frontier_point(mark, k)
            ax.plot([mark], [p.ratio], "ko", ms=4)
        ax.axvline(mark, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("alpha * V (verify time in units of the drafter frontier's time constant)")
    ax.set_ylabel("T_SD / T_PSD (each at its own best draft time)")
    ax.set_ylim(0.95, 2.1)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_psd_figure(fig, path)
