"""A measured serving run imported from a client benchmark: per-request timings, the workload they imply, the
run's settings and the server's acceptance counters. Written by `draftsim import vllm-bench|guidellm`, read by
`draftsim compare`.

On disk, a folder: `run.json` (source, model, traffic settings, spec-decode counters, what was left out and
why) + `requests.jsonl` (one request per line: id, send time, lengths, TTFT, E2E, inter-token gaps) +
`arrivals.txt` (the send times, one a line, for `workload: {arrival: {kind: replay, file: ...}}`).
Times are seconds; send times are relative to the run's first send.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from traces.atomic import atomic_open, atomic_write_text
from traces.config_base import validate_document
from traces.errors import TraceFormatError, shorten
from traces.limits import MAX_DRAFT_TOKENS, MAX_NUM_REQUESTS, MAX_SECONDS, MAX_TOKENS_PER_REQUEST
from traces.parsing import iter_jsonl, parse_json, read_text

FORMAT_VERSION = 1
RUN_FILE, REQUESTS_FILE, ARRIVALS_FILE, ITL_FILE = "run.json", "requests.jsonl", "arrivals.txt", "itl.txt"


class RequestHistogramDoc(BaseModel):
    """One request's spec-decode histogram (GuideLLM's per-request metrics): histogram[j] = steps accepting j."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: str = Field(max_length=1000)
    k: int = Field(ge=1, le=MAX_DRAFT_TOKENS)
    histogram: list[Annotated[int, Field(ge=0)]] = Field(max_length=MAX_DRAFT_TOKENS + 1)


