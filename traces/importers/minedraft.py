"""MineDraft step traces -> latency measurements (target, draft and overhead time per step).

MineDraft's tracer (`minedraft/benchmarks/trace.py`) writes JSON lines, each
`{"metadata": {...}, "traces": [{"type": "Step", ...}, {"type": "Request", ...}]}`. Step records
carry `batched_token_num`, `context_token_num`, `batched_requests`, `proposed_len`,
`verify_len`, `accepted_num`, `generated_num` and `measured_draft_time`,
`measured_target_time`, `measured_overhead_time` (recorded only when profiling was on; in
seconds unless told otherwise). Prefill steps are left out: profiles price decode steps.
The result is plain data; the CLI fits it with `simulator.costs.latency` (traces/ imports nothing of ours).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traces.errors import TraceFormatError, shorten
from traces.parsing import parse_json, read_text

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
MAX_STEP_S = 3600.0  # one engine step longer than an hour is a unit mistake or a corrupt record
MAX_COUNT = 2**40  # tokens or requests counted in one step
ROLES = {"target": "measured_target_time", "draft": "measured_draft_time", "overhead": "measured_overhead_time"}


@dataclass(frozen=True)
class MineDraftStep:
    """One decode step of a MineDraft run, with its measured times in seconds (None if not measured)."""

    num_seqs: int
    batched_tokens: int
    context_tokens: int
    proposed_len: int | None
    verify_len: int | None
    accepted: int | None
    generated: int | None
    parallel: bool
    times: dict[str, float | None]


def _int_field(rec: dict, key: str, path: str, line: int, required: bool) -> int | None:
    v = rec.get(key)
    if v is None:
        if required:
            raise TraceFormatError(path, "missing required field of a Step record", line=line, field=key)
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_COUNT or int(v) != v:
        raise TraceFormatError(path, f"expected an integer in [0, {MAX_COUNT}], got {str(v)[:40]}", line=line,
                               field=key)
    return int(v)


def _documents(path: Path) -> list[tuple[int, Any]]:
    text = read_text(path)
    stripped = text.lstrip()
    if stripped.startswith("["):
        return [(1, {"traces": parse_json(text, str(path))})]
    return [(i, parse_json(line, str(path), i)) for i, line in enumerate(text.splitlines(), start=1)
            if line.strip()]


def load_minedraft_steps(path: str | Path, time_unit: str = "s") -> list[MineDraftStep]:
    """Decode steps of a MineDraft trace file (JSON lines of bundles, or one JSON list of records)."""
    path = Path(path)
    if time_unit not in TIME_UNITS:
        raise ValueError(f"time_unit must be one of {sorted(TIME_UNITS)}, got {shorten(time_unit)}")
    if not path.exists():
        raise TraceFormatError(str(path), "MineDraft trace file not found")
    scale = TIME_UNITS[time_unit]
    steps = []
    for line, doc in _documents(path):
        if not isinstance(doc, dict) or not isinstance(doc.get("traces"), list):
            raise TraceFormatError(str(path), "expected an object with a 'traces' list", line=line, field="traces")
        for j, rec in enumerate(doc["traces"]):
            if not isinstance(rec, dict):
                raise TraceFormatError(str(path), f"trace {j}: expected an object", line=line, field="traces")
            if rec.get("type") != "Step" or rec.get("is_prompt_run"):
                continue
            reqs = rec.get("batched_requests")
            if not isinstance(reqs, list):
                raise TraceFormatError(str(path), f"trace {j}: expected a list of request ids", line=line,
                                       field="batched_requests")
            times: dict[str, float | None] = {}
            for role, key in ROLES.items():
                v = rec.get(key)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0
                                      or float(v) * scale > MAX_STEP_S):
                    raise TraceFormatError(str(path), f"trace {j}: expected a time in [0, {MAX_STEP_S:g}] s, got "
                                           f"{str(v)[:40]} {time_unit}", line=line, field=key)
                times[role] = None if v is None else float(v) * scale
            steps.append(MineDraftStep(
                num_seqs=len(reqs),
                batched_tokens=_int_field(rec, "batched_token_num", str(path), line, True),
                context_tokens=_int_field(rec, "context_token_num", str(path), line, True),
                proposed_len=_int_field(rec, "proposed_len", str(path), line, False),
                verify_len=_int_field(rec, "verify_len", str(path), line, False),
                accepted=_int_field(rec, "accepted_num", str(path), line, False),
                generated=_int_field(rec, "generated_num", str(path), line, False),
                parallel=bool(rec.get("is_parallelised", False)),
                times=times))
    if not steps:
        raise TraceFormatError(str(path), "contains no decode Step records")
    return steps


def step_measurements(steps: list[MineDraftStep]) -> dict[str, list[dict[str, Any]]]:
    """Per role (target, draft, overhead): Measurement-shaped dicts of the steps that measured it."""
    out: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
    for s in steps:
        for role in ROLES:
            t = s.times[role]
            if t is None or s.num_seqs == 0:
                continue
            batched = s.batched_tokens
            if role == "draft" and s.proposed_len is not None:
                batched = s.num_seqs * s.proposed_len  # tokens proposed in the whole drafting phase
            out[role].append({"num_seqs": s.num_seqs, "batched_tokens": batched, "kv_tokens": s.context_tokens,
                              "seconds": t, "extra": {"parallel": s.parallel, "proposed_len": s.proposed_len,
                                                      "accepted": s.accepted}})
    return out
