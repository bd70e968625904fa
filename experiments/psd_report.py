"""PSD experiments: MineDraft's PSD-vs-SD sweep on roofline profiles, and the simulated pipeline bounds.

    python -m experiments.psd_report experiments/configs/psd_vs_sd.yaml --out results/psd_vs_sd
    python -m experiments.psd_report experiments/configs/psd_bounds.yaml --out results/psd_bounds
(also `draftsim psd-report CONFIG --out DIR`). Each writes the resolved config, a CSV and a Markdown
table, and PNG plots into the output folder, all atomically.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import yaml
from pydantic import Field

from experiments.bounds_sim import simulate_pipeline
from oracle.bounds import pipeline_gain, pipeline_saving
from simulator.draft_cost import DraftCost
from simulator.metrics import mean_slice_seconds, summarize
from simulator.placement import Deployment, plan
from simulator.roofline import RooflineProfile
from simulator.scenario import make_scenario, simulate
from simulator.server_config import PSDConfig, RunSpec, ServerConfig
from traces.atomic import atomic_write_text
from traces.catalog import get_gpu, get_model
from simulator.specbench import STEP_OVERHEAD_S as SPECBENCH_STEP_OVERHEAD_S  # the published per-step overhead
from traces.expected_tokens import expected_tokens


from traces.config_base import StrictModel as _Strict  # noqa: E402


class TargetSpec(_Strict):
    model: str
    gpu: str
    tp: int = Field(4, ge=1)


class RooflineKnobs(_Strict):
    mfu: float = Field(0.6, gt=0, le=1)
    bandwidth_util: float = Field(0.8, gt=0, le=1)
    allreduce_latency_s: float = Field(8e-6, ge=0)


class DrafterSpecCfg(_Strict):
    acceptance: float = Field(ge=0, lt=1, description="assumed i.i.d. per-token acceptance rate")


class ChatWorkload(_Strict):
    num_requests: int = Field(1000, ge=1)
    prompt_median: int = Field(200, ge=1)
    prompt_sigma: float = Field(0.8, ge=0)
    prompt_max: int = Field(1536, ge=8)
    output_len: int = Field(256, ge=2)


class PsdVsSdConfig(_Strict):
    """MineDraft's main setting: PSD with 2m requests on TP+1 GPUs vs SD with m on TP GPUs."""

    kind: Literal["psd_vs_sd"]
    name: str = "psd_vs_sd"
    seed: int = 0
    target: TargetSpec
    roofline: RooflineKnobs = RooflineKnobs()
    drafters: dict[str, DrafterSpecCfg]
    drafter_tp: int = Field(1, ge=1, description="draft model shards (1: one GPU, in SD one of the target's)")
    gpu_memory_utilization: float = Field(0.65, gt=0, le=1)
    reserve_gib: float = Field(2.0, ge=0)
    max_model_len: int = Field(2048, ge=1)
    step_overhead_s: float = Field(SPECBENCH_STEP_OVERHEAD_S, ge=0)
    psd_sync_s: float = Field(0.0, ge=0, allow_inf_nan=False, description="PSDConfig.sync_s (see there)")
    defer_kv: bool = Field(True, description="PSDConfig.defer_kv: MineDraft reserves lookahead KV on the drafted side")
    prefill: Literal["mixed", "separate"] = Field("mixed", description="ServerConfig.prefill; MineDraft runs separate")
    max_num_batched_tokens: int = Field(8192, ge=1)
    k: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 5], min_length=1)
    sub_batch: list[int] = Field(default_factory=lambda: [8, 16, 32, 64], min_length=1)
    workload: ChatWorkload = ChatWorkload()
    notes: str = ""


