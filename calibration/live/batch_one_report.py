"""The live comparison's outputs: a measured-vs-predicted table and an atomic JSON results file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from calibration.live.batch_one import METRICS


def format_table(report: dict[str, Any]) -> str:
    """Measured vs predicted per mode (linear profiles, and table profiles), with relative errors."""
    head = (f"{'mode':<16} {'metric':<18} {'measured':>10} {'predicted':>10} {'error %':>8} "
            f"{'pred table':>10} {'err % tbl':>9}")
    lines = [head, "-" * len(head)]
    for name, row in report["modes"].items():
        for k in METRICS:
            m, p, e = row["measured"][k], row["predicted"][k], row["error_percent"][k]
            pt, et = row["predicted_table_profiles"][k], row["error_percent_table_profiles"][k]
            lines.append(f"{name:<16} {k:<18} {m:>10.4g} {p:>10.4g} {_pct(e):>8} {pt:>10.4g} {_pct(et):>9}")
        diff = row["steps_differing_from_trace"]
        differing = "-" if diff is None else f"{diff}/{row['steps_total']}"
        lines.append(f"{'':<16} lossless={row['lossless']} steps==trace walk={row['steps_equal_trace_walk']} "
                     f"steps differing from trace={differing} "
                     f"load/core {row['load_per_core']['before']}->{row['load_per_core']['after']}")
    return "\n".join(lines)


def _pct(e: float | None) -> str:
    return "" if e is None else f"{e:+.1f}"


def write_report(report: dict[str, Any], out: str | Path) -> Path:
    """Atomic JSON results file, plus the measured trace bundle beside it (`<stem>-traces/`)."""
    import json

    from traces.atomic import atomic_write_text
    from traces.bundle import save_bundle

    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    bundle = report.get("_bundle")
    doc = {k: v for k, v in report.items() if k != "_bundle"}
    if bundle is not None:
        folder = path.with_name(path.stem + "-traces")
        save_bundle(bundle, folder)
        doc["traces"] = str(folder)
    atomic_write_text(path, json.dumps(doc, indent=2, default=float) + "\n")
    return path
