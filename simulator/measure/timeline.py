"""Chrome Trace Event Format export of the per-step table, to open in Perfetto (ui.perfetto.dev) or chrome://tracing.

One process (pid) per run, one track (tid) per device ('target', and in PSD the dedicated 'drafter'; in a
cluster run, per replica and device, named "replica N · ..."),
one complete event (ph "X") per step slice named by its phase, with batch size, token counts and
sub-batch as args. Slices on one device that overlap (they should not) go to extra overlap lanes
instead of being clipped, so nothing is hidden. Counter events (ph "C") show sequences in flight per
device and KV blocks used on the target. Timestamps are integer microseconds of simulated time.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping

import numpy as np
import pandas as pd

from simulator.measure.metrics import str_values
from traces.atomic import atomic_open

DEVICE_ORDER = ("target", "drafter")
DEVICE_LABELS = {"target": "target GPU(s)", "drafter": "draft GPU"}
SLICE_ARG_COLUMNS = (
    "step", "num_seqs", "prefill_tokens", "batched_tokens", "kv_tokens", "kv_blocks_used",
    "proposed_tokens", "accepted_tokens", "emitted_tokens", "sub_batch", "drafters",
)
_REQUIRED = ("step", "device", "phase", "start", "end", "num_seqs")
_METADATA_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index", "process_labels"}


def _us(seconds: np.ndarray) -> np.ndarray:
    """Seconds to integer microseconds, the unit of `ts` and `dur`.

    Integers keep slice ends exact: start and end are rounded (monotonically) and dur = end - start,
    so slices that touch or follow each other never overlap after rounding, in any viewer.
    """
    return np.rint(np.asarray(seconds, dtype=float) * 1e6).astype(np.int64)


def _py(v):
    """Plain Python scalar for JSON (numpy ints/floats/str)."""
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def _plain_column(col: pd.Series) -> list:
    """A column's values as JSON-ready Python scalars (`_py` of each; integer and bool columns need no pass)."""
    values = col.tolist()
    return values if col.dtype.kind in "iub" else [_py(v) for v in values]


def assign_lanes(start_us: np.ndarray, end_us: np.ndarray) -> np.ndarray:
    """Lane per slice so that slices in one lane never partially overlap (greedy, in start order)."""
    order = np.argsort(start_us, kind="stable")
    lane_end: list[int] = []
    lanes = np.zeros(len(start_us), dtype=np.int64)
    for i in order:
        s, e = int(start_us[i]), int(end_us[i])
        for k, last in enumerate(lane_end):
            if last <= s:
                lanes[i] = k
                lane_end[k] = e
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(e)
    return lanes


def _counter_series(times_us: np.ndarray, values: np.ndarray) -> list[tuple[int, float]]:
    """(time, value) points where the value changes, times ascending (last write at a time wins)."""
    out: list[tuple[int, float]] = []
    for t, v in zip(times_us.tolist(), values.tolist()):
        if out and out[-1][0] == t:
            out[-1] = (t, v)
            if len(out) > 1 and out[-2][1] == v:
                out.pop()
        elif not out or out[-1][1] != v:
            out.append((t, v))
    return out


def _in_flight(start_us: np.ndarray, end_us: np.ndarray, n: np.ndarray) -> list[tuple[int, float]]:
    """Sequences in flight on a device over time: +n at each slice start, -n at its end."""
    t = np.concatenate([start_us, end_us])
    d = np.concatenate([n, -n]).astype(np.int64)
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    uniq, first = np.unique(t, return_index=True)
    level = np.cumsum(np.add.reduceat(d, first)) if len(t) else np.zeros(0, dtype=np.int64)
    return _counter_series(uniq, level)


def _replica_groups(replicas: np.ndarray | None, n: int) -> list[tuple[str, np.ndarray]]:
    """(track-name prefix, row indices) per replica of a cluster's steps table; one unnamed group otherwise."""
    if replicas is None:
        return [("", np.arange(n))]
    return [(f"replica {int(r)} \u00b7 ", np.flatnonzero(replicas == r)) for r in np.unique(replicas)]


