"""`draftsim validate` outputs: terminal table, Markdown report, validation.json, CDF plots, tolerance check."""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

from calibration.vllm_steps.validate_compare import KINDS, ValidationReport
from traces.atomic import atomic_write_text

HEADLINE = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "throughput_tok_s")


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1f}" if pct else f"{x:.4g}"


def _paired(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """(measured row, {kind: row}) per mode x level x metric, in order."""
    out: dict[tuple, tuple[dict, dict]] = {}
    for r in rows:
        key = (r["mode"], r["fraction"], r["metric"])
        out.setdefault(key, (r, {}))[1][r["kind"]] = r
    return list(out.values())


def format_table(report: ValidationReport, metrics: tuple[str, ...] | None = None) -> str:
    """Per mode x rate x metric: measured, replay and predictive predictions with % errors."""
    head = (f"{'mode':<12} {'req/s':>6} {'load':>9} {'metric':<17} {'measured':>9} {'replay':>9} {'err %':>7} "
            f"{'predictive':>10} {'err %':>7}")
    lines = [head, "-" * len(head)]
    for m, by in _paired(report.rows):
        if metrics and m["metric"] not in metrics:
            continue
        rp, pr = by.get("replay", {}), by.get("predictive", {})
        load = f"{m['load_1min'][0]:.1f}-{m['load_1min'][1]:.1f}"
        lines.append(f"{m['mode']:<12} {m['rate']:>6.3g} {load:>9} {m['metric']:<17} {_fmt(m['measured']):>9} "
                     f"{_fmt(rp.get('predicted')):>9} {_fmt(rp.get('error_pct'), True):>7} "
                     f"{_fmt(pr.get('predicted')):>10} {_fmt(pr.get('error_pct'), True):>7}")
    return "\n".join(lines)


def markdown(report: ValidationReport, command: str, tolerances: dict[str, dict[str, float]]) -> str:
    """The Markdown report: provenance, headline table, the full table and the misses."""
    lines = ["# draftsim validate: vLLM measured vs draftsim predicted", "", f"Command: `{command}`", ""]
    lines += [f"- {k}: {v}" for k, v in report.info.get("machine", {}).items()]
    for mode, mi in report.info["modes"].items():
        lines.append(f"- {mode}: vLLM {mi['vllm_version']} {mi['dtype']}, torch threads {mi['torch_threads']}, "
                     f"measured capacity {mi['capacity_req_s']:.3g} req/s (calibration groups "
                     f"{', '.join(f'{c:.3g}' for c in mi['capacity_by_group'])}), block size {mi['block_size']}, "
                     f"KV {mi['kv_capacity_tokens']} tokens, {mi['engine_steps']} engine steps")
    for title, metrics in (("Headline (means and throughput)", HEADLINE), ("All metrics", None)):
        lines += ["", f"## {title}", "", "| mode | req/s | load 1-min | metric | measured | replay | err % | "
                  "predictive | err % |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
        for m, by in _paired(report.rows):
            if metrics and m["metric"] not in metrics:
                continue
            rp, pr = by.get("replay", {}), by.get("predictive", {})
            lines.append(f"| {m['mode']} | {m['rate']:.3g} | {m['load_1min'][0]:.1f}-{m['load_1min'][1]:.1f} | "
                         f"{m['metric']} | {_fmt(m['measured'])} | {_fmt(rp.get('predicted'))} | "
                         f"{_fmt(rp.get('error_pct'), True)} | {_fmt(pr.get('predicted'))} | "
                         f"{_fmt(pr.get('error_pct'), True)} |")
    bad = failures(report.rows, tolerances)
    lines += ["", "## Over tolerance", ""] + ([f"- {b}" for b in bad] or ["- none"])
    return "\n".join(lines) + "\n"


def failures(rows: list[dict[str, Any]], tolerances: dict[str, dict[str, float]]) -> list[str]:
    """Rows whose |error| exceeds the tolerance of their kind and metric (missing predictions count too)."""
    bad = []
    for r in rows:
        tol = tolerances.get(r["kind"], {}).get(r["metric"])
        if tol is None:
            continue
        e = r["error_pct"]
        if e is None or abs(e) > tol:
            bad.append(f"{r['kind']} {r['mode']} @ {r['rate']:.3g} req/s {r['metric']}: error "
                       f"{'n/a' if e is None else f'{e:+.1f}%'} (tolerance {tol:g}%)")
    return bad


def machine_info() -> dict[str, Any]:
    return {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "load_1min_at_report": round(os.getloadavg()[0], 2)}


def plot_cdfs(report: ValidationReport, out: Path) -> list[Path]:
    """One figure per mode: TTFT and E2E CDFs per load level, measured vs replay vs predictive."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from experiments.plots import save_figure

    paths = []
    for mode in dict.fromkeys(lv.mode for lv in report.levels):
        levels = [lv for lv in report.levels if lv.mode == mode]
        fig = Figure(figsize=(10, 3.2 * len(levels)))
        axes = fig.subplots(len(levels), 2, squeeze=False)
        for row, lv in zip(axes, levels):
            for ax, metric in zip(row, ("ttft", "e2e")):
                series = [("measured (vLLM)", lv.measured, "k")] + \
                    [(k, lv.predicted[k], c) for k, c in zip(KINDS, ("C0", "C1"))]
                for label, lat, color in series:
                    v = np.sort(getattr(lat, metric))
                    ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label, color=color)
                ax.set_title(f"{mode} @ {lv.rate:.3g} req/s: {metric.upper()}")
                ax.set_xlabel("seconds")
                ax.set_ylabel("CDF")
                ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(save_figure(fig, out / f"cdf-{mode}.png"))
    return paths


def write_outputs(report: ValidationReport, out: str | Path, config_path: str,
                  tolerances: dict[str, dict[str, float]]) -> None:
    """validation.json (rows), validation.md, provenance.json and the CDF plots, each written atomically."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report.info["machine"] = machine_info()
    command = "draftsim validate " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else f"draftsim validate {config_path}"
    atomic_write_text(out / "validation.json", json.dumps(report.rows, indent=1) + "\n")
    atomic_write_text(out / "provenance.json", json.dumps({"command": command, **report.info}, indent=1,
                                                          default=float) + "\n")
    atomic_write_text(out / "validation.md", markdown(report, command, tolerances))
    plot_cdfs(report, out)
