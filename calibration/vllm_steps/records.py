"""Engine-step records written by the vLLM plugin: the data classes, the batched atomic writer and the
validating loader. Plain Python (no vLLM), so the records can be read and tested anywhere.

One JSON object per line: a header line (`{"header": {...}}`: vLLM version, pid, config) and then one
line per engine step that scheduled tokens. The model runner (a separate worker process on CPU) writes
`PATH.worker.PID` with its own time per step (forward, drafting); `load_steps` joins the two in order.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from traces.errors import TraceFormatError, shorten
from traces.parsing import iter_jsonl

STEPS_ENV = "DRAFTSIM_VLLM_STEPS"
FIRST_STEP_FIELDS = ("temperature", "arrival")  # a RequestStep's optional fields, recorded on its first step
RECORD_VERSION = 1


@dataclass
class RequestStep:
    """What one request did in one engine step."""

    id: str
    scheduled: int  # tokens scheduled (prefill chunk, or 1 + drafts in decode)
    computed_before: int  # tokens already in the KV cache before this step
    num_tokens: int  # prompt + output tokens known to the engine before this step
    prompt_len: int
    proposed: int  # draft tokens the drafter had proposed for this step (before the scheduler's cut)
    drafted: int  # draft tokens scheduled for verification
    accepted: int  # drafts accepted (0 when none were scheduled)
    emitted: int  # tokens the step sampled for the request, before the stop trim
    kept: int  # tokens kept in the output (emitted minus what the stop condition trimmed)
    finished: bool = False
    # on a request's first step only (None elsewhere, and in logs recorded before these were):
    temperature: float | None = None  # its sampling temperature (0: greedy)
    arrival: float | None = None  # vLLM's arrival time (time.time() when the API server or LLM took it)

    @property
    def is_prefill(self) -> bool:
        """More than the last sampled token was uncomputed: a prompt (or recompute) chunk."""
        return self.num_tokens - self.computed_before > 1


@dataclass
class StepRecord:
    """One engine step: wall times, queue sizes, token counts, KV use and per-request detail."""

    step: int
    wall_start: float  # time.time() when schedule() began, s
    duration: float  # schedule() start to update_from_output() end, s (perf_counter)
    num_running: int  # after scheduling
    num_waiting: int
    kv_blocks_used: int | None
    kv_blocks_total: int | None
    draft_seconds: float | None  # model runner's propose time (the worker's file, joined by load_steps)
    forward_seconds: float | None = None  # model runner's execute + sample time, incl. drafting (worker file)
    load: float | None = None  # 1-minute load average when the step ended (not per core)
    requests: list[RequestStep] = field(default_factory=list)

    @property
    def prefill_tokens(self) -> int:
        return sum(r.scheduled for r in self.requests if r.is_prefill)

    @property
    def decode_seqs(self) -> int:
        return sum(1 for r in self.requests if not r.is_prefill)

    @property
    def drafted_tokens(self) -> int:
        return sum(r.drafted for r in self.requests)

    @property
    def accepted_tokens(self) -> int:
        return sum(r.accepted for r in self.requests)

    @property
    def batched_tokens(self) -> int:
        return sum(r.scheduled for r in self.requests)

    @property
    def kv_tokens(self) -> int:
        """Context tokens the step attends over (cached before it plus the ones it schedules)."""
        return sum(r.computed_before + r.scheduled for r in self.requests)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for r in d["requests"]:  # first-step fields: absent rather than null on every other step
            for key in FIRST_STEP_FIELDS:
                if r[key] is None:
                    del r[key]
        d.update(prefill_tokens=self.prefill_tokens, decode_seqs=self.decode_seqs,
                 drafted_tokens=self.drafted_tokens, accepted_tokens=self.accepted_tokens)
        return d


@dataclass
class StepLog:
    """A loaded step-record file."""

    header: dict[str, Any]
    steps: list[StepRecord]


class JsonlWriter:
    """Appends whole JSON lines to PATH in batches, one write() + flush per batch; the owner also flushes
    whenever the engine goes idle, so every finished request's steps are on disk even if the process is
    killed at shutdown (a torn last line is reported by the loader with its line number)."""

    def __init__(self, path: str | Path, header: dict[str, Any], batch: int = 32) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")
        self._buf: list[str] = [json.dumps({"header": {"record_version": RECORD_VERSION, **header}})]
        self._batch = batch
        self.closed = False

    def add(self, doc: dict[str, Any]) -> None:
        self._buf.append(json.dumps(doc, separators=(",", ":")))
        if len(self._buf) >= self._batch:
            self.flush()

    def flush(self) -> None:
        if self.closed:
            return
        if self._buf:
            self._f.write("\n".join(self._buf) + "\n")
            self._buf = []
        self._f.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self.closed = True


# ---------------------------------------------------------------- loading

_REQ_INT = ("scheduled", "computed_before", "num_tokens", "prompt_len", "proposed", "drafted", "accepted",
            "emitted", "kept")
_STEP_KEYS = {"step", "wall_start", "duration", "num_running", "num_waiting", "kv_blocks_used", "kv_blocks_total",
              "draft_seconds", "forward_seconds", "load", "requests", "prefill_tokens", "decode_seqs", "drafted_tokens", "accepted_tokens"}


def _int(doc: dict, key: str, path: str, line: int, fld: str, *, optional: bool = False) -> int | None:
    v = doc.get(key)
    if v is None and optional and key in doc:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TraceFormatError(path, f"expected an integer >= 0, got {shorten(v)}", line=line, field=fld)
    return v


def _num(doc: dict, key: str, path: str, line: int, *, optional: bool = False, field: str | None = None
         ) -> float | None:
    v = doc.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TraceFormatError(path, f"expected a finite number >= 0, got {shorten(v)}", line=line,
                               field=field or key)
    return float(v)


def parse_request_step(doc: Any, path: str, line: int, j: int) -> RequestStep:
    where = f"requests[{j}]"
    if not isinstance(doc, dict):
        raise TraceFormatError(path, "expected an object", line=line, field=where)
    unknown = set(doc) - set(_REQ_INT) - {"id", "finished", *FIRST_STEP_FIELDS}
    if unknown:
        raise TraceFormatError(path, f"unknown key(s) {sorted(unknown)}", line=line, field=where)
    if not isinstance(doc.get("id"), str) or not doc["id"]:
        raise TraceFormatError(path, f"expected a non-empty string, got {shorten(doc.get('id'))}", line=line,
                               field=where + ".id")
    vals = {k: _int(doc, k, path, line, f"{where}.{k}") for k in _REQ_INT}
    first = {k: _num(doc, k, path, line, optional=True, field=f"{where}.{k}") for k in FIRST_STEP_FIELDS}
    r = RequestStep(id=doc["id"], finished=bool(doc.get("finished", False)), **vals, **first)
    if r.accepted > r.drafted:
        raise TraceFormatError(path, f"accepted {r.accepted} > drafted {r.drafted}", line=line,
                               field=where + ".accepted")
    if r.kept > r.emitted:
        raise TraceFormatError(path, f"kept {r.kept} > emitted {r.emitted}", line=line, field=where + ".kept")
    if r.drafted and r.emitted and r.emitted != r.accepted + 1:
        raise TraceFormatError(path, f"emitted {r.emitted} != accepted {r.accepted} + 1 in a verify step",
                               line=line, field=where + ".emitted")
    return r


def parse_step(doc: Any, path: str, line: int) -> StepRecord:
    if not isinstance(doc, dict):
        raise TraceFormatError(path, f"expected a JSON object, got {type(doc).__name__}", line=line)
    unknown = set(doc) - _STEP_KEYS
    if unknown:
        raise TraceFormatError(path, f"unknown key(s) {sorted(unknown)}; expected some of {sorted(_STEP_KEYS)}",
                               line=line)
    reqs = doc.get("requests")
    if not isinstance(reqs, list):
        raise TraceFormatError(path, "expected a list", line=line, field="requests")
    return StepRecord(step=_int(doc, "step", path, line, "step"),
                      wall_start=_num(doc, "wall_start", path, line), duration=_num(doc, "duration", path, line),
                      num_running=_int(doc, "num_running", path, line, "num_running"),
                      num_waiting=_int(doc, "num_waiting", path, line, "num_waiting"),
                      kv_blocks_used=_int(doc, "kv_blocks_used", path, line, "kv_blocks_used", optional=True),
                      kv_blocks_total=_int(doc, "kv_blocks_total", path, line, "kv_blocks_total", optional=True),
                      draft_seconds=_num(doc, "draft_seconds", path, line, optional=True),
                      forward_seconds=_num(doc, "forward_seconds", path, line, optional=True),
                      load=_num(doc, "load", path, line, optional=True),
                      requests=[parse_request_step(r, path, line, j) for j, r in enumerate(reqs)])


def worker_files(path: Path) -> list[Path]:
    """The model-runner files of a step file: PATH.worker.PID, one per worker process."""
    return sorted(path.parent.glob(path.name + ".worker.*"))


def _read_jsonl(path: Path) -> tuple[dict[str, Any], list[tuple[int, Any]]]:
    """(header, [(line, record)]) of a step-record file, read by traces.parsing.iter_jsonl (regular files only,
    bounded lines, file and line in every error)."""
    header: dict[str, Any] | None = None
    rows: list[tuple[int, Any]] = []
    for i, doc in iter_jsonl(path):
        if i == 1:
            if not isinstance(doc, dict) or not isinstance(doc.get("header"), dict):
                raise TraceFormatError(str(path), "first line must be {\"header\": {...}}", line=1,
                                       field="header")
            header = doc["header"]
            if header.get("record_version") != RECORD_VERSION:
                raise TraceFormatError(str(path), f"record_version {header.get('record_version')!r} is not "
                                       f"supported (expected {RECORD_VERSION})", line=1,
                                       field="header.record_version")
            continue
        rows.append((i, doc))
    if header is None:
        raise TraceFormatError(str(path), "empty file (expected a header line and record lines)")
    return header, rows


def join_worker_times(steps: list[StepRecord], path: Path) -> None:
    """Fill draft_seconds / forward_seconds from a worker file: its n-th line is the engine's n-th step
    (synchronous scheduling, one worker); the scheduled-token totals must agree line by line."""
    _, rows = _read_jsonl(path)
    if len(rows) != len(steps):
        raise TraceFormatError(str(path), f"{len(rows)} model-runner steps but the engine recorded {len(steps)}; "
                               "the files are from different runs or the run did not finish")
    for (line, doc), st in zip(rows, steps):
        if not isinstance(doc, dict):
            raise TraceFormatError(str(path), "expected a JSON object", line=line)
        total = _int(doc, "scheduled", str(path), line, "scheduled")
        if total != st.batched_tokens:
            raise TraceFormatError(str(path), f"scheduled {total} tokens but engine step {st.step} scheduled "
                                   f"{st.batched_tokens}", line=line, field="scheduled")
        st.forward_seconds = _num(doc, "forward_seconds", str(path), line)
        st.draft_seconds = _num(doc, "draft_seconds", str(path), line, optional=True)


def load_steps(path: str | Path) -> StepLog:
    """Load and validate a step-record file (and join its worker file when there is exactly one);
    errors name the file, line and field."""
    path = Path(path)
    if not os.path.lexists(path):
        raise TraceFormatError(str(path), "step-record file not found")
    header, rows = _read_jsonl(path)
    from calibration.vllm_steps.record_files import check_step_header

    check_step_header(header, path)
    steps = [parse_step(doc, str(path), line) for line, doc in rows]
    for prev, cur in zip(steps, steps[1:]):
        if cur.step <= prev.step:
            raise TraceFormatError(str(path), f"step {cur.step} follows step {prev.step} (expected increasing)",
                                   field="step")
    workers = worker_files(path)
    if len(workers) == 1:
        join_worker_times(steps, workers[0])
    header["worker_files"] = [w.name for w in workers]
    return StepLog(header, steps)