def _run_events(steps: pd.DataFrame, pid: int, name: str) -> list[dict]:
    """All events of one run (one process)."""
    missing = [c for c in _REQUIRED if c not in steps.columns]
    if missing:
        raise ValueError(f"steps table lacks column(s) {missing} needed for the timeline")
    start, end = steps["start"].to_numpy(dtype=float), steps["end"].to_numpy(dtype=float)
    bad = ~(np.isfinite(start) & np.isfinite(end) & (start >= 0) & (end >= start))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"steps table of run {name!r}, row {i}: expected 0 <= start <= end, got start={start[i]}, end={end[i]}"
        )
    start_us, end_us = _us(start), _us(end)
    devices = str_values(steps["device"])
    replicas = steps["replica"].to_numpy(dtype=np.int64) if "replica" in steps.columns else None

    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    arg_cols = [c for c in SLICE_ARG_COLUMNS if c in steps.columns]
    # each slice's args, built once per row (integer columns' tolist() is plain Python already)
    arg_rows = list(zip(*(_plain_column(steps[c]) for c in arg_cols)))
    phases = str_values(steps["phase"]).tolist()
    slices: list[tuple[int, int, dict]] = []
    counters: list[tuple[int, int, dict]] = []
    tid = 0
    for prefix, rows in _replica_groups(replicas, len(steps)):
        rdev = devices[rows]
        present = list(dict.fromkeys(rdev.tolist()))
        for dev in [d for d in DEVICE_ORDER if d in present] + sorted(set(present) - set(DEVICE_ORDER)):
            idx = rows[rdev == dev]
            lanes = assign_lanes(start_us[idx], end_us[idx])
            label = prefix + DEVICE_LABELS.get(dev, dev)
            lane_tid = {}
            for lane in range(int(lanes.max()) + 1 if len(lanes) else 0):
                tid += 1
                lane_tid[lane] = tid
                tname = label if lane == 0 else f"{label} (overlap lane {lane + 1})"
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": tname}})
                events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                               "args": {"sort_index": tid}})
            for j, lane in zip(idx.tolist(), lanes.tolist()):
                ev = {
                    "name": phases[j], "cat": dev, "ph": "X", "pid": pid, "tid": lane_tid[lane],
                    "ts": int(start_us[j]), "dur": int(end_us[j] - start_us[j]),
                    "args": dict(zip(arg_cols, arg_rows[j])),
                }
                slices.append((int(start_us[j]), j, ev))
            n = steps["num_seqs"].to_numpy(dtype=np.int64)[idx]
            cname = f"{prefix}seqs in flight ({dev})"
            for t, v in _in_flight(start_us[idx], end_us[idx], n):
                counters.append((t, 0, {"name": cname, "ph": "C", "pid": pid, "tid": 0, "ts": int(t),
                                        "args": {"seqs": int(v)}}))
        if "kv_blocks_used" in steps.columns:
            tgt = rows[rdev == "target"]
            order = tgt[np.lexsort((steps["step"].to_numpy()[tgt], end_us[tgt]))]
            kv = steps["kv_blocks_used"].to_numpy(dtype=np.int64)[order]
            for t, v in _counter_series(end_us[order], kv):
                counters.append((t, 1, {"name": f"{prefix}KV blocks used (target)", "ph": "C", "pid": pid,
                                        "tid": 0, "ts": int(t), "args": {"blocks": int(v)}}))
    slices.sort(key=lambda x: (x[0], x[1]))
    counters.sort(key=lambda x: (x[0], x[1]))
    return events + [e for _, _, e in slices] + [e for _, _, e in counters]


def first_steps(steps: pd.DataFrame, max_steps: int | None) -> tuple[pd.DataFrame, int, int]:
    """Rows of the first `max_steps` step numbers (all when None or 0); also kept and total step counts.

    A table in step order (as the engine writes it) is cut with one pass and a binary search, not a sort."""
    col = steps["step"].to_numpy()
    if col.size > 1 and bool(np.all(col[1:] >= col[:-1])):
        starts = np.flatnonzero(np.concatenate(([True], col[1:] != col[:-1])))  # first row of each step number
        total = len(starts)
        if not max_steps or total <= max_steps:
            return steps, total, total
        return steps.iloc[: int(starts[max_steps])], max_steps, total
    numbers = np.unique(col)
    if not max_steps or len(numbers) <= max_steps:
        return steps, len(numbers), len(numbers)
    return steps[steps["step"] <= numbers[max_steps - 1]], max_steps, len(numbers)


def to_chrome_trace(steps_df: pd.DataFrame, *, process_name: str = "draftsim", max_steps: int | None = None) -> dict:
    """Trace Event Format object for a steps table; with a `run` column, one process per run (in order of appearance).

    `max_steps` (> 0) keeps only each run's first that many steps (large runs make huge traces); a cut
    run says so in its process name and in `otherData.truncated`, so nothing is dropped silently.
    None or 0 keeps every step.
    """
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 0):
        raise ValueError(f"max_steps: expected an integer >= 0 or None, got {max_steps!r}")
    if "step" not in steps_df.columns:
        raise ValueError("steps table lacks column(s) ['step'] needed for the timeline")
    if "run" in steps_df.columns:
        run_col = str_values(steps_df["run"])
        runs = list(pd.unique(run_col))
        groups = [(r, steps_df[run_col == r]) for r in runs] if len(runs) > 1 else [(runs[0], steps_df)]
    else:
        groups = [(process_name, steps_df)]
    events: list[dict] = []
    truncated: list[str] = []
    for pid, (name, df) in enumerate(groups, start=1):
        kept, n_kept, n_total = first_steps(df, max_steps)
        label = name
        if n_kept < n_total:
            label = f"{name} (first {n_kept} of {n_total} steps)"
            truncated.append(f"{name}: first {n_kept} of {n_total} steps")
        events.extend(_run_events(kept.reset_index(drop=True), pid, label))
    other = {"generator": "draftsim", "title": process_name, "clock": "simulated time, microseconds"}
    if truncated:
        other["truncated"] = "; ".join(truncated)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)  # json.dumps builds one per call


