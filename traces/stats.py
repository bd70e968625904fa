"""Summary statistics of a trace bundle: per drafter tokens per step at k = 1..8 and uncapped, per-position
acceptance at one k, and length distributions; overall and per category."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from traces.bundle import RequestTrace, TraceBundle
from traces.walk import UNCAPPED, walk_many

K_RANGE = tuple(range(1, 9))


@dataclass(frozen=True)
class LengthStats:
    """Mean, median, 90th percentile and max of a length column."""

    mean: float
    p50: float
    p90: float
    max: int

    @classmethod
    def of(cls, values) -> "LengthStats":
        v = np.asarray(values, dtype=np.float64)
        return cls(float(v.mean()), float(np.percentile(v, 50)), float(np.percentile(v, 90)), int(v.max()))


@dataclass(frozen=True)
class DrafterStats:
    """Replay statistics of one drafter (see traces/walk.py for the walk)."""

    tokens_per_step: dict[int, float]  # k -> mean tokens per step, pooled over requests
    uncapped: float  # the oracle walk: each step emits the whole acc_len
    k: int  # the k of the per-position rates
    unconditional: list[float]  # P(drafts 0..i all accepted) per step that proposed (vLLM's counter)
    conditional: list[float]  # P(draft i accepted | drafts 0..i-1 accepted)
    draft_fraction: float  # share of steps at k whose drafter proposed >= 1 token


@dataclass(frozen=True)
class GroupStats:
    """Statistics of a set of requests."""

    requests: int
    output_tokens: int
    prompt_len: LengthStats
    output_len: LengthStats
    drafters: dict[str, DrafterStats]


@dataclass(frozen=True)
class BundleStats:
    """The whole bundle plus one GroupStats per category (empty when no request has a category)."""

    target: str
    dataset: str
    overall: GroupStats
    categories: dict[str, GroupStats] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain data for `--json` (dict keys as strings)."""
        return asdict(self)


def drafter_stats(requests: list[RequestTrace], drafter: str, k: int = 5) -> DrafterStats:
    """Walk every request at k = 1..8, uncapped, and at `k` with per-position counters."""
    traces = [r.drafters[drafter] for r in requests]
    tps = {kk: walk_many(traces, kk).tokens_per_step for kk in K_RANGE}
    at_k = walk_many(traces, k, positions=k)
    denom = max(at_k.steps_with_draft, 1)
    uncond = (at_k.accepted_at / denom).tolist()
    cond = []
    prev = at_k.steps_with_draft
    for c in at_k.accepted_at.tolist():
        cond.append(c / prev if prev else float("nan"))
        prev = c
    return DrafterStats(tokens_per_step=tps, uncapped=walk_many(traces, UNCAPPED).tokens_per_step, k=k,
                        unconditional=uncond, conditional=cond,
                        draft_fraction=at_k.steps_with_draft / at_k.steps if at_k.steps else float("nan"))


def group_stats(requests: list[RequestTrace], drafters: list[str], k: int = 5) -> GroupStats:
    """Statistics of `requests` for each named drafter."""
    return GroupStats(requests=len(requests), output_tokens=int(sum(r.output_len for r in requests)),
                      prompt_len=LengthStats.of([r.prompt_len for r in requests]),
                      output_len=LengthStats.of([r.output_len for r in requests]),
                      drafters={d: drafter_stats(requests, d, k) for d in drafters})


def bundle_stats(bundle: TraceBundle, k: int = 5) -> BundleStats:
    """Overall and per-category statistics (requests without a category form `(none)` when others have one)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    names = bundle.drafter_names
    cats: dict[str, list[RequestTrace]] = {}
    if any(r.category is not None for r in bundle.requests):
        for r in bundle.requests:
            cats.setdefault(r.category if r.category is not None else "(none)", []).append(r)
    return BundleStats(target=bundle.meta.target, dataset=bundle.meta.dataset,
                       overall=group_stats(bundle.requests, names, k),
                       categories={c: group_stats(rs, names, k) for c, rs in sorted(cats.items())})