class PsdBoundsConfig(_Strict):
    """Simulated PSD saving vs t/V under saturation and open Poisson load, against the analytic curve."""

    kind: Literal["psd_bounds"]
    name: str = "psd_bounds"
    seed: int = 0
    verify_time_s: float = Field(0.02, gt=0)
    t_over_v: list[float] = Field(min_length=1)
    loads: list[float | Literal["saturated"]] = Field(min_length=1)
    sub_batch: int = Field(16, ge=1)
    num_requests: int = Field(600, ge=10)
    k: int = Field(3, ge=1)
    acc_len: int = Field(3, ge=1)
    output_len: list[int] = Field([128, 512], min_length=2, max_length=2, description="[min, max] output tokens")
    prompt_len: int = Field(32, ge=1)
    prefill: Literal["mixed", "separate"] = Field("mixed", description="ServerConfig.prefill of both systems")
    notes: str = ""


def load_config(path: str | Path) -> PsdVsSdConfig | PsdBoundsConfig:
    """Read a PSD experiment YAML; errors name the file and the key."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: config file not found")
    from traces.config_base import load_model
    from traces.parsing import load_yaml_file

    doc = load_yaml_file(path)
    if not isinstance(doc, dict) or doc.get("kind") not in ("psd_vs_sd", "psd_bounds"):
        raise ValueError(f"{path}: key 'kind': expected 'psd_vs_sd' or 'psd_bounds'")
    cls = PsdVsSdConfig if doc["kind"] == "psd_vs_sd" else PsdBoundsConfig
    cfg = load_model(cls, doc, str(path), f"{doc['kind']} config")
    if isinstance(cfg, PsdVsSdConfig):
        try:
            get_model(cfg.target.model), get_gpu(cfg.target.gpu)
            for d in cfg.drafters:
                get_model(d)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e
    return cfg


# ------------------------------------------------------------------ PSD vs SD


def _row_metrics(res, num_target_gpus: int, num_draft_gpus: int) -> dict[str, float]:
    """The study's columns, from the one run summary (simulator.metrics.summarize) plus mean phase times."""
    s = summarize(res.requests, res.steps, res.itl, slo=None, num_target_gpus=num_target_gpus,
                  num_draft_gpus=num_draft_gpus, extras=res.extras)
    t_mean = mean_slice_seconds(res.steps, ["draft"])
    if not np.isfinite(t_mean):
        t_mean = 0.0
    v_mean = mean_slice_seconds(res.steps, ["verify", "mixed"], device="target")
    nan = float("nan")
    return {"throughput_tok_s": s["throughput_tok_s"], "throughput_per_gpu": s["throughput_tok_s_per_gpu"],
            "e2e_mean_s": s["e2e_mean_s"], "e2e_p90_s": s["e2e_p90_s"], "ttft_mean_s": s["ttft_mean_s"],
            "tpot_mean_s": s["tpot_mean_s"],
            "mean_acceptance_length": nan if s["mean_acceptance_length"] is None else s["mean_acceptance_length"],
            "draft_s_per_phase": t_mean, "verify_s_per_step": v_mean,
            "t_over_v": t_mean / v_mean if v_mean and np.isfinite(v_mean) else nan,
            "kv_peak_blocks": s["kv_peak_blocks"], "preemptions": s["preemptions"],
            "psd_fallback_steps": s["psd_fallback_steps"]}


