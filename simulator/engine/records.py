"""Column schemas of the engine's output tables (per request, per step), one source of truth.

The engine fills these; metrics, plots, the timeline and the results folder read them.
Times are seconds of simulated time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# column -> (dtype, meaning)
REQUEST_COLUMNS: dict[str, tuple[str, str]] = {
    "request_id": ("str", "id (trace request id, with a #n suffix when a trace is reused)"),
    "trace_id": ("str", "id of the trace request it replays"),
    "category": ("str", "workload category, '' when unknown"),
    "arrival_time": ("float64", "when it arrived"),
    "prompt_len": ("int64", "prompt tokens"),
    "output_len": ("int64", "output tokens it must generate"),
    "first_scheduled_time": ("float64", "first time the scheduler admitted it"),
    "first_token_time": ("float64", "end of the step that produced its first output token"),
    "finish_time": ("float64", "end of the step that produced its last token"),
    "ttft": ("float64", "first_token_time - arrival_time"),
    "tpot": ("float64", "(finish_time - first_token_time) / (output_len - 1); NaN when output_len == 1"),
    "e2e": ("float64", "finish_time - arrival_time"),
    "queue_delay": ("float64", "first_scheduled_time - arrival_time"),
    "decode_steps": ("int64", "verify/decode steps it took part in"),
    "proposed_tokens": ("int64", "draft tokens proposed for it"),
    "accepted_tokens": ("int64", "draft tokens accepted"),
    "preemptions": ("int64", "times it was preempted (recomputed)"),
    "sub_batch": ("int64", "PSD sub-batch it finished in (0/1), -1 without PSD"),
}

STEP_COLUMNS: dict[str, tuple[str, str]] = {
    "step": ("int64", "step number on this server, from 0"),
    "device": ("str", "'target' or 'drafter' (the dedicated draft GPU in PSD)"),
    "phase": ("str", "'prefill' (on the drafter: its own prefill), 'decode' (AR), 'draft', 'verify', 'mixed' "
                     "(prefill + decode/verify), or 'sync' (PSD: after both phases)"),
    "start": ("float64", "slice start"),
    "end": ("float64", "slice end"),
    "num_seqs": ("int64", "sequences in the slice"),
    "prefill_tokens": ("int64", "prompt tokens processed"),
    "batched_tokens": ("int64", "tokens in the forward (prefill + decode/verify query tokens)"),
    "kv_tokens": ("int64", "KV tokens attended (context of the batch)"),
    "kv_blocks_used": ("int64", "KV blocks allocated on the target after the step"),
    "proposed_tokens": ("int64", "draft tokens proposed (draft) or verified (verify)"),
    "accepted_tokens": ("int64", "draft tokens accepted (verify)"),
    "emitted_tokens": ("int64", "output tokens produced"),
    "sub_batch": ("int64", "PSD sub-batch (0/1), -1 otherwise"),
    "drafters": ("str", "drafter names used in the slice, '+'-joined"),
}

# A cluster's requests and steps tables (simulator/cluster/simulation.py) add this column after the schema's.
REPLICA_COLUMN = ("replica", "int64", "replica of the cluster that served the request or ran the step "
                                      "(0 for a single server when a table mixes it with cluster runs)")


def stack_tables(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate runs' tables; when some come from a cluster, the others (single servers) get replica 0."""
    name = REPLICA_COLUMN[0]
    if any(name in f.columns for f in frames):
        frames = [f if name in f.columns else f.assign(**{name: np.int64(0)}) for f in frames]
    return pd.concat(frames, ignore_index=True)


@dataclass
class ColumnBuffer:
    """Append-only rows in schema order: one tuple at a time (`append_row`) or a block of column arrays
    (`append_columns`, a compiled run's rows); `frame()` builds the typed DataFrame once at the end, rows in
    the order they were appended."""

    schema: dict[str, tuple[str, str]]

    def __post_init__(self) -> None:
        self._rows: list[tuple] = []
        self._blocks: list[tuple[int, dict[str, np.ndarray]]] = []  # (rows appended before it, columns)
        self._block_rows = 0
        self.append_row = self._rows.append  # hot path: one tuple per row, in schema order

    def __len__(self) -> int:
        return len(self._rows) + self._block_rows

    def append(self, **row) -> None:
        """One row by column name; columns left out are 0 (numbers) or "" (strings)."""
        unknown = set(row) - set(self.schema)
        if unknown:
            raise KeyError(f"unknown column(s) {sorted(unknown)}")
        self._rows.append(tuple(row.get(c, "" if t == "str" else 0) for c, (t, _) in self.schema.items()))

    def append_columns(self, columns: dict[str, np.ndarray]) -> None:
        """Rows given as one equal-length array per schema column."""
        if set(columns) != set(self.schema):
            raise KeyError(f"columns {sorted(set(columns) ^ set(self.schema))} differ from the schema")
        n = {len(v) for v in columns.values()}
        if len(n) != 1:
            raise ValueError(f"columns of unequal lengths {sorted(n)}")
        self._blocks.append((len(self._rows), columns))
        self._block_rows += n.pop()

    def _dtype(self, t: str):
        return object if t == "str" else t

    def frame(self) -> pd.DataFrame:
        cols = list(self.schema)
        if not self._blocks:
            df = pd.DataFrame.from_records(self._rows, columns=cols) if self._rows else pd.DataFrame(columns=cols)
            return df.astype({c: self._dtype(t) for c, (t, _) in self.schema.items()})
        parts: list[dict[str, np.ndarray]] = []
        done = 0
        for before, block in self._blocks + [(len(self._rows), None)]:
            if before > done:
                rows = list(zip(*self._rows[done:before]))
                parts.append({c: np.asarray(rows[j], dtype=self._dtype(self.schema[c][0]))
                              for j, c in enumerate(cols)})
                done = before
            if block is not None:
                parts.append(block)
        data = {c: np.concatenate([np.asarray(p[c], dtype=self._dtype(t)) for p in parts])
                for c, (t, _) in self.schema.items()}
        # string columns as object Series: a bare object array would be inferred as pandas' str dtype and converted back
        data = {c: pd.Series(v, dtype=object, copy=False) if v.dtype == object else v for c, v in data.items()}
        # copy=False: the columns are this call's own arrays, kept as they are (not stacked into 2-D blocks)
        frame = pd.DataFrame(data, columns=cols, copy=False)
        return frame.astype({c: self._dtype(t) for c, (t, _) in self.schema.items()})


@dataclass
class StepLog:
    """What a server's run has recorded so far: its step rows, ITL gaps and step counters (the compiled run and a
    cluster replica's write them; `Server.result()` reads them)."""

    steps: ColumnBuffer = field(default_factory=lambda: ColumnBuffer(STEP_COLUMNS))
    itl_chunks: list[np.ndarray] = field(default_factory=list)
    step_no: int = 0  # steps taken
    psd_fallback_steps: int = 0  # PSD steps run as plain SD (one side empty, or fewer than split_min_batch decoding)
