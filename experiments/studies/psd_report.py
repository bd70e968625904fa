"""The PSD studies' report, read from a finished sweep: PSD vs SD gain, latency saving, per-GPU gain, best k,
and the pipeline-bound comparison, with their plots. It simulates nothing.

    draftsim sweep psd_vs_sd && draftsim psd-report psd_vs_sd      (also psd_bounds, or any config whose runs
                                                                    pair a `psd` run with an `sd` run)

Every point of the config's sweep (recomputed here from the config, `--set` and `--seed` included, and checked
against sweep.json's config hashes) pairs each PSD run with the SD run of the same point and the same policy.
Two layouts: a config with an `ar` run is a PSD-vs-SD study (per m = server.max_num_seqs, drafter and k; each
system at its own best k; whole-run figures, as an offline batch's makespan is its result); one without is a
bounds study (steady-window figures, simulator.measure.steady_state.saturated_window, against the analytic pipeline curve at the
measured t/V, one series per grid point). Writes report.md, psd_table.csv and PNGs, atomically.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.config import ExperimentConfig
from experiments.sweep.experiment import sweep_points
from oracle.bounds import pipeline_gain, pipeline_saving
from simulator.server_config import PSDConfig
from traces.atomic import atomic_open, atomic_write_text
from traces.expected_tokens import expected_tokens

REPORT_FILES = ("report.md", "psd_table.csv")


@dataclass(frozen=True)
class StudyInputs:
    """A config, the sweep folder it was run into, and that sweep's points (keys, resolved config, summary)."""

    config: ExperimentConfig
    folder: Path
    points: list[dict[str, Any]]  # {"keys", "config", "summary"} per sweep point, in sweep order


def read_sweep(cfg: ExperimentConfig, folder: str | Path) -> StudyInputs:
    """The sweep of `cfg` written in `folder` (sweep.json); an error when it is missing or another config's."""
    folder = Path(folder)
    path = folder / "sweep.json"
    if not path.is_file():
        raise ValueError(f"{path}: no sweep results; run `draftsim sweep {cfg.name} --out {folder}` first "
                         "(with the same --set and --seed)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        saved = [(p["config_hash"], p["seed"], p["summary"]) for p in doc["points"]]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a sweep.json written by `draftsim sweep` ({e})") from None
    points = sweep_points(cfg)
    mine = [(p.config_hash, p.seed) for p in points]
    if [(h, s) for h, s, _ in saved] != mine:
        raise ValueError(f"{path}: its {len(saved)} points were swept from another config than {cfg.name!r} with "
                         f"these --set/--seed ({len(mine)} points); rerun the sweep or pass the same overrides")
    return StudyInputs(cfg, folder, [{"keys": p.keys, "config": p.config, "summary": s}
                                     for p, (_, _, s) in zip(points, saved)])


# ------------------------------------------------------------------ the study table


def _series_label(keys: dict[str, Any], skip: set[str]) -> str:
    """A grid point as text (arrival mappings in words), without the keys in `skip`."""
    parts = []
    for key, v in keys.items():
        if key in skip:
            continue
        if isinstance(v, dict) and v.get("kind") == "closed_loop":
            parts.append(f"saturated closed loop ({v.get('clients')} clients)")
        elif isinstance(v, dict) and v.get("kind") == "poisson":
            parts.append(f"Poisson {v.get('rate'):g} req/s")
        else:
            parts.append(f"{key.rsplit('.', 1)[-1]}={v}")
    return ", ".join(parts) or "all"


def _ratio(a: Any, b: Any) -> float:
    return float(a) / float(b) if a is not None and b not in (None, 0) else np.nan


