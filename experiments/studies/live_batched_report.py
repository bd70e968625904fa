"""The live batched report: measured vs predicted per mode, PSD against SD next to the pipeline bound,
the bandit's measured regret against the best fixed drafter; written as JSON + Markdown (atomic).

Lives in experiments/ because it combines calibration's live runs with oracle's closed-form bound
(`oracle.bounds.pipeline_bounds`, the one place of (t + V) / max(t, V)).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from calibration.live.records import METRICS


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def psd_comparison(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per PSD mode: measured and predicted PSD/SD ratios (one-device SD and SD on both devices) beside the
    analytic gain for the t and V measured per step in the one-device SD run."""
    from oracle.bounds import pipeline_bounds

    rows = report["modes"]
    out = []
    for name, row in rows.items():
        if row["placement"] != "psd":
            continue
        tail = name[len("PSD-"):]
        sd, sd2 = rows.get(f"SD-{tail}"), rows.get(f"SD-2dev-{tail}")
        entry: dict[str, Any] = {"psd_mode": name, "sd_mode": f"SD-{tail}" if sd else None,
                                 "sd_both_devices_mode": f"SD-2dev-{tail}" if sd2 else None}
        for label, base in (("sd", sd), ("sd_both_devices", sd2)):
            if base is None or "measured" not in base or "measured" not in row:
                continue
            for side in ("measured", "predicted"):
                e2e = _ratio(base[side]["e2e_mean_s"], row[side]["e2e_mean_s"])
                thr = _ratio(row[side]["throughput_tok_s"], base[side]["throughput_tok_s"])
                entry[f"{side}_{label}_over_psd_e2e"] = e2e
                entry[f"{side}_psd_over_{label}_throughput"] = thr
            m, p = entry[f"measured_psd_over_{label}_throughput"], entry[f"predicted_psd_over_{label}_throughput"]
            entry[f"prediction_error_percent_psd_over_{label}_throughput"] = None if not m else 100 * (p - m) / m
        if sd is not None and sd["phases_per_step"]["steps"]:
            t, v = sd["phases_per_step"]["draft_s"], sd["phases_per_step"]["verify_s"]
            entry["analytic"] = pipeline_bounds(t, v).to_dict()
        out.append(entry)
    return out


