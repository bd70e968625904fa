"""Plots of the PSD studies: saving vs t/V, the frontier ratio vs alpha*V, PSD vs SD per m and per drafter size."""
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
    """The PSD figures' settings for `experiments.plots.save_figure`."""
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


def plot_per_m(df, metric: str, label: str, path: str | Path) -> Path:
    """One panel per m: `metric` vs k for SD (dashed) and PSD (solid) per drafter, AR as a grey line."""
    ms = sorted(df["sub_batch_m"].unique())
    drafters = [d for d in dict.fromkeys(df["drafter"]) if d != "-"]
    colors = dict(zip(drafters, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, axes = plt.subplots(1, len(ms), figsize=(3.4 * len(ms), 3.4), sharey=False, squeeze=False)
    handles: dict[str, object] = {}
    for ax, m in zip(axes[0], ms):
        sub = df[(df["sub_batch_m"] == m) & df["fits"]]
        for d in drafters:
            for mode, ls in (("sd", "--"), ("psd", "-")):
                s = sub[(sub["drafter"] == d) & (sub["mode"] == mode)].sort_values("k")
                if len(s):
                    (line,) = ax.plot(s["k"], s[metric], ls=ls, marker="o", ms=3, color=colors[d])
                    handles.setdefault(f"{mode.upper()} {d}", line)
        ar = sub[sub["mode"] == "ar"]
        if len(ar):
            handles.setdefault("AR", ax.axhline(float(ar[metric].iloc[0]), color="grey", lw=0.8, ls=":"))
        gpus = {mode: sub.loc[sub["mode"] == mode, "gpus"].max() for mode in ("sd", "psd")}
        ax.set_title(f"m = {m} (SD {m} on {gpus['sd']:g} GPUs, PSD {2 * m} on {gpus['psd']:g})", fontsize=8)
        ax.set_xlabel("k (draft tokens per step)")
        ax.set_ylim(bottom=0)  # from zero: a 5% gap looks like 5%
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(label)
    if handles:  # under the panels (SD dashed, PSD solid), never over the data
        fig.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(len(handles), 9), fontsize=7, frameon=False)
    return save_psd_figure(fig, path)


def comparison_column(best) -> str:
    """The throughput PSD and SD are compared on: per GPU when their rows use different GPU counts."""
    per_gpu = best.loc[best["mode"].isin(["sd", "psd"]), "gpus"].dropna().nunique() > 1
    return "throughput_tok_s_per_gpu" if per_gpu else "throughput_tok_s"


def plot_drafter_tradeoff(best, path: str | Path) -> Path:
    """Best-k PSD/SD throughput (per GPU when the two use different GPU counts, as PSD's draft GPU makes them)
    and PSD's draft/verify time ratio vs drafter parameters (catalog sizes), per m."""
    from traces.catalog import get_model

    drafters = [d for d in dict.fromkeys(best["drafter"]) if d != "-"]
    sizes = {d: get_model(d).params / 1e9 for d in drafters}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    col = comparison_column(best)
    per_gpu = col.endswith("_per_gpu")
    for m in sorted(best["sub_batch_m"].unique()):
        psd = best[(best["mode"] == "psd") & (best["sub_batch_m"] == m)]
        sdb = best[(best["mode"] == "sd") & (best["sub_batch_m"] == m)].set_index("drafter")
        xs = np.array([sizes[d] for d in psd["drafter"]], dtype=float)
        gains = np.array([r / sdb[col].get(d, np.nan) for r, d in zip(psd[col], psd["drafter"])], dtype=float)
        ok = np.isfinite(gains)
        if ok.any():
            ax1.plot(xs[ok], gains[ok], marker="o", label=f"m = {m}")
        ax2.plot(xs, psd["t_over_v"], marker="o", label=f"m = {m}")
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_xlabel("drafter parameters (B)")
    if per_gpu:
        gpus = best.groupby("mode")["gpus"].max()
        ax1.set_ylabel("PSD / SD throughput per GPU (each at its best k)")
        ax1.set_title(f"per GPU: PSD uses {gpus.get('psd', np.nan):g} GPUs, SD {gpus.get('sd', np.nan):g}",
                      fontsize=8)
    else:
        ax1.set_ylabel("PSD / SD throughput (each at its best k)")
    ax2.axhline(1.0, color="tab:red", ls="--", lw=1, label="t = V (full overlap)")
    ax2.set_xlabel("drafter parameters (B)")
    ax2.set_ylabel("PSD draft time / verify time per step")
    ticks = sorted(sizes.values())
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return save_psd_figure(fig, path)
