"""Seeded synthetic drafter pools: K task specialists (plus an optional generalist) over a mixed workload.

Each specialist is strong on its own category and weak elsewhere. Per request and drafter the
mean per-token acceptance is the pool's level plus a small per-request jitter; per position the
acceptance probability q ~ Beta around that mean, `tv = 1 - q`, and the teacher-forced greedy
match is a Bernoulli(q) draw, so `acc_len[p]` = 1 + the run of matches from p (capped so a
step never emits past the end of the output). With `drift`, one request walks through several categories in equal segments (the
MetaSD non-stationary case); segment boundaries go to `meta.extra["segments"]`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from traces.bundle import TOOL_VERSION, BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle
from traces.errors import shorten
from traces.limits import MAX_TOKENS_PER_REQUEST

MAX_POOL_TOKENS = 100_000_000  # num_requests x longest output: the generated traces are held in memory

GENERALIST = "generalist"


@dataclass(frozen=True)
class PoolSpec:
    """Parameters of a synthetic drafter pool and its workload."""

    categories: tuple[str, ...] = ("code", "math", "chat", "translation", "summary")
    strong: float = 0.8  # mean per-token acceptance of a specialist on its own category
    weak: float = 0.35  # ... on any other category
    generalist: float | None = 0.6  # a generalist drafter with this acceptance everywhere (None: no generalist)
    concentration: float = 6.0  # Beta concentration of the per-position acceptance probability
    jitter: float = 0.05  # std of the per-request shift of a drafter's mean acceptance
    num_requests: int = 100
    output_len: tuple[int, int] = (200, 400)  # inclusive range
    prompt_len: tuple[int, int] = (50, 500)
    drift: bool = False  # the category changes inside each request
    segments: int = 3  # categories per request when drift is on
    seed: int = 0

    @classmethod
    def from_config(cls, params: Any, seed: int = 0) -> "PoolSpec":
        """A validated PoolSpec from a config's `traces: {pool: {...}}` mapping (lists become tuples; the run's
        seed unless the mapping gives one); ValueError names the key."""
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ValueError(f"pool: expected a mapping of PoolSpec fields, got {shorten(params)}")
        known = {f.name for f in fields(cls)}
        unknown = set(params) - known
        if unknown:
            raise ValueError(f"pool: unknown key(s) {sorted(unknown)}; expected some of {sorted(known)}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
        values.setdefault("seed", seed)
        spec = cls(**values)
        spec.validate()
        return spec

    def _check_types(self) -> None:
        for name in ("strong", "weak", "generalist", "concentration", "jitter"):
            v = getattr(self, name)
            if v is None and name == "generalist":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"pool.{name}: expected a finite number, got {shorten(v)}")
        for name in ("num_requests", "segments", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2**63 - 1:
                raise ValueError(f"pool.{name}: expected an integer >= 0, got {shorten(v)}")
        for name in ("output_len", "prompt_len"):
            v = getattr(self, name)
            if not isinstance(v, tuple) or len(v) != 2 or not all(
                    isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_TOKENS_PER_REQUEST for x in v):
                raise ValueError(f"pool.{name}: expected [lo, hi], integers in [1, {MAX_TOKENS_PER_REQUEST}], "
                                 f"got {shorten(v)}")
        if not isinstance(self.drift, bool):
            raise ValueError(f"pool.drift: expected true or false, got {shorten(self.drift)}")
        if not isinstance(self.categories, tuple) or not all(isinstance(c, str) and c for c in self.categories):
            raise ValueError(f"pool.categories: expected a list of names, got {shorten(self.categories)}")

    def validate(self) -> None:
        """Raise ValueError naming the parameter that is out of range."""
        self._check_types()
        if self.num_requests * self.output_len[1] > MAX_POOL_TOKENS:
            raise ValueError(f"pool: num_requests x output_len[1] = {self.num_requests * self.output_len[1]:,} "
                             f"tokens is more than {MAX_POOL_TOKENS:,}; generate a smaller pool")
        if len(self.categories) < 2 or len(set(self.categories)) != len(self.categories):
            raise ValueError(f"pool: categories must be >= 2 distinct names, got {shorten(self.categories)}")
        for name in ("strong", "weak"):
            v = getattr(self, name)
            if not 0.0 < v < 1.0:
                raise ValueError(f"pool: {name} must be in (0, 1), got {v}")
        if self.generalist is not None and not 0.0 < self.generalist < 1.0:
            raise ValueError(f"pool: generalist must be in (0, 1) or null, got {self.generalist}")
        if self.concentration <= 0 or self.jitter < 0:
            raise ValueError("pool: concentration must be > 0 and jitter >= 0")
        if self.num_requests < 1:
            raise ValueError(f"pool: num_requests must be >= 1, got {self.num_requests}")
        for name in ("output_len", "prompt_len"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"pool: {name} must be a range 1 <= lo <= hi, got {(lo, hi)}")
        if self.drift and not 2 <= self.segments <= len(self.categories):
            raise ValueError(f"pool: segments must be in [2, {len(self.categories)}] with drift, got {self.segments}")
        if self.drift and self.output_len[0] < self.segments:
            raise ValueError("pool: output_len must be at least `segments` tokens with drift")


def specialist_name(category: str) -> str:
    """Drafter name of the specialist for `category`."""
    return f"spec-{category}"


def pool_drafters(spec: PoolSpec) -> list[str]:
    """Drafter names in bundle order: one specialist per category, then the generalist if any."""
    names = [specialist_name(c) for c in spec.categories]
    return names + ([GENERALIST] if spec.generalist is not None else [])


def mean_acceptance(spec: PoolSpec, drafter: str, category: str) -> float:
    """The pool's mean per-token acceptance of `drafter` on `category` (before per-request jitter)."""
    if drafter == GENERALIST:
        return float(spec.generalist)
    return spec.strong if drafter == specialist_name(category) else spec.weak