class SpecDecodeCounters(BaseModel):
    """run.json `spec_decode`: vLLM's spec-decode counter deltas over the run (traces/importers/vllm_bench.py)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    acceptance_length: float = Field(ge=1, le=MAX_DRAFT_TOKENS + 1)
    acceptance_rate_pct: float = Field(ge=0, le=100)
    num_drafts: float = Field(ge=0)
    draft_tokens: float = Field(ge=0)
    accepted_tokens: float = Field(ge=0)
    per_position_acceptance_rates: list[Annotated[float, Field(ge=0, le=1)]] = Field(max_length=MAX_DRAFT_TOKENS)
    # the share of decode steps that proposed (traces/acceptance_levels.py proposal_rate_from_counts), its lower
    # bound and the decode steps it counts; or why it was not derived
    proposal_rate: Annotated[float, Field(ge=0, le=1)] | None = None
    proposal_rate_low: Annotated[float, Field(ge=0, le=1)] | None = None
    decode_steps: Annotated[int | float, Field(ge=0)] | None = None
    proposal_rate_note: str | None = Field(None, max_length=2000)
    from_: str | None = Field(None, alias="from", max_length=2000)  # how the counters were formed
    requests: list[RequestHistogramDoc] = Field(default_factory=list, max_length=MAX_NUM_REQUESTS)


class RunFile(BaseModel):
    """run.json: what `draftsim compare` reads from it is typed and bounded; other keys the importer kept (the
    benchmark's own settings) are carried as they are, for provenance."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    format_version: Literal[1]
    name: str = Field(max_length=1000)
    requests: int = Field(ge=1, le=MAX_NUM_REQUESTS)
    source: dict[str, Any] = Field(default_factory=dict)
    model_id: str | None = None
    request_rate: float | Literal["inf"] | None = None
    max_concurrency: int | None = None
    itl: str | None = None
    left_out: dict[str, Any] = Field(default_factory=dict)
    spec_decode: SpecDecodeCounters | None = None


@dataclass
class MeasuredRequest:
    """One completed request as the client measured it (seconds)."""

    id: str
    send_time: float  # relative to the run's first send
    prompt_len: int
    output_len: int
    ttft: float
    e2e: float
    itl: np.ndarray | None  # gaps between streamed chunks after the first (None: only the run's pooled gaps kept)
    trace_id: str | None = None  # the acceptance trace it replayed, when the run was draftsim's own

    @property
    def tpot(self) -> float:
        """(E2E - TTFT) / (output_len - 1), vLLM's and draftsim's definition; NaN for one-token outputs."""
        return (self.e2e - self.ttft) / (self.output_len - 1) if self.output_len > 1 else math.nan


@dataclass
class MeasuredRun:
    """One benchmark run: its requests in send order and what the source said about the run."""

    name: str
    requests: list[MeasuredRequest]
    info: dict[str, Any] = field(default_factory=dict)  # source, model, request_rate, spec_decode, failed, ...
    pooled_itl: np.ndarray | None = None  # every gap of the run, when the source kept no per-request gaps

    def delivered_rate(self) -> float | None:
        """Requests per second the client actually sent: (requests - 1) / (last send - first send); None for a
        single request or sends all at once."""
        sends = [r.send_time for r in self.requests]
        span = max(sends) - min(sends) if sends else 0.0
        return (len(sends) - 1) / span if len(sends) > 1 and span > 0 else None

    def arrays(self) -> dict[str, np.ndarray]:
        """Per-request columns as arrays (send, ttft, e2e, tpot, prompt_len, output_len) and all ITLs pooled."""
        rs = self.requests
        return {"send": np.array([r.send_time for r in rs], dtype=float),
                "ttft": np.array([r.ttft for r in rs], dtype=float),
                "e2e": np.array([r.e2e for r in rs], dtype=float),
                "tpot": np.array([r.tpot for r in rs], dtype=float),
                "prompt_len": np.array([r.prompt_len for r in rs], dtype=np.int64),
                "output_len": np.array([r.output_len for r in rs], dtype=np.int64),
                "itl": self.pooled_itl if self.pooled_itl is not None else np.concatenate([r.itl for r in rs])}


POISSON_SIGMAS = 3.0  # a Poisson run's delivered rate is off by more than this many standard errors: warn
CONSTANT_TOLERANCE = 0.05  # a constant-rate run's delivered rate is off by more than 5%: warn


def arrival_check(run: MeasuredRun, poisson: bool) -> dict[str, Any]:
    """The delivered rate beside the nominal one and, when they disagree beyond sampling, a warning: a Poisson
    rate estimated from n - 1 gaps has relative standard error 1 / sqrt(n - 1); a constant rate has none."""
    nominal = run.info.get("request_rate")
    delivered = run.delivered_rate()
    out: dict[str, Any] = {"delivered_rate": delivered, "arrival_warnings": []}
    if delivered is None or isinstance(nominal, bool) or not isinstance(nominal, (int, float)) or \
            not math.isfinite(nominal) or nominal <= 0:
        return out
    n = len(run.requests)
    tol = POISSON_SIGMAS / math.sqrt(n - 1) if poisson else CONSTANT_TOLERANCE
    if abs(delivered / nominal - 1) > tol:
        cap = run.info.get("max_concurrency")
        out["arrival_warnings"].append(
            f"{run.name}: the client delivered {delivered:.4g} req/s, {delivered / nominal:.2f}x the nominal "
            f"{nominal:g} ({'Poisson' if poisson else 'constant'} arrivals: more than "
            f"{100 * tol:.0f}% off over {n} requests)" + (f"; max concurrency {cap} can hold sends back" if cap else "")
            + "; compare replays the send times as delivered")
    return out


COLD_FACTOR = 3.0  # a first request whose TTFT is this many times the others' median: a cold server
COLD_MIN_REQUESTS = 5


def cold_first_request(run: MeasuredRun) -> str | None:
    """A warning when the first request sent waited far longer for its first token than the rest (the server's
    first-request warm-up: compilation, caches), which no simulation of a warm server reproduces; else None."""
    if len(run.requests) < COLD_MIN_REQUESTS:
        return None
    first = min(run.requests, key=lambda r: r.send_time)
    rest = float(np.median([r.ttft for r in run.requests if r is not first]))
    if rest > 0 and first.ttft > COLD_FACTOR * rest:
        return (f"{run.name}: the first request sent ({first.id}) has TTFT {first.ttft:.3g} s, "
                f"{first.ttft / rest:.1f}x the other requests' median {rest:.3g} s: a cold server? (warm it up "
                "before measuring, or leave the request out of the client's results)")
    return None


def number(doc: dict[str, Any], key: str, where: str, field_name: str, *, minimum: float = 0.0,
           integer: bool = False, line: int | None = None, maximum: float | None = None) -> float:
    """doc[key] as a finite number in [minimum, maximum] (an integer when asked); otherwise an error naming file
    and field."""
    if key not in doc:
        raise TraceFormatError(where, "missing", field=field_name, line=line)
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not float(v).is_integer()):
        raise TraceFormatError(where, f"expected {'an integer' if integer else 'a number'}, got {shorten(v)}",
                               field=field_name, line=line)
    if not math.isfinite(v) or v < minimum:
        raise TraceFormatError(where, f"expected a finite number >= {minimum:g}, got {shorten(v)}", field=field_name,
                               line=line)
    if maximum is not None and v > maximum:
        raise TraceFormatError(where, f"expected at most {maximum:g}, got {shorten(v)}", field=field_name, line=line)
    return int(v) if integer else float(v)


