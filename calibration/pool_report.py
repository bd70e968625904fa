"""Which drafter of a pool is best on which workload: tokens per step and a cost-aware speedup.

For each bundle and drafter, the trace is replayed at k = 1..8 (traces.walk). Speedup over plain
decoding uses the simple step model: a step costs one target verify plus k drafter forwards of
relative cost c (c = drafter step time / target step time; 0 for n-gram lookup), so
speedup(k) = tokens_per_step(k) / (1 + k c), and the best k is reported per drafter.
With measured latency profiles instead (batch of one, at the bundle's mean context), a step costs
verify(k + 1 tokens) + k drafter steps (one lookup for n-gram), against one plain decode step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traces.bundle import TraceBundle
from traces.stats import K_RANGE
from traces.walk import walk_many


@dataclass(frozen=True)
class PoolRow:
    """One drafter on one workload."""

    workload: str
    drafter: str
    tokens_per_step_k4: float
    best_k: int
    best_speedup: float
    cost_ratio: float


def pool_rows(bundle: TraceBundle, cost_ratio: dict[str, float], profiles: dict[str, Any] | None = None,
              target_profile: Any = None) -> list[PoolRow]:
    """Rows for every drafter of a bundle.

    Without profiles, cost_ratio must name every non-ngram drafter. With `target_profile` and
    `profiles` (cost_model name -> LatencyProfile) step times come from the measured profiles.
    """
    rows = []
    ctx = int(sum(r.prompt_len + r.output_len / 2 for r in bundle.requests) / len(bundle.requests))
    for name, spec in bundle.meta.drafters.items():
        traces = [r.drafters[name] for r in bundle.requests]
        tps = {k: walk_many(traces, k).tokens_per_step for k in K_RANGE}
        if target_profile is not None:
            prof = (profiles or {}).get(spec.cost_model)
            if prof is None:
                raise ValueError(f"no latency profile named {spec.cost_model!r} (cost_model of drafter {name!r})")
            t_ar = target_profile.step_time(1, 1, ctx + 1)
            draft = {k: prof.step_time(1, 1, ctx + 1) if spec.kind == "ngram"
                     else sum(prof.step_time(1, 1, ctx + 1 + i) for i in range(k)) for k in K_RANGE}
            speed = {k: tps[k] * t_ar / (target_profile.step_time(1, k + 1, ctx + k + 1) + draft[k]) for k in K_RANGE}
            c = prof.step_time(1, 1, ctx + 1) / t_ar
        else:
            c = 0.0 if spec.kind == "ngram" and name not in cost_ratio else cost_ratio.get(name)
            if c is None:
                raise ValueError(f"no cost ratio for drafter {name!r}; give one (drafter step time / target step time)")
            speed = {k: tps[k] / (1.0 + k * c) for k in K_RANGE}
        best = max(K_RANGE, key=lambda k: speed[k])  # the smallest k among ties
        rows.append(PoolRow(bundle.meta.dataset, name, tps[4], best, speed[best], c))
    return rows


def best_by_workload(rows: list[PoolRow]) -> dict[str, str]:
    """Workload -> drafter with the highest best-k speedup."""
    out: dict[str, PoolRow] = {}
    for r in rows:
        if r.workload not in out or r.best_speedup > out[r.workload].best_speedup:
            out[r.workload] = r
    return {w: r.drafter for w, r in out.items()}


def markdown_table(rows: list[PoolRow]) -> str:
    """A README table: one line per workload, tokens/step at k=4 and best speedup per drafter."""
    drafters = list(dict.fromkeys(r.drafter for r in rows))
    workloads = list(dict.fromkeys(r.workload for r in rows))
    best = best_by_workload(rows)
    head = "| workload | " + " | ".join(f"{d} tok/step k=4 | {d} speedup (best k)" for d in drafters) + " | best |"
    sep = "|---" * (2 * len(drafters) + 2) + "|"
    lines = [head, sep]
    for w in workloads:
        cells = []
        for d in drafters:
            r = next(x for x in rows if x.workload == w and x.drafter == d)
            cells += [f"{r.tokens_per_step_k4:.2f}", f"{r.best_speedup:.2f}x ({r.best_k})"]
        lines.append(f"| {w} | " + " | ".join(cells) + f" | {best[w]} |")
    return "\n".join(lines)


def pool_report_rows(bundle_paths: list[str], cost_ratio: dict[str, float], target_profile: str | None = None,
                     profile_dir: str | None = None) -> list[PoolRow]:
    """`draftsim calibrate pool-report`: pool_rows of every bundle; with a target profile, each drafter priced by
    the profile named by its cost_model (a file `<profile_dir>/<cost_model>.yaml` first, else a built-in one)."""
    from pathlib import Path

    from simulator.costs.latency import load_profile, resolve_profile
    from traces.bundle import load_bundle

    target = resolve_profile(target_profile) if target_profile else None
    rows: list[PoolRow] = []
    for path in bundle_paths:
        bundle = load_bundle(path)
        profiles = {}
        if target is not None:
            for spec in bundle.meta.drafters.values():
                f = Path(profile_dir) / f"{spec.cost_model}.yaml" if profile_dir else None
                profiles[spec.cost_model] = load_profile(f) if f and f.is_file() else resolve_profile(spec.cost_model)
        rows += pool_rows(bundle, cost_ratio, profiles, target)
    return rows
