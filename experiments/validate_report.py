"""`draftsim validate` and `draftsim compare` outputs (one table format for both): terminal table, Markdown
report, validation.json / comparison.json rows, CDF plots, tolerance check.

A row: {mode, rate, fraction, metric, measured, predicted, error_pct, kind, load_1min} and, where the prediction
was repeated over seeds, `interval` [lo, hi] (the range of the repeats) and `inside` (measured within it)."""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

from calibration.vllm_steps.validate_compare import HEADLINE_METRICS, ValidationReport
from traces.atomic import atomic_write_text

HEADLINE = HEADLINE_METRICS


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1f}" if pct else f"{x:.4g}"


def _load(m: dict[str, Any]) -> str:
    ld = m.get("load_1min")
    return "-" if not ld else f"{ld[0]:.1f}-{ld[1]:.1f}"


def _interval(r: dict[str, Any], metric: str) -> str:
    """'[lo, hi] in' / 'OUT' in the metric's display unit, or '' without repeats."""
    iv = r.get("interval")
    if not iv or iv[0] is None:
        return ""
    return f"[{_value(metric, iv[0])}, {_value(metric, iv[1])}] {'in' if r.get('inside') else 'OUT'}"


SIGNIFICANT = 3  # digits a measured/predicted cell keeps at least (a CPU run's 6.4 tok/s is not "6")


def _value(metric: str, x: float | None) -> str:
    """A measured or predicted value in the table convention's unit (experiments/tables.py: ms, s, tok/s), with
    at least SIGNIFICANT significant digits so a small throughput is not printed as an integer."""
    from experiments.tables import UNIT_SCALE, format_value, metric_column

    if x is None:
        return "-"
    col = metric_column(metric)
    scaled = abs(x) * UNIT_SCALE.get(col.unit, 1.0)
    need = SIGNIFICANT - 1 - int(np.floor(np.log10(scaled))) if scaled > 0 and np.isfinite(scaled) else 0
    return format_value(x, col.unit, max(col.digits, min(need, 6)))


def _label(metric: str) -> str:
    from experiments.tables import metric_label

    return metric_label(metric)


def kinds_of(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["kind"] for r in rows))


