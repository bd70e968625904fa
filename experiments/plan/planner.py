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

from experiments.plan.config import PlanConfig
from experiments.plan.search import RateSearch, SeedSchedule
from experiments.plan.prices import price_table
from experiments.sweep.cache import write_json_atomic
from experiments.sweep.hashing import derive_seed
from experiments.sweep.runner import ProgressBar, SweepRunner
from simulator.measure.metrics import round_sig
from simulator.scenario import check_cluster_size
from experiments.plan.candidates import (Candidate, base_experiment, build_candidates, candidate_service_bound,
                                         mean_decode_tokens, slo_out_of_reach)
from experiments.plan.point import search_point, evaluate_plan_point
from experiments.plan.result import plan_document
from experiments.plan.search_runs import SCOPE_RULE, cheapest_scope, crossover_searches, curve_points, service_probes
from experiments.plan.traffic import TrafficModel


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
    start = search.rate_start or traffic.target_rate
    decode_tokens: dict[int, float] = {}
    for c in active:  # sizes first, each checked before any candidate is simulated
        c.num_requests = traffic.requests_for(c.replicas)
        c.curve_requests = traffic.curve_requests_for(c.replicas)
        check_cluster_size(c.replicas, c.num_requests, f"candidate {c.id} (search.requests_per_replica, "
                           "search.tail_requests)")
    for c in active:
        if c.num_requests not in decode_tokens:
            decode_tokens[c.num_requests] = mean_decode_tokens(c, traffic, seeds[0])
        c.service_bound = candidate_service_bound(c, decode_tokens[c.num_requests])
        c.mean_output_tokens = decode_tokens[c.num_requests] + 1.0
        if traffic.plan.traffic.arrival != "replay":  # (replay: the same lengths; the rule needs a draw per seed)
            c.floor_note = slo_out_of_reach(c, plan, traffic, all_seeds)
    # the total is known only as an upper bound: it shrinks as searches end early and as first seeds settle rates
    total = len(active) * (search.max_tests * search.seeds + len(search.curve_fractions) + search.service_probe)
    schedules = {c.id: SeedSchedule(search.seeds, search.max_seeds, search.first_seed_settles) for c in active}
    target = plan.slo.attainment

    def stop(level: str, rate: float) -> dict[str, Any] | None:
        return {"level": level, "target": target, "rate": rate} if search.early_stop else None

    with ProgressBar(f"plan {plan.name}", total, console, progress) as bar, \
            SweepRunner(evaluate_plan_point, out / "points", backend, workers, address, bar) as runner:
        # one executor for every round: the pool's workers start once per plan (keeping their kernel and bundles)

        def prepare_searches(group: list[Candidate]) -> None:
            if search.service_probe:
                service_probes([c for c in group if not c.floor_note], traffic, seeds[0], slo, runner)
            for c in group:
                probe = (c.probe or {}).get("service_req_s")
                c.search = RateSearch(start, search.rate_max, search.rel_tol, search.max_tests, c.service_bound,
                                      probe_service=probe)
                if c.floor_note:  # TPOT_FLOOR_RULE: nothing to simulate (its curve points: curve_points)
                    c.search.stop()
                    bar.add_total(-(search.max_tests * search.seeds + search.service_probe))

        def run_searches(group: list[Candidate], target_only: bool = False) -> None:
            """Every search of `group` to its end (`target_only`: a search ends at its first rate unless it passes)."""
            while True:
                todo = [c for c in group if c.status == "ok" and not c.search.done]
                if not todo:
                    return
                batch, wanted = [], []
                for c in todo:  # FIRST_SEED_RULE (SeedSchedule): a new rate's first seed alone, then the others
                    rate = c.search.next_rate()
                    workload, replay = traffic.at_rate(rate, c.num_requests)
                    sched = schedules[c.id]
                    these = [all_seeds[j] for j in sched.wanted()]
                    if these and len(sched.runs) >= search.seeds:  # doubled seeds: beyond the bar's estimate
                        bar.add_total(len(these))
                    level = "settling" if sched.settling else "pooled"
                    batch += [search_point(c, workload, s, slo, replay, stop(level, rate)) for s in these]
                    wanted.append(len(these))
                results = runner.run(batch)
                i = 0
                for c, k in zip(todo, wanted):
                    rate = c.search.next_rate()
                    sched = schedules[c.id]
                    got = results[i:i + k]
                    i += k
                    if not all(r["fits"] for r in got):
                        runs = sched.runs + got
                        sched.runs = []
                        c.status, c.reason = "does_not_fit", next(r["reason"] for r in got if not r["fits"])
                        bar.add_total(-(search.max_tests - len(c.search.verdicts)) * search.seeds + len(runs)
                                      - len(search.curve_fractions))
                        continue
                    settled = sched.give(rate, got, plan.slo.attainment)
                    if settled is None:
                        continue
                    verdict, runs = settled
                    if len(runs) < search.seeds:
                        bar.add_total(-(search.seeds - len(runs)))
                    c.evaluations.append({"rate": rate, "sustainable": verdict.passed, "decided": verdict.decided,
                                          "overloaded": verdict.overloaded, "why": verdict.why,
                                          "attainment": verdict.attainment,
                                          "attainment_interval": [verdict.attainment_low, verdict.attainment_high],
                                          "seeds": [{"seed": s, **r} for s, r in zip(all_seeds, runs)]})
                    c.search.record(verdict)
                    if target_only and len(c.search.verdicts) == 1 and not verdict.passed:
                        c.search.stop()
                        c.scope_note = (f"fails at the target rate {round_sig(rate)} req/s ({verdict.why}); lower "
                                        f"rates not searched ({SCOPE_RULE})")
                    if c.search.done:
                        bar.add_total(-(search.max_tests - len(c.search.verdicts)) * search.seeds)

        if search.scope == "all":
            prepare_searches(active)
            run_searches(active)
        else:
            cheapest_scope(active, traffic.target_rate, prepare_searches, run_searches, bar, search)
        searched = [c for c in active if c.status == "ok"]
        if search.crossover:
            crossover_searches(plan, searched, traffic, seeds, slo, runner, bar)
        curve_points(plan, searched, traffic, seeds[0], slo, runner, bar, search.early_stop)
    doc = plan_document(plan, cands, prices, traffic, seeds, base)
    from experiments.plan.report import write_plots

    # plan.json last, the previous one removed first: a folder with plan.json is complete (plots included),
    # one that ran out of disk while plotting holds no plan.json that could be taken for this run's result
    (out / "plan.json").unlink(missing_ok=True)
    write_plots(doc, out)
    write_json_atomic(out / "plan.json", doc, indent=1)
    return {**doc, "_stats": {"computed": runner.stats.computed, "cached": runner.stats.cached}}
