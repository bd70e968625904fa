"""`draftsim plan`: per candidate deployment (GPU type x TP x replicas x mode x scheduler setting), the highest
arrival rate at which it is stable and meets the SLO in steady state (experiments/plan/search.py; runs sized from
the SLO's quantile) and what it costs; the cheapest candidate that sustains the target rate answers the question.

Every simulation is a sweep point (experiments/sweep): cached by content hash under OUT/points, run serially,
on a process pool or on Ray, with seeds derived from the plan seed and the replicate index (shared by all
candidates and rates: common random numbers), so plan.json is identical whichever backend ran it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.plan.candidates import base_experiment, build_candidates, size_candidates
from experiments.plan.config import PlanConfig
from experiments.plan.point import evaluate_plan_point
from experiments.plan.prices import price_table
from experiments.plan.result import plan_document
from experiments.plan.search_runs import SearchRounds, cheapest_scope, crossover_searches, curve_points
from experiments.plan.traffic import TrafficModel
from experiments.sweep.cache import write_json_atomic
from experiments.sweep.hashing import derive_seed
from experiments.sweep.runner import ProgressBar, SweepRunner


def run_plan(plan: PlanConfig, out: str | Path, backend: str = "pool", workers: int | None = None,
             address: str | None = None, progress: bool = True, console=None,
             price_file: str | None = None) -> dict[str, Any]:
    """Search every candidate, write plan.json (and plots), return plan.json's doc plus run statistics."""
    out = Path(out)
    base = base_experiment(plan)
    prices = price_table(price_file or plan.prices.file, plan.prices.usd_per_gpu_hour)
    traffic = TrafficModel.of(plan, base)
    cands = build_candidates(plan, base, prices)
    active = [c for c in cands if c.status == "ok"]
    search, slo = plan.search, plan.slo.bounds()
    all_seeds = [derive_seed(plan.seed, f"replicate-{i}") for i in range(search.max_seeds)]  # SeedSchedule's
    seeds = all_seeds[:search.seeds]
    size_candidates(active, plan, traffic, all_seeds)
    # the total is known only as an upper bound: it shrinks as searches end early and as first seeds settle rates
    total = len(active) * (search.max_tests * search.seeds + len(search.curve_fractions) + search.service_probe)
    with ProgressBar(f"plan {plan.name}", total, console, progress) as bar, \
            SweepRunner(evaluate_plan_point, out / "points", backend, workers, address, bar) as runner:
        # one executor for every round: the pool's workers start once per plan (keeping their kernel and bundles)
        rounds = SearchRounds(plan, traffic, runner, bar, all_seeds, slo)
        if search.scope == "all":
            rounds.prepare(active)
            rounds.run(active)
        else:
            cheapest_scope(active, traffic.target_rate, rounds.prepare, rounds.run, bar, search)
        searched = [c for c in active if c.status == "ok"]
        if search.crossover:
            crossover_searches(plan, searched, traffic, seeds, slo, runner, bar, rounds.counts)
        curve_points(plan, searched, traffic, seeds[0], slo, runner, bar, rounds.counts, search.early_stop)
    doc = plan_document(plan, cands, prices, traffic, seeds, base)
    from experiments.plan.report import write_plots

    # plan.json last, the previous one removed first: a folder with plan.json is complete (plots included),
    # one that ran out of disk while plotting holds no plan.json that could be taken for this run's result
    (out / "plan.json").unlink(missing_ok=True)
    write_plots(doc, out)
    write_json_atomic(out / "plan.json", doc, indent=1)
    return {**doc, "_stats": {"computed": runner.stats.computed, "cached": runner.stats.cached,
                              "stages": rounds.counts}}
