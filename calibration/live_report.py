"""The live comparison's outputs: a measured-vs-predicted table and an atomic JSON results file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from calibration.live import METRICS


def format_table(report: dict[str, Any]) -> str:
    """Measured vs predicted per mode, with relative errors."""
    head = (f"{'mode':<16} {'metric':<18} {'measured':>10} {'predicted':>10} {'error %':>8}")
    lines = [head, "-" * len(head)]
    for name, row in report["modes"].items():
        for k in METRICS:
            m, p, e = row["measured"][k], row["predicted"][k], row["error_percent"][k]
            lines.append(f"{name:<16} {k:<18} {m:>10.4g} {p:>10.4g} {'' if e is None else f'{e:+.1f}':>8}")
        lines.append(f"{'':<16} lossless={row['lossless']} steps==trace walk={row['steps_equal_trace_walk']} "
                     f"load/core {row['load_per_core']['before']}->{row['load_per_core']['after']}")
    return "\n".join(lines)


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
