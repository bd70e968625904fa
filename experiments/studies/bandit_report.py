"""MetaSD reproduction by plain-loop simulation: regret, best-arm ratio and tokens per round per policy.

Two synthetic drafter pools (traces/pool.py): `mixed` (one category per request; a specialist per
category plus a generalist) and `drift` (the category changes twice inside each long request).
Every policy plays every request for several verification seeds; the fixed drafters play the same
seeds, so regret = mean rounds of the policy - mean rounds of the best fixed drafter of that
request (stopping-time regret, MetaSD). Writes CSV tables, summary.json and PNG plots.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oracle.regret import best_arm_by_position, run_rounds
from policies.base import Choice, FixedPolicy, Policy, RequestView
from policies.registry import make_policy
from traces.atomic import atomic_open, atomic_write_text
from traces.bundle import RequestTrace, TraceBundle
from traces.pool import GENERALIST, PoolSpec, make_pool_bundle, pool_drafters, request_segments


@dataclass
class BanditStudy:
    """Sizes of the study (the `quick` form is for tests)."""

    mixed_requests: int = 20
    mixed_output_len: tuple[int, int] = (1000, 1000)
    drift_requests: int = 10
    drift_output_len: tuple[int, int] = (1500, 1500)
    seeds: int = 4
    k: int = 3
    budgets: tuple[int, ...] = (100, 250, 500, 1000)
    pool_seed: int = 0
    engine_requests: int = 100
    engine_output_len: tuple[int, int] = (200, 400)
    policies: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(MIXED_POLICIES))
    drift_policies: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(DRIFT_POLICIES))

    @classmethod
    def quick(cls) -> "BanditStudy":
        return cls(mixed_requests=3, mixed_output_len=(300, 300), drift_requests=2, drift_output_len=(450, 450),
                   seeds=2, budgets=(100, 300), engine_requests=12, engine_output_len=(60, 120))


MIXED_POLICIES: dict[str, dict[str, Any]] = {
    "random": {"name": "random-drafter"},
    "ucb-BE b=1": {"name": "ucb", "beta": 1.0},
    "metasd-ucb-BD b=1": {"name": "metasd-ucb", "beta": 1.0},
    "ucb-BE b=0.1": {"name": "ucb", "beta": 0.1},
    "metasd-ucb-BD b=0.1": {"name": "metasd-ucb", "beta": 0.1},
    "thompson-BE": {"name": "thompson"},
    "thompson-BD": {"name": "thompson", "reward": "bd"},
    "exp3-BE": {"name": "exp3"},
    "eps-greedy-BE": {"name": "epsilon-greedy"},
}
DRIFT_POLICIES: dict[str, dict[str, Any]] = {
    "metasd-ucb-BD b=0.1": {"name": "metasd-ucb", "beta": 0.1},
    "discounted-ucb-BD g=0.95": {"name": "discounted-ucb", "beta": 0.1, "gamma": 0.95},
    "sliding-window-ucb-BD w=50": {"name": "sliding-window-ucb", "beta": 0.1, "window": 50},
    "ucb-BE b=0.1": {"name": "ucb", "beta": 0.1},
    "random": {"name": "random-drafter"},
}


class SegmentBestPolicy(Policy):
    """Reference for drift: the best drafter of the current segment (reads ground truth; report only)."""

    name = "segment-best"
    reads_ground_truth = True

    def __init__(self, best_by_position: np.ndarray, drafters: tuple[str, ...], k: int):
        self.best, self.drafters, self.k = best_by_position, drafters, k

    def drafters_used(self) -> tuple[str, ...]:
        return self.drafters

    def max_draft_tokens(self) -> int:
        return self.k

    def choose(self, view: RequestView) -> Choice:
        return Choice(self.drafters[int(self.best[view.position])], self.k)


def _policy(spec: dict[str, Any], drafters: list[str], k: int, seed: int) -> Policy:
    return make_policy({**spec, "drafters": list(drafters), "k": k, "seed": seed})


def play_request(req: RequestTrace, drafters: list[str], policies: dict[str, dict[str, Any]], study: BanditStudy,
                 segments=None) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Rows (policy, seed, budget, rounds) for every policy and fixed drafter; best-arm-ratio curves."""
    k, rows, curves = study.k, [], {}
    best = best_arm_by_position(req, drafters, k, segments)
    budgets = [b for b in study.budgets if b <= req.output_len] + [req.output_len]
    players: dict[str, Any] = {f"fixed:{d}": (lambda s, d=d: FixedPolicy(d, k)) for d in drafters}
    players.update({name: (lambda s, spec=spec: _policy(spec, drafters, k, s)) for name, spec in policies.items()})
    if segments is not None and len(segments) > 1:
        players["segment-best"] = lambda s: SegmentBestPolicy(best, tuple(drafters), k)
    for name, make in players.items():
        ratios = []
        for seed in range(study.seeds):
            res = run_rounds(make(seed), req, drafters, k, req.output_len, np.random.default_rng(1000 + seed))
            for b in budgets:
                rows.append({"request": req.id, "category": req.category, "policy": name, "seed": seed,
                             "budget": "all" if b == req.output_len else b, "rounds": res.rounds_to(b),
                             "tokens": b})
            hit = (res.arms == best[res.positions]).astype(float)
            ratios.append(np.cumsum(hit) / np.arange(1, hit.shape[0] + 1))
        span = min(len(r) for r in ratios)
        curves[name] = np.mean([r[:span] for r in ratios], axis=0)
    return rows, curves