def study_table(inputs: StudyInputs) -> pd.DataFrame:
    """One row per (sweep point, run) with the run's figures; PSD rows add the comparison with their SD pair."""
    sweep = inputs.config.sweep
    zip_keys = set(sweep.zip) if sweep is not None else set()
    rows = []
    for i, p in enumerate(inputs.points):
        runs = {r["name"]: r for r in p["config"]["runs"]}
        acceptance = _acceptance_rates(p["config"])
        for name, s in p["summary"].items():
            run = runs[name]
            policy = run.get("policy") or {}
            d, k = policy.get("drafter"), int(policy.get("k", 0) or 0)
            m = int(p["config"]["server"]["max_num_seqs"])
            psd = PSDConfig.model_validate(run.get("psd") or {}) if run["mode"] == "psd" else None
            t, v = s.get("draft_phase_mean_s"), s.get("verify_step_mean_s")
            fits = bool(s.get("fits", True))
            rows.append({
                "point": i, "series": _series_label(p["keys"], zip_keys), "sub_batch_m": m, "drafter": d or "-",
                "k": k, "mode": run["mode"], "run": name, "concurrency": psd.concurrency(m) if psd else m,
                "gpus": s.get("num_gpus", np.nan), "fits": fits, "placement": s.get("does_not_fit", ""),
                "acceptance_rate": acceptance.get(d, np.nan),
                "leviathan_tokens_per_step": expected_tokens(acceptance[d], k) if d in acceptance else np.nan,
                **{c: s.get(c, np.nan) if fits else np.nan for c in _RUN_FIGURES},
                "t_over_v": _ratio(t, v) if t is not None else (0.0 if fits and v is not None else np.nan),
                "draft_s_per_phase": t if t is not None else np.nan,
                "verify_s_per_step": v if v is not None else np.nan,
            })
    df = pd.DataFrame(rows).replace({None: np.nan})
    return _add_pairs(df)


_RUN_FIGURES = ("throughput_tok_s", "throughput_tok_s_per_gpu", "e2e_mean_s", "e2e_p90_s", "ttft_mean_s",
                "tpot_mean_s", "requests_per_s", "mean_acceptance_length", "saturated_throughput_tok_s",
                "saturated_e2e_mean_s", "output_tokens", "num_finished", "kv_peak_blocks", "preemptions",
                "psd_fallback_steps")


def _acceptance_rates(config: dict[str, Any]) -> dict[str, float]:
    """Per drafter, the i.i.d. rate of a `traces: {synthetic: ...}` source with one category (else none)."""
    spec = config.get("traces")
    if not isinstance(spec, dict) or "synthetic" not in spec or len(spec["synthetic"].get("categories", {})) != 1:
        return {}
    (cat,) = spec["synthetic"]["categories"].values()
    return {d: float(a["rate"]) for d, a in cat["acceptance"].items() if a.get("model") == "iid"}


def _add_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """PSD rows: ratios against the SD run of the same point and policy, the analytic bound at the measured
    t/V, the speedup over the point's AR run, and (for open loads) the load as a share of saturated SD."""
    sd = df[df["mode"] == "sd"].set_index(["point", "drafter", "k"])
    ar = df[df["mode"] == "ar"].set_index("point")["throughput_tok_s"]
    out = df.copy()
    key = list(zip(df["point"], df["drafter"], df["k"]))
    is_psd = df["mode"] == "psd"

    def paired(col: str) -> np.ndarray:
        return np.array([sd[col].get(kk, np.nan) if p else np.nan for kk, p in zip(key, is_psd)], dtype=float)

    out["psd_over_sd_throughput"] = df["throughput_tok_s"] / paired("throughput_tok_s")
    out["psd_over_sd_per_gpu"] = df["throughput_tok_s_per_gpu"] / paired("throughput_tok_s_per_gpu")
    out["psd_e2e_saving"] = 1 - df["e2e_mean_s"] / paired("e2e_mean_s")
    out["simulated_gain"] = df["saturated_throughput_tok_s"] / paired("saturated_throughput_tok_s")
    out["simulated_saving"] = 1 - df["saturated_e2e_mean_s"] / paired("saturated_e2e_mean_s")
    t, v = df["draft_s_per_phase"].to_numpy(float), df["verify_s_per_step"].to_numpy(float)
    ok = is_psd.to_numpy() & np.isfinite(t) & np.isfinite(v)
    out["analytic_gain"] = [pipeline_gain(a, b) if o else np.nan for a, b, o in zip(t, v, ok)]
    out["analytic_saving"] = [pipeline_saving(a, b) if o else np.nan for a, b, o in zip(t, v, ok)]
    out["speedup_vs_ar"] = df["throughput_tok_s"] / df["point"].map(ar) if len(ar) else np.nan
    return out


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
               "psd_t_over_v": p["t_over_v"], "sd_best_k": None, "sd_tok_s": np.nan, "psd_over_sd": np.nan,
               "psd_over_sd_per_gpu": np.nan, "e2e_saving": np.nan}
        if len(sd):
            q = sd.iloc[0]
            row.update(sd_best_k=int(q["k"]), sd_tok_s=q["throughput_tok_s"],
                       psd_over_sd=p["throughput_tok_s"] / q["throughput_tok_s"],
                       psd_over_sd_per_gpu=p["throughput_tok_s_per_gpu"] / q["throughput_tok_s_per_gpu"],
                       e2e_saving=1 - p["e2e_mean_s"] / q["e2e_mean_s"])
        rows.append(row)
    return pd.DataFrame(rows)


