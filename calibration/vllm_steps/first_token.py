"""Each request's way to its first token, measured and simulated, split into the same three parts.

Measured (the client's times joined to the vLLM step recorder's steps): queue = send to the start of the first step
that scheduled the request, engine = that step's start to the end of the step that sampled its first token (its
prefill chunks, and anything else those steps carried), out = that step's end to the client's first streamed output
(the engine's output path). Simulated (a requests table, simulator/engine/records.py): queue = first_scheduled_time -
arrival_time, engine = first_token_time - first_scheduled_time; the engine has no output path, so out is 0.
Lining the two up per request shows which part of TTFT a prediction misses (`draftsim validate`'s diagnosis,
benchmarks/bench_first_token.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from calibration.vllm_steps.records import StepLog, StepRecord
from traces.errors import TraceFormatError


@dataclass(frozen=True)
class FirstToken:
    """One request's first token as measured: client times (wall s) against the steps that served it."""

    id: str  # the client's id
    send: float  # the client sent it
    admitted: float  # start of the first step that scheduled it
    first_step_end: float  # end of the step that sampled its first token
    first_token: float  # the client received its first output
    prefill_chunks: int  # steps that scheduled part of its prompt
    steps_passed: int  # steps that began after it was sent and did not schedule it (0: the first schedule() took it)
    idle_at_send: bool  # the engine was idle when it was sent: the last step had ended, finished all it ran, left none waiting
    decode_seqs: int  # other requests decoding (or verifying) in its first-token step
    drafted_tokens: int  # drafts verified in its first-token step
    draft_seconds: float  # the proposer's time in its first-token step (0 when not recorded)

    @property
    def queue(self) -> float:
        return self.admitted - self.send

    @property
    def engine(self) -> float:
        return self.first_step_end - self.admitted

    @property
    def out(self) -> float:
        return self.first_token - self.first_step_end

    @property
    def ttft(self) -> float:
        return self.first_token - self.send


def _end(st: StepRecord) -> float:
    return st.wall_start + st.duration


def _idle_after(st: StepRecord, t: float) -> bool:
    """At wall time `t`, after step `st` (the last to begin before it), the engine was idle: the step had ended,
    every request in it had finished and none was waiting (a send in the loop's gap between busy steps is not)."""
    return _end(st) <= t and st.num_waiting == 0 and all(r.finished for r in st.requests)


def measured_first_tokens(log: StepLog, clients: Iterable[tuple[str, float, float]], engine_ids: dict[str, str],
                          where: str) -> list[FirstToken]:
    """One FirstToken per client request (id, send time, first-token time), joined to the log through
    `engine_ids` (client id -> engine id); a request the log never scheduled or never sampled is an error."""
    steps = sorted(log.steps, key=lambda s: s.wall_start)
    starts = np.array([s.wall_start for s in steps])
    out = []
    for cid, send, first in clients:
        eid = engine_ids[cid]
        mine = [(i, next(r for r in s.requests if r.id == eid)) for i, s in enumerate(steps)
                if any(r.id == eid for r in s.requests)]
        if not mine:
            raise TraceFormatError(where, f"request {cid!r} (engine id {eid!r}) is in no step", field="requests")
        sampled = next(((i, r) for i, r in mine if r.emitted > 0), None)
        if sampled is None:
            raise TraceFormatError(where, f"request {cid!r}: no step sampled a token for it", field="emitted")
        adm = steps[mine[0][0]]
        ft = steps[sampled[0]]
        before = int(np.searchsorted(starts, send))  # steps that began before the send
        idle = before == 0 or _idle_after(steps[before - 1], send)
        out.append(FirstToken(cid, send, adm.wall_start, _end(ft), first,
                              sum(1 for i, r in mine if i <= sampled[0] and r.is_prefill), mine[0][0] - before, idle,
                              sum(1 for r in ft.requests if r.id != eid and not r.is_prefill), ft.drafted_tokens,
                              ft.draft_seconds or 0.0))
    return out


@dataclass(frozen=True)
class Split:
    """Mean seconds of TTFT and its parts over a set of requests, and how many arrived at an idle engine."""

    requests: int
    ttft: float
    queue: float
    engine: float
    out: float
    idle_arrivals: int


def measured_split(rows: list[FirstToken]) -> Split:
    """The means of the measured parts (queue + engine + out = TTFT for every request)."""
    return Split(len(rows), float(np.mean([r.ttft for r in rows])), float(np.mean([r.queue for r in rows])),
                 float(np.mean([r.engine for r in rows])), float(np.mean([r.out for r in rows])),
                 sum(r.idle_at_send for r in rows))


def simulated_split(requests: pd.DataFrame, ids: Iterable[str] | None = None,
                    idle: dict[str, bool] | None = None) -> Split:
    """The same means from a simulated requests table (rows `ids` when given); `idle` (request id -> arrived at an
    idle engine, measured) is counted over the same rows when given."""
    r = requests.set_index("request_id")
    if ids is not None:
        r = r.loc[list(ids)]
    queue = r.first_scheduled_time - r.arrival_time
    engine = r.first_token_time - r.first_scheduled_time
    n_idle = sum(bool(idle[i]) for i in r.index) if idle is not None else 0
    return Split(len(r), float(r.ttft.mean()), float(queue.mean()), float(engine.mean()), 0.0, n_idle)