def match_runs(match: np.ndarray) -> np.ndarray:
    """For each position p, the consecutive True values from p, capped by len - 2 - p (at least 0).

    Position p means tokens 0..p exist (the engine's convention: drafting starts after the last
    generated token), so a step from p can emit at most len - 1 - p tokens, one of them the bonus.
    """
    n = match.shape[0]
    run = np.zeros(n, dtype=np.int64)
    nxt = 0
    for p in range(n - 1, -1, -1):
        nxt = nxt + 1 if match[p] else 0
        run[p] = nxt
    return np.minimum(run, np.maximum(n - 2 - np.arange(n), 0))


def _segments(spec: PoolSpec, rng: np.random.Generator, output_len: int) -> list[tuple[int, str]]:
    if not spec.drift:
        return [(0, spec.categories[int(rng.integers(len(spec.categories)))])]
    cats = rng.choice(len(spec.categories), size=spec.segments, replace=False)
    bounds = np.linspace(0, output_len, spec.segments + 1).astype(int)[:-1]
    return [(int(b), spec.categories[int(c)]) for b, c in zip(bounds, cats)]


def make_pool_bundle(spec: PoolSpec = PoolSpec()) -> TraceBundle:
    """Generate the pool bundle described by `spec` (same spec, same bundle)."""
    spec.validate()
    rng = np.random.default_rng(spec.seed)
    drafters = pool_drafters(spec)
    requests: list[RequestTrace] = []
    segments_by_id: dict[str, list[list]] = {}
    for i in range(spec.num_requests):
        rid = f"pool-{i:05d}"
        n = int(rng.integers(spec.output_len[0], spec.output_len[1] + 1))
        prompt = int(rng.integers(spec.prompt_len[0], spec.prompt_len[1] + 1))
        segs = _segments(spec, rng, n)
        starts = [s for s, _ in segs] + [n]
        traces: dict[str, DrafterTrace] = {}
        for d in drafters:
            q = np.empty(n)
            for (start, cat), end in zip(segs, starts[1:]):
                m = np.clip(mean_acceptance(spec, d, cat) + spec.jitter * rng.standard_normal(), 0.02, 0.98)
                q[start:end] = rng.beta(m * spec.concentration, (1.0 - m) * spec.concentration, size=end - start)
            match = rng.random(n) < q
            traces[d] = DrafterTrace(acc_len=(1 + match_runs(match)).astype(np.int32),
                                     tv=(1.0 - q).astype(np.float32))
        category = ">".join(c for _, c in segs)
        requests.append(RequestTrace(id=rid, prompt_len=prompt, output_len=n, drafters=traces, category=category))
        if spec.drift:
            segments_by_id[rid] = [[s, c] for s, c in segs]
    params = asdict(spec)
    params = {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}
    meta = BundleMeta(
        target="synthetic-target",
        drafters={d: DrafterSpec(d, "synthetic", "pool-drafter") for d in drafters},
        temperature=1.0,
        dataset="pool-drift" if spec.drift else "pool-mixed",
        source={"generator": "traces.pool.make_pool_bundle", "params": params},
        tool_version=TOOL_VERSION,
        extra={"segments": segments_by_id} if spec.drift else {},
    )
    bundle = TraceBundle(meta, requests)
    bundle.validate("<pool>")
    return bundle


def request_segments(bundle: TraceBundle, request: RequestTrace) -> list[tuple[int, str]]:
    """(start position, category) segments of a request: from meta.extra in drift bundles, else one."""
    segs = bundle.meta.extra.get("segments", {}).get(request.id)
    if segs:
        return [(int(s), str(c)) for s, c in segs]
    return [(0, request.category or "")]