def dumps_chrome_trace(trace: dict) -> str:
    """Compact, deterministic JSON text of a trace, one event per line."""
    events = ",\n".join(map(_COMPACT.encode, trace["traceEvents"]))
    rest = {k: v for k, v in trace.items() if k != "traceEvents"}
    tail = json.dumps(rest, separators=(",", ":"), sort_keys=True)[1:-1]
    return '{"traceEvents":[\n' + events + "\n]" + ("," + tail if tail else "") + "}\n"


def write_chrome_trace(
    path: str | os.PathLike, steps_df: pd.DataFrame | None = None, *, process_name: str = "draftsim",
    trace: dict | None = None, built_here: bool = False,
) -> dict:
    """Write a trace JSON file atomically, built from `steps_df` or given as `trace`; returns the trace.

    A given trace is validated first, unless `built_here` says it is `to_chrome_trace`'s own output (valid by
    construction: overlapping slices get their own lanes; tests/simulator/measure/test_timeline.py validates that
    output), which spares a pass over every event."""
    if (steps_df is None) == (trace is None):
        raise ValueError("write_chrome_trace: give exactly one of steps_df or trace")
    if trace is None:
        trace = to_chrome_trace(steps_df, process_name=process_name)
    elif not built_here:
        validate_chrome_trace(trace)
    with atomic_open(path, "w") as f:
        f.write(dumps_chrome_trace(trace))
    return trace


def validate_chrome_trace(trace: Mapping) -> None:
    """Raise ValueError unless `trace` follows the Trace Event Format subset draftsim writes.

    Checks: object form with a `traceEvents` list; every event's phase, name, integer pid/tid,
    numeric non-negative ts; X events with dur >= 0 that nest properly on each (pid, tid) track
    (Perfetto drops partially overlapping slices); C events with numeric args; known M names.
    """
    if not isinstance(trace, Mapping) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("trace: expected an object with a 'traceEvents' list")
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        raise ValueError("trace.displayTimeUnit: expected 'ms' or 'ns'")
    tracks: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
    for i, ev in enumerate(trace["traceEvents"]):
        where = f"traceEvents[{i}]"
        if not isinstance(ev, Mapping):
            raise ValueError(f"{where}: expected an object")
        ph = ev.get("ph")
        if ph not in ("X", "C", "M"):
            raise ValueError(f"{where}.ph: expected 'X', 'C' or 'M', got {ph!r}")
        if not isinstance(ev.get("name"), str) or not ev["name"]:
            raise ValueError(f"{where}.name: expected a non-empty string")
        for key in ("pid", "tid"):
            if key in ev and (isinstance(ev[key], bool) or not isinstance(ev[key], int)):
                raise ValueError(f"{where}.{key}: expected an integer, got {ev[key]!r}")
        if "pid" not in ev:
            raise ValueError(f"{where}.pid: missing")
        if "args" in ev and not isinstance(ev["args"], Mapping):
            raise ValueError(f"{where}.args: expected an object")
        if ph == "M":
            if ev["name"] not in _METADATA_NAMES:
                raise ValueError(f"{where}.name: unknown metadata event {ev['name']!r}")
            continue
        ts = ev.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise ValueError(f"{where}.ts: expected a finite number >= 0 (microseconds), got {ts!r}")
        if ph == "C":
            args = ev.get("args")
            if not args or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in args.values()):
                raise ValueError(f"{where}.args: a counter needs numeric series values, got {args!r}")
            continue
        dur = ev.get("dur")
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
            raise ValueError(f"{where}.dur: expected a finite number >= 0 (microseconds), got {dur!r}")
        if "tid" not in ev:
            raise ValueError(f"{where}.tid: missing")
        tracks.setdefault((ev["pid"], ev["tid"]), []).append((float(ts), float(ts) + float(dur), i))
    for (pid, tid), spans in tracks.items():
        spans.sort(key=lambda x: (x[0], -x[1]))
        stack: list[tuple[float, float, int]] = []
        for s, e, i in spans:
            while stack and stack[-1][1] <= s:
                stack.pop()
            if stack and e > stack[-1][1]:
                raise ValueError(
                    f"traceEvents[{i}]: slice [{s}, {e}] us partially overlaps traceEvents[{stack[-1][2]}] "
                    f"on pid {pid} tid {tid}; slices on one track must nest"
                )
            stack.append((s, e, i))
