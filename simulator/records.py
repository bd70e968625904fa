"""Column schemas of the engine's output tables (per request, per step), one source of truth.

The engine fills these; metrics, plots, the timeline and the results folder read them.
Times are seconds of simulated time.
"""
from __future__ import annotations

from dataclasses import dataclass

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
    "phase": ("str", "'prefill', 'decode' (AR), 'draft', 'verify', or 'mixed' (prefill + decode/verify)"),
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


@dataclass
class ColumnBuffer:
    """Append-only typed columns that grow geometrically; `frame()` makes the DataFrame once."""

    schema: dict[str, tuple[str, str]]

    def __post_init__(self) -> None:
        self._n = 0
        self._cap = 1024
        self._cols = {c: self._alloc(t, self._cap) for c, (t, _) in self.schema.items()}

    @staticmethod
    def _alloc(dtype: str, n: int) -> np.ndarray:
        return np.empty(n, dtype=object) if dtype == "str" else np.zeros(n, dtype=dtype)

    def __len__(self) -> int:
        return self._n

    def append(self, **row) -> None:
        if self._n == self._cap:
            self._cap *= 2
            for c, arr in self._cols.items():
                new = self._alloc(self.schema[c][0], self._cap)
                new[: self._n] = arr[: self._n]
                self._cols[c] = new
        i = self._n
        for c, v in row.items():
            self._cols[c][i] = v
        self._n += 1

    def frame(self) -> pd.DataFrame:
        data = {}
        for c, (t, _) in self.schema.items():
            col = self._cols[c][: self._n]
            data[c] = col.astype(str) if t == "str" else col.copy()
        return pd.DataFrame(data)