def bandit_regret(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per policy mode over several drafters: E2E and steps against the best fixed one-device SD mode of
    the same drafters (measured, and what the simulator predicted)."""
    rows = report["modes"]
    fixed = {}
    for name, row in rows.items():
        pol = row["policy"]
        if pol and pol.get("name") == "fixed" and row["placement"] == "one" and "measured" in row:
            fixed.setdefault(pol["drafter"], []).append(name)
    out = []
    for name, row in rows.items():
        pol = row["policy"]
        if not pol or pol.get("name") == "fixed" or "measured" not in row:
            continue
        pool = [d for d in pol.get("drafters", fixed) if d in fixed]
        cands = [n for d in pool for n in fixed[d]]
        if not cands:
            continue
        entry: dict[str, Any] = {"mode": name, "fixed_modes": cands}
        for side in ("measured", "predicted"):
            best = min(cands, key=lambda n: rows[n][side]["e2e_mean_s"])
            b, x = rows[best][side]["e2e_mean_s"], row[side]["e2e_mean_s"]
            entry[f"{side}_best_fixed"] = best
            entry[f"{side}_regret_e2e_s"] = x - b
            entry[f"{side}_regret_e2e_percent"] = 100 * (x - b) / b
        best = entry["measured_best_fixed"]
        entry["regret_steps_total"] = row["steps_total"] - rows[best]["steps_total"]
        entry["drafter_usage"] = row["drafter_usage_live"]
        out.append(entry)
    return out


def finish_report(report: dict[str, Any], command: str) -> dict[str, Any]:
    """Add the PSD comparison, the regret and the command to a live batched report."""
    report = dict(report)
    report["command"] = command
    report["psd_vs_sd"] = psd_comparison(report)
    report["bandit_regret"] = bandit_regret(report)
    return report


def _f(x: Any, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(report: dict[str, Any]) -> str:
    """The human-readable report: setting, per-mode table, PSD vs SD, regret, failure."""
    s = report["setting"]
    lines = ["# Live batched run against the simulator", "", f"Command: `{report.get('command', '')}`", "",
             f"{s['requests']} requests x {s['max_new_tokens']} tokens ({s['workload']}), target {s['target']}, "
             f"max_num_seqs {s['max_num_seqs']}, "
             + (f"{s['clients']} closed-loop clients" if s["clients"] else f"open loop at {s['arrival_rate']} req/s")
             + f", prefill {s['prefill']}, greedy, EOS forbidden; target on core {s['target_core']}, drafter process "
             f"on core {s['draft_core']} ({s['cpu_count']} cores). Versions: "
             + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".", "",
             f"Target argmax mismatches (AR outputs vs teacher-forced greedy): {report['target_argmax_mismatches']}.",
             "", "| mode | placement | metric | measured | predicted | error % | pred (table) | err % (table) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in report["modes"].items():
        if "measured" not in row:
            lines.append(f"| {name} | {row['placement']} | (not finished: {row['requests_finished']} requests) "
                         "| | | | | |")
            continue
        for k in METRICS:
            lines.append(f"| {name} | {row['placement']} | {k} | {_f(row['measured'][k])} | {_f(row['predicted'][k])} "
                         f"| {_f(row['error_percent'][k], '+.1f')} | {_f(row['predicted_table_profiles'][k])} "
                         f"| {_f(row['error_percent_table_profiles'][k], '+.1f')} |")
    lines += ["", "| mode | lossless | wall s | load/core before -> after | steps | steps = trace walk "
              "| steps differing from trace | draft s/step | verify s/step |", "|---|---|---|---|---|---|---|---|---|"]
    for name, row in report["modes"].items():
        ph = row["phases_per_step"]
        diff = row.get("steps_differing_from_trace")
        differing = "-" if diff is None else f"{diff}/{row['steps_total']}"
        lines.append(f"| {name} | {row['lossless']} | {row['wall_s']:.1f} | {row['load_per_core']['before']} -> "
                     f"{row['load_per_core']['after']} | {row['steps_total']} | {_f(row.get('steps_equal_trace_walk'), '')} "
                     f"| {differing} "
                     f"| {_f(ph['draft_s'], '.4f')} | {_f(ph['verify_s'], '.4f')} |")
    phased = {n: r for n, r in report["modes"].items() if r.get("phases")}
    if phased:
        lines += ["", "Each phase's measured seconds (summed over the steps that ran) beside the linear profiles' price "
                  "of those same steps:", "", "| mode | verify meas / pred | draft meas / pred | prefill meas / pred "
                  "| drafter prefill meas / pred |", "|---|---|---|---|---|"]
        for name, row in phased.items():
            ph = row["phases"]
            lines.append(f"| {name} | " + " | ".join(
                f"{ph[f'{k}_measured_s']:.3f} / {ph[f'{k}_predicted_s']:.3f}"
                for k in ("verify", "draft", "prefill", "drafter_prefill")) + " |")
    for c in report.get("psd_vs_sd", []):
        a = c.get("analytic") or {}
        lines += ["", f"## {c['psd_mode']} against SD", "",
                  f"- PSD/SD throughput: measured {_f(c.get('measured_psd_over_sd_throughput'), '.3f')}, predicted "
                  f"{_f(c.get('predicted_psd_over_sd_throughput'), '.3f')} (error "
                  f"{_f(c.get('prediction_error_percent_psd_over_sd_throughput'), '+.1f')}%); SD/PSD E2E: measured "
                  f"{_f(c.get('measured_sd_over_psd_e2e'), '.3f')}, predicted {_f(c.get('predicted_sd_over_psd_e2e'), '.3f')}",
                  f"- PSD/SD on both devices throughput: measured "
                  f"{_f(c.get('measured_psd_over_sd_both_devices_throughput'), '.3f')}, predicted "
                  f"{_f(c.get('predicted_psd_over_sd_both_devices_throughput'), '.3f')}",
                  f"- analytic pipeline gain (t+V)/max(t,V) for the measured SD step t = {_f(a.get('draft_time'), '.4f')} s,"
                  f" V = {_f(a.get('verify_time'), '.4f')} s: {_f(a.get('analytic_gain'), '.3f')}"]
    for r in report.get("bandit_regret", []):
        lines += ["", f"## {r['mode']}: regret against the best fixed drafter", "",
                  f"- measured: best fixed {r['measured_best_fixed']}, regret {_f(r['measured_regret_e2e_s'], '.3f')} s "
                  f"mean E2E ({_f(r['measured_regret_e2e_percent'], '+.1f')}%), {r['regret_steps_total']} verify steps",
                  f"- predicted: best fixed {r['predicted_best_fixed']}, regret "
                  f"{_f(r['predicted_regret_e2e_percent'], '+.1f')}%; drafter usage {r['drafter_usage']}"]
    if report.get("drafter_failure"):
        f = report["drafter_failure"]
        lines += ["", f"## Drafter failure in {f['mode']}", "", f"{f['error']}; finished {len(f['finished_requests'])}, "
                  f"unfinished {f['unfinished_requests']}"]
    lines += ["", report["note"], ""]
    return "\n".join(lines)


def write_batched_report(report: dict[str, Any], out_dir: str | Path) -> Path:
    """`report.json`, `report.md` and the measured traces (`traces/`) in `out_dir`, each written atomically."""
    import json

    from traces.atomic import atomic_write_text
    from traces.bundle import save_bundle

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = {k: v for k, v in report.items() if k != "_bundle"}
    if report.get("_bundle") is not None:
        save_bundle(report["_bundle"], out / "traces")
        doc["traces"] = "traces"
    atomic_write_text(out / "report.json", json.dumps(doc, indent=1, default=float) + "\n")
    atomic_write_text(out / "report.md", markdown(doc))
    return out / "report.json"