def summarise(rows: pd.DataFrame, drafters: list[str]) -> pd.DataFrame:
    """Per policy and budget: mean rounds, regret vs the best fixed drafter per request, tokens per round."""
    mean = rows.groupby(["request", "category", "policy", "budget"], as_index=False)[["rounds", "tokens"]].mean()
    fixed = mean[mean["policy"].isin([f"fixed:{d}" for d in drafters])]
    best = fixed.groupby(["request", "budget"], as_index=False)["rounds"].min().rename(columns={"rounds": "best_fixed"})
    mean = mean.merge(best, on=["request", "budget"])
    mean["regret"] = mean["rounds"] - mean["best_fixed"]
    mean["tokens_per_round"] = mean["tokens"] / mean["rounds"]
    return mean


def _plot(path: Path, draw) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.plots import save_figure

    fig, ax = plt.subplots(figsize=(7, 4.2))
    draw(ax)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    with atomic_open(path, "w") as f:
        df.to_csv(f, index=False)


def run_bandit_study(out: str | Path, study: BanditStudy | None = None, engine: bool = True) -> dict[str, Any]:
    """Run both pools (plain loop) and, with `engine`, configs/bandit_drafters.yaml; write tables/plots under
    `out`; return the summary dict (also summary.json)."""
    study = study or BanditStudy()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"study": {k: (list(v) if isinstance(v, tuple) else v)
                                         for k, v in study.__dict__.items()}}
    for pool_name, spec, policies in (
        ("mixed", PoolSpec(num_requests=study.mixed_requests, output_len=study.mixed_output_len,
                           seed=study.pool_seed), study.policies),
        ("drift", PoolSpec(num_requests=study.drift_requests, output_len=study.drift_output_len, drift=True,
                           segments=3, seed=study.pool_seed + 1), study.drift_policies),
    ):
        bundle: TraceBundle = make_pool_bundle(spec)
        drafters = pool_drafters(spec)
        rows, curves_all = [], {}
        for req in bundle.requests:
            segs = request_segments(bundle, req) if spec.drift else None
            r, curves = play_request(req, drafters, policies, study, segs)
            rows.extend(r)
            for name, c in curves.items():
                curves_all.setdefault(name, []).append(c)
        df = pd.DataFrame(rows)
        table = summarise(df, drafters)
        _write_csv(df, out / f"{pool_name}_rounds.csv")
        _write_csv(table, out / f"{pool_name}_regret.csv")
        names = list(policies) + [f"fixed:{GENERALIST}"] + (["segment-best"] if spec.drift else [])
        span = min(min(len(c) for c in cs) for cs in curves_all.values())
        ratio = {n: np.mean([c[:span] for c in curves_all[n]], axis=0) for n in names if n in curves_all}
        overall = table[table["budget"] == "all"]
        per_policy = overall.groupby("policy")[["rounds", "regret", "tokens_per_round"]].mean()
        per_budget = table[table["budget"] != "all"].pivot_table(index="policy", columns="budget", values="regret")
        per_cat = overall.pivot_table(index="policy", columns="category", values="tokens_per_round")
        checkpoints = [t for t in (10, 50, 100, 200) if t <= span] + [span]
        summary[pool_name] = {
            "requests": len(bundle.requests),
            "rounds_regret_tpr": {p: {c: round(float(v), 3) for c, v in row.items()}
                                  for p, row in per_policy.iterrows()},
            "regret_by_budget": {p: {str(b): round(float(v), 2) for b, v in row.items()}
                                 for p, row in per_budget.iterrows()},
            "tokens_per_round_by_category": {p: {c: round(float(v), 3) for c, v in row.items()}
                                             for p, row in per_cat.iterrows()},
            "best_arm_ratio": {n: {str(t): round(float(r[t - 1]), 3) for t in checkpoints} for n, r in ratio.items()},
        }

        def draw_ratio(ax, ratio=ratio, pool_name=pool_name):
            for n, r in ratio.items():
                ax.plot(np.arange(1, len(r) + 1), r, label=n)
            ax.set_xlabel("round")
            ax.set_ylabel("share of rounds on the best arm (cumulative)")
            ax.set_title(f"best-arm ratio, {pool_name} pool")

        _plot(out / f"{pool_name}_best_arm_ratio.png", draw_ratio)

        def draw_regret(ax, per_budget=per_budget, pool_name=pool_name):
            for p, row in per_budget.iterrows():
                if not str(p).startswith("fixed:"):
                    ax.plot([int(b) for b in row.index], row.values, marker="o", label=p)
            ax.set_xlabel("token budget B")
            ax.set_ylabel("stopping-time regret (rounds)")
            ax.set_title(f"regret vs best fixed drafter, {pool_name} pool")

        _plot(out / f"{pool_name}_regret.png", draw_regret)
    if engine:
        pool = PoolSpec(num_requests=study.engine_requests, output_len=study.engine_output_len, seed=study.pool_seed)
        table = run_bandit_engine(out, pool)
        summary["engine"] = {row["run"]: {k: round(float(v), 3) for k, v in row.items() if k != "run" and v is not None}
                             for row in table.to_dict("records")}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True))
    return summary


