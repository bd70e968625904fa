"""Acceptance traces flattened per drafter, so a step looks up a whole batch with one gather."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from traces.bundle import RequestTrace
from traces.sampled_acceptance import tv_windows


@dataclass
class AcceptanceTable:
    """Per drafter: acc_len (and tv, proposal_len) of every trace concatenated; `offsets[t]` starts trace t."""

    drafters: tuple[str, ...]
    trace_ids: tuple[str, ...]
    offsets: np.ndarray  # int64, len = traces + 1
    acc_len: dict[str, np.ndarray]
    tv: dict[str, np.ndarray]  # only drafters whose traces all carry tv
    proposal_len: dict[str, np.ndarray]  # only drafters whose traces all carry proposal_len
    # (positions, tree_depth) rank rows (traces/tree.py), only drafters whose traces all carry tree_rank
    tree_rank: dict[str, np.ndarray] = field(default_factory=dict)
    tree_top_k: dict[str, int] = field(default_factory=dict)  # the bundle's params.tree_top_k, where given

    @classmethod
    def from_traces(cls, traces: list[RequestTrace], drafters: list[str] | tuple[str, ...],
                    with_acceptance: bool = True, tree_top_k: Mapping[str, int] | None = None) -> "AcceptanceTable":
        """The table of `traces`; `with_acceptance=False` keeps only names and offsets (AR runs read no
        acceptance, and a workload built without drawing it refuses any read). `tree_top_k`: each drafter's
        params.tree_top_k from the bundle (a tree is replayed from tree_rank only where it is known)."""
        lengths = np.array([r.output_len for r in traces], dtype=np.int64)
        offsets = np.zeros(len(traces) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        acc, tv, prop, ranks = {}, {}, {}, {}
        for d in drafters if with_acceptance else ():
            acc[d] = np.concatenate([r.drafters[d].acc_len for r in traces]).astype(np.int32)
            if all(r.drafters[d].tv is not None for r in traces):
                tv[d] = np.concatenate([r.drafters[d].tv for r in traces]).astype(np.float32)
            if all(r.drafters[d].proposal_len is not None for r in traces):
                prop[d] = np.concatenate([r.drafters[d].proposal_len for r in traces]).astype(np.int32)
            if all(r.drafters[d].tree_rank is not None for r in traces):
                ranks[d] = np.concatenate([r.drafters[d].tree_rank for r in traces])
        top_k = {d: int(v) for d, v in (tree_top_k or {}).items() if d in ranks}
        return cls(tuple(drafters), tuple(r.id for r in traces), offsets, acc, tv, prop, ranks, top_k)

    def flat_index(self, trace_idx: np.ndarray, position: np.ndarray) -> np.ndarray:
        """Flat positions, clipped into each trace (positions past the end reuse the last entry)."""
        last = self.offsets[trace_idx + 1] - 1
        return np.minimum(self.offsets[trace_idx] + position, last)

    def tv_window(self, drafter: str, trace_idx: np.ndarray, position: np.ndarray, width: int) -> np.ndarray:
        """TV at positions p .. p+width-1 of each request (NaN past the trace's end), shape (n, width)."""
        return tv_windows(self.tv[drafter], position, width, self.offsets[trace_idx], self.offsets[trace_idx + 1])