HEADLINE_COLUMNS = ["sub_batch_m", "drafter", "sd_best_k", "sd_tok_s", "psd_best_k", "psd_tok_s", "psd_over_sd",
                    "psd_over_sd_per_gpu", "e2e_saving", "psd_t_over_v"]
PSD_VS_SD_COLUMNS = ["sub_batch_m", "drafter", "k", "mode", "concurrency", "gpus", "fits", "throughput_tok_s",
                     "throughput_tok_s_per_gpu", "e2e_mean_s", "e2e_p90_s", "mean_acceptance_length", "t_over_v",
                     "speedup_vs_ar", "psd_over_sd_throughput", "psd_over_sd_per_gpu", "psd_e2e_saving"]
BOUNDS_COLUMNS = ["series", "t_over_v", "analytic_gain", "simulated_gain", "analytic_saving", "simulated_saving",
                  "psd_over_sd_throughput", "psd_e2e_saving", "load_vs_saturated_sd", "psd_fallback_steps"]


def with_load_share(df: pd.DataFrame) -> pd.DataFrame:
    """Bounds layout: each PSD row's offered load as a share of saturated SD's request rate measured at the same
    t/V (steady-window tokens/s of the closed-loop series over its mean output length); NaN for closed loops."""
    out = df.copy()
    out["load_vs_saturated_sd"] = np.nan
    sat = df[(df["mode"] == "sd") & df["series"].str.startswith("saturated")]
    cap = {round(t, 6): x / (n_tok / n) for t, x, n_tok, n in
           zip(sat["t_over_v"], sat["saturated_throughput_tok_s"], sat["output_tokens"], sat["num_finished"])}
    for i, row in df[df["mode"] == "psd"].iterrows():
        if row["series"].startswith("Poisson"):
            rate = float(row["series"].split()[1])
            out.loc[i, "load_vs_saturated_sd"] = _ratio(rate, cap.get(round(row["t_over_v"], 6)))
    return out


# ------------------------------------------------------------------ report and plots


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


def is_vs_sd_study(cfg: ExperimentConfig) -> bool:
    """The PSD-vs-SD layout applies when the config compares against an autoregressive run."""
    return any(r.mode == "ar" for r in cfg.runs)