def run_psd_vs_sd(cfg: PsdVsSdConfig, progress: bool = True) -> pd.DataFrame:
    """Every (m, drafter, k): SD (m, drafter colocated) and PSD (2m, drafter dedicated), plus AR per m."""
    from experiments.psd_inputs import chat_batch

    tgt_model, gpu = get_model(cfg.target.model), get_gpu(cfg.target.gpu)
    knobs = cfg.roofline.model_dump()
    target = RooflineProfile(tgt_model, gpu, tp=cfg.target.tp, **knobs)
    rates = {d: s.acceptance for d, s in cfg.drafters.items()}
    w = cfg.workload
    inputs = chat_batch(w.num_requests, rates, prompt_median=w.prompt_median, prompt_sigma=w.prompt_sigma,
                              prompt_max=w.prompt_max, output_len=w.output_len, seed=cfg.seed)
    costs = {d: DraftCost(kind="autoregressive", profile=RooflineProfile(get_model(d), gpu, tp=cfg.drafter_tp, **knobs))
             for d in cfg.drafters}

    def deployment(drafter: str | None, placement: str) -> Deployment:
        return Deployment(cfg.target.model, cfg.target.gpu, num_gpus=cfg.target.tp, tp=cfg.target.tp, drafter=drafter,
                          drafter_placement=placement, drafter_tp=cfg.drafter_tp if drafter else None,
                          drafter_gpus=cfg.drafter_tp, gpu_memory_utilization=cfg.gpu_memory_utilization,
                          reserve_gib=cfg.reserve_gib, max_model_len=cfg.max_model_len)

    jobs: list[tuple[int, str | None, int, str]] = []
    for m in cfg.sub_batch:
        jobs.append((m, None, 0, "ar"))
        for d in cfg.drafters:
            for k in cfg.k:
                jobs += [(m, d, k, "sd"), (m, d, k, "psd")]
    # every job resolved (placement, server, policy) before any simulates
    prepared = []
    for m, d, k, mode in jobs:
        place = plan(deployment(d, "dedicated" if mode == "psd" else "colocated"))
        row: dict[str, Any] = {"sub_batch_m": m, "drafter": d or "-", "k": k, "mode": mode,
                               "concurrency": 2 * m if mode == "psd" else m, "gpus": place.total_gpus,
                               "fits": place.fits, "placement": place.message,
                               "kv_capacity_tokens": place.kv_capacity_tokens,
                               "acceptance_rate": rates.get(d, float("nan")) if d else float("nan"),
                               "leviathan_tokens_per_step": expected_tokens(rates[d], k) if d else 1.0}
        sc = None
        if place.fits:
            run = RunSpec(name=f"{mode}-{d}-k{k}-m{m}", mode=mode,
                          policy={"name": "fixed", "drafter": d, "k": k} if d else None,
                          psd=PSDConfig(sub_batch_max_num_seqs=m, sync_s=cfg.psd_sync_s,
                                        defer_kv=cfg.defer_kv) if mode == "psd" else None)
            server = ServerConfig(target_profile=target,
                                  step_overhead_s=cfg.step_overhead_s, max_num_seqs=m,
                                  max_num_batched_tokens=cfg.max_num_batched_tokens,
                                  kv_capacity_tokens=place.kv_capacity_tokens, prefill=cfg.prefill,
                                  num_target_gpus=cfg.target.tp, num_draft_gpus=place.total_gpus - cfg.target.tp)
            sc = make_scenario(run, server, costs, cfg.seed)
        prepared.append((row, sc))
    rows = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=cfg.name, unit="run", file=sys.stderr)
    for row, sc in prepared:
        if sc is not None:
            res = simulate(sc, inputs)
            row.update(_row_metrics(res, sc.server.num_target_gpus, sc.server.num_draft_gpus))
        rows.append(row)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    df = pd.DataFrame(rows)
    for col in ("throughput_tok_s", "throughput_per_gpu", "e2e_mean_s", "e2e_p90_s", "mean_acceptance_length",
                "t_over_v"):
        if col not in df.columns:  # nothing fitted: keep the table's shape
            df[col] = np.nan
    ar = df[df["mode"] == "ar"].set_index("sub_batch_m")["throughput_tok_s"]
    df["speedup_vs_ar"] = df["throughput_tok_s"] / df["sub_batch_m"].map(ar)
    sd = df[df["mode"] == "sd"].set_index(["sub_batch_m", "drafter", "k"])
    key = list(zip(df["sub_batch_m"], df["drafter"], df["k"]))
    df["psd_over_sd_throughput"] = [r / sd["throughput_tok_s"].get(kk, np.nan) if mo == "psd" else np.nan
                                    for r, kk, mo in zip(df["throughput_tok_s"], key, df["mode"])]
    df["psd_over_sd_per_gpu"] = [r / sd["throughput_per_gpu"].get(kk, np.nan) if mo == "psd" else np.nan
                                 for r, kk, mo in zip(df["throughput_per_gpu"], key, df["mode"])]
    df["psd_e2e_saving"] = [1 - e / sd["e2e_mean_s"].get(kk, np.nan) if mo == "psd" else np.nan
                            for e, kk, mo in zip(df["e2e_mean_s"], key, df["mode"])]
    return df