def run_bandit_engine(out: str | Path, pool: PoolSpec | None = None, max_requests: int | None = None) -> pd.DataFrame:
    """Run configs/bandit_drafters.yaml on a freshly written pool bundle; speedup per run and per category."""
    import copy

    from experiments.config import builtin_config_dir, read_config_doc
    from experiments.run import run_experiment
    from traces.bundle import save_bundle

    out = Path(out)
    pool = pool or PoolSpec(num_requests=100, output_len=(200, 400), seed=0)
    bundle_dir = save_bundle(make_pool_bundle(pool), out / "bundles" / "pool-mixed", compress=True)
    doc, _ = read_config_doc(builtin_config_dir() / "bandit_drafters.yaml")
    doc = copy.deepcopy(doc)
    doc["traces"] = str(bundle_dir)
    if max_requests:
        doc["workload"]["num_requests"] = max_requests
    res = run_experiment(doc)
    req = res.requests
    ar = req[req["run"] == "AR"].groupby("category")["tpot"].mean()
    rows = []
    for run, g in req.groupby("run", sort=False):
        s = res.summary[run]
        row = {"run": run, "speedup": s["throughput_tok_s"] / res.summary["AR"]["throughput_tok_s"],
               "throughput_tok_s": s["throughput_tok_s"], "mean_acceptance_length": s.get("mean_acceptance_length")}
        for cat, tpot in g.groupby("category")["tpot"].mean().items():
            row[f"tpot_speedup:{cat}"] = float(ar[cat] / tpot)
        rows.append(row)
    table = pd.DataFrame(rows)
    _write_csv(table, out / "engine_speedup.csv")

    def draw(ax, table=table):
        t = table[table["run"] != "AR"]
        ax.barh(t["run"], t["speedup"])
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("throughput speedup over AR (engine, 8 clients)")
        ax.set_title("drafter policies on the synthetic specialist pool")

    _plot(out / "engine_speedup.png", draw)
    return table