def vs_sd_report(df: pd.DataFrame, cfg: ExperimentConfig, out: Path) -> tuple[list[Path], str]:
    """Plots and Markdown of a PSD-vs-SD study."""
    from experiments.studies.psd_plots import plot_drafter_tradeoff, plot_per_m

    plots = [plot_per_m(df, metric, label, out / fname) for metric, label, fname in (
        ("throughput_tok_s", "throughput (tokens/s)", "throughput.png"),
        ("throughput_tok_s_per_gpu", "throughput per GPU (tokens/s/GPU)", "throughput_per_gpu.png"),
        ("e2e_mean_s", "mean E2E latency (s)", "e2e.png"))]
    plots.append(plot_drafter_tradeoff(best_k(df), out / "drafter_tradeoff.png"))
    rates = ", ".join(f"{d} {r}" for d, r in _acceptance_rates(cfg.model_dump(mode="json")).items())
    body = (f"# {cfg.name}: {cfg.description}\n\n"
            + (f"Assumed per-token acceptance: {rates}.\n\n" if rates else "")
            + "Whole-run figures (an offline batch: its makespan is the result).\n\n"
            "## Each system at its own best k\n\n" + _markdown(headline(df), HEADLINE_COLUMNS)
            + "\n## Best k per (m, drafter, mode) (psd_over_sd columns compare with SD at the same k)\n\n"
            + _markdown(best_k(df).sort_values(["sub_batch_m", "drafter", "mode"]), PSD_VS_SD_COLUMNS)
            + "\n## All runs\n\n" + _markdown(df, PSD_VS_SD_COLUMNS))
    not_fit = df[~df["fits"]]
    if len(not_fit):
        body += "\n## Configurations that do not fit\n\n" + "\n".join(
            f"- {r.mode} m={r.sub_batch_m} {r.drafter}: {r.placement}"
            for r in not_fit.drop_duplicates(["mode", "drafter"]).itertuples()) + "\n"
    return plots, body


def bounds_report(df: pd.DataFrame, cfg: ExperimentConfig, out: Path) -> tuple[list[Path], str]:
    """The saving-vs-t/V plot and Markdown of a bounds study (steady-window figures)."""
    from experiments.studies.psd_plots import plot_pipeline_saving

    df = with_load_share(df)
    psd = df[df["mode"] == "psd"]
    series = {}
    for label, g in psd.groupby("series", sort=False):
        share = g["load_vs_saturated_sd"].median()
        label = label if not np.isfinite(share) else f"{label} ({share:.0%} of saturated SD)"
        series[label] = list(zip(g["t_over_v"], g["simulated_saving"]))
    finite = psd["t_over_v"][np.isfinite(psd["t_over_v"])]
    lo, hi = (float(finite.min()), float(finite.max())) if len(finite) else (0.05, 5.0)
    plots = [plot_pipeline_saving(out / "saving_vs_t_over_v.png", series, lo=lo, hi=hi)]
    body = (f"# {cfg.name}: {cfg.description}\n\nSimulated gain and saving of PSD over SD in the steady window "
            "(simulator.measure.steady_state.saturated_window), against (t+V)/max(t,V) and min(t,V)/(t+V) at the measured "
            "t/V; psd_over_sd_throughput and psd_e2e_saving are the whole-run figures.\n\n"
            + _markdown(psd.sort_values(["series", "t_over_v"], kind="stable"), BOUNDS_COLUMNS))
    return plots, body


def write_report(inputs: StudyInputs, out: str | Path | None = None) -> dict[str, Any]:
    """Write the study's report.md, psd_table.csv and plots into `out` (default: the sweep folder)."""
    out = Path(out) if out is not None else inputs.folder
    out.mkdir(parents=True, exist_ok=True)
    df = study_table(inputs)
    if is_vs_sd_study(inputs.config):
        plots, body = vs_sd_report(df, inputs.config, out)
    else:
        plots, body = bounds_report(df, inputs.config, out)
        df = with_load_share(df)
    with atomic_open(out / "psd_table.csv", "w") as f:
        df.to_csv(f, index=False)
    atomic_write_text(out / "report.md", body)
    return {"out": str(out), "rows": len(df), "plots": [str(p) for p in plots], "table": str(out / "psd_table.csv"),
            "report": str(out / "report.md")}