def check_request(r: MeasuredRequest, where: str, fld: str) -> None:
    """Timings that can happen: 0 <= TTFT <= E2E, ITLs >= 0 and summing to no more than E2E - TTFT."""
    if not 1 <= r.output_len <= MAX_TOKENS_PER_REQUEST:
        raise TraceFormatError(where, f"output length {r.output_len}: expected 1..{MAX_TOKENS_PER_REQUEST}",
                               field=f"{fld}.output_len")
    if not 0 <= r.prompt_len <= MAX_TOKENS_PER_REQUEST:
        raise TraceFormatError(where, f"prompt length {r.prompt_len}: expected 0..{MAX_TOKENS_PER_REQUEST}",
                               field=f"{fld}.prompt_len")
    for name in ("ttft", "e2e"):  # durations (a send time may still be a clock reading while importing)
        v = getattr(r, name)
        if not 0 <= v <= MAX_SECONDS:
            raise TraceFormatError(where, f"{name} {v!r}: expected seconds in [0, {MAX_SECONDS:g}]",
                                   field=f"{fld}.{name}")
    if r.ttft > r.e2e * (1 + 1e-9) + 1e-9:
        raise TraceFormatError(where, f"TTFT {r.ttft} s is later than the end-to-end latency {r.e2e} s",
                               field=f"{fld}.ttft")
    if r.itl is None:
        return
    if r.itl.size > r.output_len - 1:
        raise TraceFormatError(where, f"{r.itl.size} inter-token latencies for {r.output_len} output tokens: "
                               "expected at most output_len - 1 gaps", field=f"{fld}.itl")
    if r.itl.size and (not np.all(np.isfinite(r.itl)) or r.itl.min() < 0):
        raise TraceFormatError(where, "inter-token latencies must be finite and >= 0", field=f"{fld}.itl")
    if r.itl.sum() > (r.e2e - r.ttft) * (1 + 1e-6) + 1e-6:
        raise TraceFormatError(where, f"inter-token latencies sum to {r.itl.sum():.6g} s, more than E2E - TTFT = "
                               f"{r.e2e - r.ttft:.6g} s", field=f"{fld}.itl")


def run_document(run: MeasuredRun, where: str) -> dict[str, Any]:
    """run.json's content for `run`, checked against RunFile (what load_measured accepts); errors name `where`."""
    doc = {"format_version": FORMAT_VERSION, "name": run.name, "requests": len(run.requests), **run.info}
    validate_document(RunFile, doc, where, "measured-run file")
    return doc


def save_measured(run: MeasuredRun, out: str | Path) -> Path:
    """Write the folder atomically (each file via temp + rename); requests are checked first."""
    folder = Path(out)
    if not run.requests:
        raise ValueError(f"{run.name}: no completed requests to write")
    for i, r in enumerate(run.requests):
        check_request(r, str(folder / REQUESTS_FILE), f"[{i}]")
        if not 0 <= r.send_time <= MAX_SECONDS:
            raise TraceFormatError(str(folder / REQUESTS_FILE), f"send time {r.send_time!r}: expected seconds since "
                                   f"the first send in [0, {MAX_SECONDS:g}]", field=f"[{i}].send_time")
        if (r.itl is None) != (run.pooled_itl is not None):
            raise ValueError(f"{run.name}: request {r.id}: give per-request gaps or the run's pooled gaps, not both")
    run_doc = run_document(run, str(folder / RUN_FILE))
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_open(folder / REQUESTS_FILE, "w") as f:
        for r in run.requests:
            doc = {"id": r.id, "send_time": r.send_time, "prompt_len": r.prompt_len, "output_len": r.output_len,
                   "ttft": r.ttft, "e2e": r.e2e,
                   "itl": None if r.itl is None else [float(x) for x in r.itl]}
            if r.trace_id is not None:
                doc["trace_id"] = r.trace_id
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")
    if run.pooled_itl is not None:
        atomic_write_text(folder / ITL_FILE, "".join(f"{float(x)!r}\n" for x in run.pooled_itl))
    atomic_write_text(folder / ARRIVALS_FILE, "".join(f"{r.send_time!r}\n" for r in run.requests))
    atomic_write_text(folder / RUN_FILE, json.dumps(run_doc, indent=1) + "\n")
    return folder