def best_k(df: pd.DataFrame) -> pd.DataFrame:
    """Per (m, drafter, mode): the row with the highest throughput over k."""
    ok = df[(df["mode"] != "ar") & df["fits"]]
    idx = ok.groupby(["sub_batch_m", "drafter", "mode"])["throughput_tok_s"].idxmax()
    return ok.loc[idx].reset_index(drop=True)


def headline(df: pd.DataFrame) -> pd.DataFrame:
    """Per (m, drafter): SD at its best k against PSD at its best k (totals, per GPU, E2E)."""
    bk = best_k(df)
    rows = []
    for (m, d), g in bk.groupby(["sub_batch_m", "drafter"], sort=True):
        sd, psd = g[g["mode"] == "sd"], g[g["mode"] == "psd"]
        if not len(psd):
            continue
        p = psd.iloc[0]
        row = {"sub_batch_m": m, "drafter": d, "psd_best_k": int(p["k"]), "psd_tok_s": p["throughput_tok_s"],
               "psd_t_over_v": p["t_over_v"]}
        if len(sd):
            q = sd.iloc[0]
            row.update(sd_best_k=int(q["k"]), sd_tok_s=q["throughput_tok_s"],
                       psd_over_sd=p["throughput_tok_s"] / q["throughput_tok_s"],
                       psd_over_sd_per_gpu=p["throughput_per_gpu"] / q["throughput_per_gpu"],
                       e2e_saving=1 - p["e2e_mean_s"] / q["e2e_mean_s"])
        else:
            row.update(sd_best_k=None, sd_tok_s=np.nan, psd_over_sd=np.nan, psd_over_sd_per_gpu=np.nan,
                       e2e_saving=np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


HEADLINE_COLUMNS = ["sub_batch_m", "drafter", "sd_best_k", "sd_tok_s", "psd_best_k", "psd_tok_s", "psd_over_sd",
                    "psd_over_sd_per_gpu", "e2e_saving", "psd_t_over_v"]


def plot_psd_vs_sd(df: pd.DataFrame, cfg: PsdVsSdConfig, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.psd_plots import save_psd_figure

    paths = []
    ms = cfg.sub_batch
    drafters = list(cfg.drafters)
    colors = dict(zip(drafters, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for metric, label, fname in (("throughput_tok_s", "throughput (tokens/s)", "throughput.png"),
                                 ("throughput_per_gpu", "throughput per GPU (tokens/s/GPU)", "throughput_per_gpu.png"),
                                 ("e2e_mean_s", "mean E2E latency (s)", "e2e.png")):
        fig, axes = plt.subplots(1, len(ms), figsize=(3.4 * len(ms), 3.4), sharey=False, squeeze=False)
        for ax, m in zip(axes[0], ms):
            sub = df[(df["sub_batch_m"] == m) & df["fits"]]
            for d in drafters:
                for mode, ls in (("sd", "--"), ("psd", "-")):
                    s = sub[(sub["drafter"] == d) & (sub["mode"] == mode)].sort_values("k")
                    if len(s):
                        ax.plot(s["k"], s[metric], ls=ls, marker="o", ms=3, color=colors[d],
                                label=f"{mode.upper()} {d}")
            ar = sub[sub["mode"] == "ar"]
            if len(ar):
                ax.axhline(float(ar[metric].iloc[0]), color="grey", lw=0.8, ls=":", label="AR")
            ax.set_title(f"m = {m} (SD {m} on {cfg.target.tp} GPUs, PSD {2 * m} on {cfg.target.tp + cfg.drafter_tp})",
                         fontsize=8)
            ax.set_xlabel("k (draft tokens per step)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(label)
        if axes[0][-1].get_legend_handles_labels()[0]:
            axes[0][-1].legend(fontsize=6, loc="best")
        paths.append(save_psd_figure(fig, out / fname))
    # drafter-size trade-off: best-k PSD/SD gain and draft/verify time ratio vs drafter parameters
    bk = best_k(df)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    sizes = {d: get_model(d).params / 1e9 for d in drafters}
    for m in ms:
        psd = bk[(bk["mode"] == "psd") & (bk["sub_batch_m"] == m)]
        sdb = bk[(bk["mode"] == "sd") & (bk["sub_batch_m"] == m)].set_index("drafter")
        xs = [sizes[d] for d in psd["drafter"]]
        gains = np.array([r / sdb["throughput_tok_s"].get(d, np.nan) for r, d in zip(psd["throughput_tok_s"], psd["drafter"])], dtype=float)
        ok = np.isfinite(gains)
        if ok.any():
            ax1.plot(np.asarray(xs)[ok], np.asarray(gains)[ok], marker="o", label=f"m = {m}")
        ax2.plot(xs, psd["t_over_v"], marker="o", label=f"m = {m}")
    ax1.axhline(1.0, color="grey", lw=0.8)
    if ax1.lines[:-1]:
        ax1.set_xscale("log")
    ax1.set_xlabel("drafter parameters (B)")
    ax1.set_ylabel("PSD / SD throughput (each at its best k)")
    ax1.grid(alpha=0.3, which="both")
    if ax1.get_legend_handles_labels()[0]:
        ax1.legend(fontsize=7)
    ax2.axhline(1.0, color="tab:red", ls="--", lw=1, label="t = V (full overlap)")
    ax2.set_xscale("log")
    ticks = sorted(sizes.values())
    for ax in (ax1, ax2):
        if ax.get_xscale() == "log":
            ax.minorticks_off()
            ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
    ax2.set_xlabel("drafter parameters (B)")
    ax2.set_ylabel("PSD draft time / verify time per step")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=7)
    paths.append(save_psd_figure(fig, out / "drafter_tradeoff.png"))
    return paths


PSD_VS_SD_COLUMNS = ["sub_batch_m", "drafter", "k", "mode", "concurrency", "gpus", "fits", "throughput_tok_s",
                     "throughput_per_gpu", "e2e_mean_s", "e2e_p90_s", "mean_acceptance_length", "t_over_v",
                     "speedup_vs_ar", "psd_over_sd_throughput", "psd_over_sd_per_gpu", "psd_e2e_saving"]


def _markdown(df: pd.DataFrame, cols: list[str]) -> str:
    cols = [c for c in cols if c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df[cols].iterrows():
        cells = []
        for c in cols:
            v = r[c]
            if isinstance(v, (float, np.floating)):
                cells.append("" if np.isnan(v) else f"{v:.4g}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ bounds sweep


def run_psd_bounds(cfg: PsdBoundsConfig, progress: bool = True) -> pd.DataFrame:
    rows = []
    jobs = [(load, r) for load in cfg.loads for r in cfg.t_over_v]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=cfg.name, unit="point", file=sys.stderr)
    v = cfg.verify_time_s
    for load, r in jobs:
        s = simulate_pipeline(r * v, v, sub_batch=cfg.sub_batch, num_requests=cfg.num_requests,
                              prompt_len=cfg.prompt_len, output_len=tuple(cfg.output_len), k=cfg.k,
                              acc_len=cfg.acc_len, load=None if load == "saturated" else float(load), seed=cfg.seed,
                              prefill=cfg.prefill)
        rows.append({"load": load, "t_over_v": r, "draft_time_s": r * v, "verify_time_s": v,
                     "analytic_gain": pipeline_gain(r * v, v), "analytic_saving": pipeline_saving(r * v, v),
                     **{k: val for k, val in s.to_dict().items() if k != "setup"}})
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows)


BOUNDS_COLUMNS = ["load", "t_over_v", "analytic_gain", "simulated_gain", "analytic_saving", "simulated_saving",
                  "sd_mean_e2e_s", "psd_mean_e2e_s", "psd_fallback_steps"]


# ------------------------------------------------------------------ entry point


def write_psd_vs_sd(df: pd.DataFrame, cfg: PsdVsSdConfig, out: Path) -> tuple[list[Path], str]:
    """Plots and the Markdown report of a PSD-vs-SD table."""
    plots = plot_psd_vs_sd(df, cfg, out)
    cols = PSD_VS_SD_COLUMNS
    title = (f"# {cfg.name}: PSD (2m, {cfg.target.tp}+{cfg.drafter_tp} GPUs) vs SD (m, {cfg.target.tp} GPUs), "
             f"{cfg.target.model} on {cfg.target.gpu}, roofline profiles\n\n")
    rates = ", ".join(f"{d} {s.acceptance}" for d, s in cfg.drafters.items())
    body = (title + f"Assumed per-token acceptance: {rates}. {cfg.notes}\n\n"
            "## Each system at its own best k\n\n" + _markdown(headline(df), HEADLINE_COLUMNS)
            + "\n## Best k per (m, drafter, mode) (psd_over_sd columns compare with SD at the same k)\n\n"
            + _markdown(best_k(df).sort_values(["sub_batch_m", "drafter", "mode"]), cols)
            + "\n## All runs\n\n" + _markdown(df, cols))
    not_fit = df[~df["fits"]]
    if len(not_fit):
        body += "\n## Configurations that do not fit\n\n" + "\n".join(
            f"- {r.mode} m={r.sub_batch_m} {r.drafter}: {r.placement}"
            for r in not_fit.drop_duplicates(["mode", "drafter"]).itertuples()) + "\n"
    return plots, body


def run_report(config_path: str | Path, out: str | Path, progress: bool = True) -> dict[str, Any]:
    """Run a PSD experiment config and write table, CSV and plots into `out`; returns what it wrote."""
    cfg = load_config(config_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False))
    if isinstance(cfg, PsdVsSdConfig):
        df = run_psd_vs_sd(cfg, progress)
        plots, body = write_psd_vs_sd(df, cfg, out)
    else:
        df = run_psd_bounds(cfg, progress)
        from experiments.psd_plots import plot_pipeline_saving

        series = {(f"saturated closed loop" if ld == "saturated" else f"Poisson {float(ld):.0%} of SD capacity"):
                  list(zip(g["t_over_v"], g["simulated_saving"])) for ld, g in df.groupby("load", sort=False)}
        lo, hi = min(cfg.t_over_v), max(cfg.t_over_v)
        plots = [plot_pipeline_saving(out / "saving_vs_t_over_v.png", series, lo=lo, hi=hi)]
        cols = BOUNDS_COLUMNS
        body = f"# {cfg.name}: simulated PSD saving vs t/V\n\n" + _markdown(df, cols)
    with_cols = df.copy()
    from traces.atomic import atomic_open

    with atomic_open(out / "table.csv", "w") as f:
        with_cols.to_csv(f, index=False)
    atomic_write_text(out / "report.md", body)
    return {"out": str(out), "rows": len(df), "plots": [str(p) for p in plots], "table": str(out / "table.csv")}


def _cli(args) -> int:
    info = run_report(args.config, args.out, progress=not args.no_progress)
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m experiments.psd_report")
    ap.add_argument("config")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args()
    sys.exit(_cli(a))