def _paired(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """(measured row, {kind: row}) per mode x level x metric, in order."""
    out: dict[tuple, tuple[dict, dict]] = {}
    for r in rows:
        key = (r["mode"], r["fraction"], r["metric"])
        out.setdefault(key, (r, {}))[1][r["kind"]] = r
    return list(out.values())


def interval_header(report: ValidationReport, kind: str) -> str:
    """A kind's interval column title, with what its intervals span (validate_compare.interval_source) when it has
    any (replay, never repeated, has none)."""
    if not any("interval" in r for r in report.rows if r["kind"] == kind):
        return "interval"
    return f"interval ({report.info.get('interval_source', 'repeats')})"


def format_table(report: ValidationReport, metrics: tuple[str, ...] | None = None) -> str:
    """Per mode x rate x metric: measured, each kind's prediction (replay, predictive) with % error and, where
    repeated, the interval (its source in the header) and whether the measured value is inside it."""
    kinds = kinds_of(report.rows)
    title = {k: interval_header(report, k) for k in kinds}
    width = {k: max(24, len(t)) for k, t in title.items()}
    head = f"{'mode':<12} {'req/s':>6} {'load':>9} {'metric':<22} {'measured':>9}" + "".join(
        f" {k:>10} {'err %':>7} {title[k]:<{width[k]}}" for k in kinds)
    lines = [head, "-" * len(head)]
    for m, by in _paired(report.rows):
        if metrics and m["metric"] not in metrics:
            continue
        met = m["metric"]
        cells = "".join(f" {_value(met, by.get(k, {}).get('predicted')):>10} "
                        f"{_fmt(by.get(k, {}).get('error_pct'), True):>7} {_interval(by.get(k, {}), met):<{width[k]}}"
                        for k in kinds)
        lines.append(f"{m['mode']:<12} {m['rate']:>6.3g} {_load(m):>9} {_label(met):<22} "
                     f"{_value(met, m['measured']):>9}" + cells)
    return "\n".join(lines)


def markdown(report: ValidationReport, command: str, tolerances: dict[str, dict[str, float]],
             title: str = "draftsim validate: vLLM measured vs draftsim predicted") -> str:
    """The Markdown report: provenance, headline table, the full table and the misses."""
    lines = [f"# {title}", "", f"Command: `{command}`", ""]
    lines += [f"- {k}: {v}" for k, v in report.info.get("machine", {}).items()]
    lines += [f"- {note}" for note in report.info.get("notes", [])]
    for mode, mi in report.info.get("modes", {}).items():
        lines.append(f"- {mode}: vLLM {mi['vllm_version']} {mi['dtype']}, torch threads {mi['torch_threads']}, "
                     f"measured capacity {mi['capacity_req_s']:.3g} req/s (calibration groups "
                     f"{', '.join(f'{c:.3g}' for c in mi['capacity_by_group'])}), block size {mi['block_size']}, "
                     f"KV {mi['kv_capacity_tokens']} tokens, {mi['engine_steps']} engine steps")
    kinds = kinds_of(report.rows)
    for section, metrics in (("Headline (means and throughput)", HEADLINE), ("All metrics", None)):
        lines += ["", f"## {section}", "", "| mode | req/s | load 1-min | metric | measured | " +
                  " | ".join(f"{k} | err % | {interval_header(report, k)}" for k in kinds) + " |",
                  "|---|---:|---:|---|---:|" + "---:|---:|---|" * len(kinds)]
        for m, by in _paired(report.rows):
            if metrics and m["metric"] not in metrics:
                continue
            met = m["metric"]
            cells = " | ".join(f"{_value(met, by.get(k, {}).get('predicted'))} | "
                               f"{_fmt(by.get(k, {}).get('error_pct'), True)} | {_interval(by.get(k, {}), met)}"
                               for k in kinds)
            lines.append(f"| {m['mode']} | {m['rate']:.3g} | {_load(m)} | {_label(met)} | "
                         f"{_value(met, m['measured'])} | {cells} |")
    lines += step_model_section(report.info)
    bad = failures(report.rows, tolerances)
    lines += ["", "## Over tolerance", ""] + ([f"- {b}" for b in bad] or ["- none"])
    return "\n".join(lines) + "\n"


def step_model_section(info: dict[str, Any]) -> list[str]:
    """Per mode and phase: the predictive target model's MAPE and bias on held-back calibration steps and on the
    load run's steps (how the calibration fit carries to served shapes); empty for reports without them."""
    rows = []
    for mode, mi in info.get("modes", {}).items():
        t = mi.get("fits", {}).get("predictive", {}).get("target", {})
        carry = mi.get("calibration_fit_on_load_steps")
        if not t or carry is None:
            continue
        form = t.get("form", "")
        held = t.get("held_back", {}).get("forms", {}).get(form, {})
        for ph in ("decode", "verify", "prefill", "all"):
            if ph not in carry["mape_percent"] and ph not in held.get("held_back_mape_percent", {}):
                continue
            hm = held.get("held_back_mape_percent", {}).get(ph)
            hb = held.get("held_back_bias_percent", {}).get(ph)
            model = t.get("step_model", "") + (f"/{form}" if form and form != t.get("step_model") else "")
            rows.append(f"| {mode} | {model} | {ph} | "
                        f"{_fmt(hm)} | {_fmt(hb, True)} | {_fmt(carry['mape_percent'].get(ph))} | "
                        f"{_fmt(carry['bias_percent'].get(ph), True)} |")
    if not rows:
        return []
    return ["", "## Target step model (predictive: fitted on the calibration groups)", "",
            "MAPE and bias (total predicted / measured - 1) in percent, on calibration steps held back from the fit "
            "and on every step of the load levels.", "",
            "| mode | model | phase | held-back MAPE | held-back bias | load-step MAPE | load-step bias |",
            "|---|---|---|---:|---:|---:|---:|"] + rows + drift_section(info)


def drift_section(info: dict[str, Any]) -> list[str]:
    """Per load level: the calibration fit's bias on that level's steps, and the model-free same-shape time
    against calibration (how the engine's speed moved between calibration and the level)."""
    rows = []
    for mode, mi in info.get("modes", {}).items():
        for lv in (mi.get("calibration_fit_on_load_steps") or {}).get("by_level", []):
            b = lv["bias_percent"]
            rows.append(f"| {mode} | {lv['fraction']:g} | " + " | ".join(_fmt(b.get(ph), True) for ph in
                                                                         ("decode", "verify", "prefill", "all")) +
                        f" | {_fmt(lv['same_shape_time_percent'], True)} | {lv['same_shape_steps']} |")
    if not rows:
        return []
    return ["", "Per load level: the calibration fit's bias on the level's steps, and the level's median step time "
            "over the calibration's for the same phase and batch size (decode/verify steps, step-weighted; "
            "model-free: negative = the engine ran the same shapes faster than while calibrating).", "",
            "| mode | x capacity | decode bias | verify bias | prefill bias | all bias | same-shape time | steps |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"] + rows + level_fitted_section(info)


def level_fitted_section(info: dict[str, Any]) -> list[str]:
    """Replay with the step model fitted on each level's own steps (the engine's speed during that level): what
    the scheduler, step model and first-token rule give when the step prices are right for the level."""
    rows = []
    for mode, mi in info.get("modes", {}).items():
        for lv in mi.get("level_fitted_replay", []):
            rows.append(f"| {mode} | {lv['fraction']:g} | " + " | ".join(
                _fmt(lv.get(k), True) for k in HEADLINE) + " |")
    if not rows:
        return []
    return ["", "Replay with the target and drafter profiles fitted on each level's own steps and the run's own "
            "acceptance (a diagnostic: step prices at the engine's speed during that level), error in percent:", "",
            "| mode | x capacity | TTFT mean | TPOT mean | E2E mean | throughput |",
            "|---|---:|---:|---:|---:|---:|"] + rows + speed_drift_section(info)


def speed_drift_section(info: dict[str, Any]) -> list[str]:
    """With `--drift`: each calibration cell's speed factor, the distribution drawn from and each level's draws."""
    lines = []
    for mode, mi in info.get("modes", {}).items():
        d = mi.get("speed_drift")
        if not d:
            continue
        groups = ", ".join(f"{g['name']} {g['factor']:.3f} (jitter sd {g['jitter_sd']:.3f}, {g['steps']} steps)"
                           for g in d["groups"])
        draws = "; ".join(f"{lv['fraction']:g}x: " + ", ".join(f"{f:.3f}" for f in lv["factors"])
                          for lv in d["draws_by_level"])
        lone = f" ({d['lone_steps']} steps alone in their cell left out)" if d.get("lone_steps") else ""
        lines.append(f"- {mode}: cells {groups}{lone}; between-cell sd of ln factor {d['between_sd_log']:.4f}, "
                     f"t with {d['df']} df, 5-95% factor {d['factor_5_95'][0]:.3f}-{d['factor_5_95'][1]:.3f}; "
                     f"draws per level {draws}")
    if not lines:
        return []
    return ["", "Speed drift between the calibration cells (a calibration group's steps at one batch size; each "
            "cell's measured target seconds over the calibration profile's price of its steps; "
            "calibration/vllm_steps/drift.py), and the factors the "
            "predictive repeats after the first were priced with:", ""] + lines


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


def plot_cdfs(report: ValidationReport, out: Path, metrics: tuple[str, ...] = ("ttft", "e2e"),
              measured_label: str = "measured (vLLM)") -> list[Path]:
    """One figure per mode: CDFs of `metrics` per load level, measured vs each kind of prediction."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from experiments.plots import save_figure

    paths = []
    for mode in dict.fromkeys(lv.mode for lv in report.levels):
        levels = [lv for lv in report.levels if lv.mode == mode]
        fig = Figure(figsize=(5 * len(metrics), 3.2 * len(levels)))
        axes = fig.subplots(len(levels), len(metrics), squeeze=False)
        for row, lv in zip(axes, levels):
            for ax, metric in zip(row, metrics):
                series = [(measured_label, lv.measured, "k")] + \
                    [(k, lat, f"C{i}") for i, (k, lat) in enumerate(lv.predicted.items())]
                for label, lat, color in series:
                    v = getattr(lat, metric)
                    if v is None:
                        continue
                    v = np.sort(v[np.isfinite(v)])
                    ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label, color=color)
                ax.set_title(f"{mode} @ {lv.rate:.3g} req/s: {metric.upper()}")
                ax.set_xlabel("seconds")
                ax.set_ylabel("CDF")
                ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(save_figure(fig, out / f"cdf-{mode}.png"))
    return paths


def write_outputs(report: ValidationReport, out: str | Path, config_path: str,
                  tolerances: dict[str, dict[str, float]], *, stem: str = "validation", command_name: str = "validate",
                  title: str | None = None, plot_metrics: tuple[str, ...] = ("ttft", "e2e"),
                  measured_label: str = "measured (vLLM)") -> None:
    """STEM.json (rows), STEM.md, provenance.json and the CDF plots, each written atomically."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report.info["machine"] = machine_info()
    command = (f"draftsim {command_name} " + " ".join(sys.argv[2:]) if len(sys.argv) > 2
               else f"draftsim {command_name} {config_path}")
    atomic_write_text(out / f"{stem}.json", json.dumps(report.rows, indent=1) + "\n")
    atomic_write_text(out / "provenance.json", json.dumps({"command": command, **report.info}, indent=1,
                                                          default=float) + "\n")
    atomic_write_text(out / f"{stem}.md", markdown(report, command, tolerances, **({"title": title} if title else {})))
    plot_cdfs(report, out, plot_metrics, measured_label)