def load_measured(path: str | Path) -> MeasuredRun:
    """Read and check a folder written by save_measured; errors name the file, line and field."""
    folder = Path(path)
    meta_path = folder / RUN_FILE
    if not meta_path.is_file():
        raise TraceFormatError(str(meta_path), "missing: not a measured-run folder (write one with "
                               "`draftsim import vllm-bench FILE OUT` or `draftsim import guidellm FILE OUT`)")
    checked = validate_document(RunFile, parse_json(read_text(meta_path), str(meta_path)), str(meta_path),
                                "measured-run file")
    meta = checked.model_dump(by_alias=True)
    if checked.spec_decode is not None:  # the counters as written (optional keys the file left out stay out)
        meta["spec_decode"] = checked.spec_decode.model_dump(by_alias=True, exclude_unset=True)
    where = str(folder / REQUESTS_FILE)
    reqs, seen = [], set()
    for line, doc in iter_jsonl(folder / REQUESTS_FILE):
        if not isinstance(doc, dict):
            raise TraceFormatError(where, "expected a JSON object", line=line)
        rid = doc.get("id")
        if not isinstance(rid, str) or not rid or rid in seen:
            raise TraceFormatError(where, f"expected a unique non-empty string id, got {shorten(rid)}", line=line, field="id")
        seen.add(rid)
        itl = doc.get("itl", [])
        if itl is not None and (not isinstance(itl, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in itl)):
            raise TraceFormatError(where, "expected a list of numbers", line=line, field="itl")
        tid = doc.get("trace_id")
        if tid is not None and not isinstance(tid, str):
            raise TraceFormatError(where, f"expected a string, got {shorten(tid)}", line=line, field="trace_id")
        r = MeasuredRequest(rid, number(doc, "send_time", where, "send_time", line=line, maximum=MAX_SECONDS),
                            number(doc, "prompt_len", where, "prompt_len", integer=True, line=line),
                            number(doc, "output_len", where, "output_len", minimum=1, integer=True, line=line),
                            number(doc, "ttft", where, "ttft", line=line), number(doc, "e2e", where, "e2e", line=line),
                            None if itl is None else np.asarray(itl, dtype=float), tid)
        check_request(r, where, f"line {line}")
        reqs.append(r)
    if not reqs:
        raise TraceFormatError(where, "contains no requests")
    if meta["requests"] != len(reqs):
        raise TraceFormatError(str(meta_path), f"says {meta['requests']} requests but {where} has "
                               f"{len(reqs)}; the folder is incomplete", field="requests")
    info = {k: v for k, v in meta.items() if k not in ("format_version", "name", "requests")}
    pooled = None
    if any(r.itl is None for r in reqs):
        if not all(r.itl is None for r in reqs) or not (folder / ITL_FILE).is_file():
            raise TraceFormatError(where, f"some requests have no itl list; then every request has none and "
                                   f"{folder / ITL_FILE} holds the run's gaps", field="itl")
        pooled = _gaps(folder / ITL_FILE)
    return MeasuredRun(meta["name"], reqs, info, pooled)


def _gaps(path: Path) -> np.ndarray:
    out = []
    for i, s in enumerate(read_text(path).splitlines(), start=1):
        try:
            v = float(s)
        except ValueError:
            raise TraceFormatError(str(path), f"expected one gap in seconds, got {shorten(s)}", line=i) from None
        if not math.isfinite(v) or v < 0:
            raise TraceFormatError(str(path), f"expected a finite gap >= 0, got {shorten(s)}", line=i)
        out.append(v)
    return np.asarray(out, dtype=float)
