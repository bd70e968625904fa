"""The plan's rounds of simulations on the sweep runner: service probes, the search scope, the SD-vs-AR crossover
searches and the curve points."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from experiments.plan.config import PlanConfig
from experiments.plan.counts import SimulationCounts, run_counted
from experiments.plan.crossover import CrossoverSearch, compare, no_crossover
from experiments.plan.evaluations import Evaluation, ServiceProbe
from experiments.plan.search import MAX_UTILIZATION, RateSearch, SeedSchedule
from experiments.sweep.runner import ProgressBar, SweepRunner
from simulator.measure.metrics import round_sig
from experiments.plan.candidates import Candidate, ar_siblings
from experiments.plan.point import search_point, probe_point
from experiments.plan.traffic import TrafficModel


@dataclass
class SearchRounds:
    """Every candidate's rate search in rounds on one runner: each round runs the next rate of every unfinished
    search (FIRST_SEED_RULE: a new rate's first seed alone, then the others; SeedSchedule doubles undecided ones)."""

    plan: PlanConfig
    traffic: TrafficModel
    runner: SweepRunner
    bar: ProgressBar
    all_seeds: list[int]  # SeedSchedule's seeds, in order
    slo: dict[str, Any]
    counts: SimulationCounts = field(default_factory=SimulationCounts)
    schedules: dict[str, SeedSchedule] = field(default_factory=dict)

    def stop(self, level: str, rate: float) -> dict[str, Any] | None:
        """A point's early-stop instruction (experiments/plan/early_stop.py), None when the plan turns it off."""
        return {"level": level, "target": self.plan.slo.attainment, "rate": rate} if self.plan.search.early_stop else None

    def prepare(self, group: list[Candidate]) -> None:
        """The service probes of `group`, then a RateSearch (and seed schedule) per candidate."""
        search = self.plan.search
        if search.service_probe:
            service_probes([c for c in group if not c.floor_note], self.traffic, self.all_seeds[0], self.slo,
                           self.runner, self.counts)
        start = search.rate_start or self.traffic.target_rate
        for c in group:
            self.schedules[c.id] = SeedSchedule(search.seeds, search.max_seeds, search.first_seed_settles)
            probe = c.probe.service_req_s if c.probe is not None else None
            c.search = RateSearch(start, search.rate_max, search.rel_tol, search.max_tests, c.service_bound,
                                  probe_service=probe)
            if c.floor_note:  # TPOT_FLOOR_RULE: nothing to simulate (its curve points: curve_points)
                c.search.stop()
                self.bar.add_total(-(search.max_tests * search.seeds + search.service_probe))

    def run(self, group: list[Candidate], target_only: bool = False) -> None:
        """Every search of `group` to its end (`target_only`: a search ends at its first rate unless it passes)."""
        search, bar, all_seeds = self.plan.search, self.bar, self.all_seeds
        while True:
            todo = [c for c in group if c.status == "ok" and not c.search.done]
            if not todo:
                return
            batch, wanted = [], []
            for c in todo:  # FIRST_SEED_RULE (SeedSchedule): a new rate's first seed alone, then the others
                rate = c.search.next_rate()
                workload, replay = self.traffic.at_rate(rate, c.num_requests)
                sched = self.schedules[c.id]
                these = [all_seeds[j] for j in sched.wanted()]
                tiers = self.counts.search_seeds
                if sched.settling:
                    tiers.first += len(these)
                elif len(sched.runs) < search.seeds:
                    tiers.plan += len(these)
                else:
                    tiers.doubled += len(these)
                if these and len(sched.runs) >= search.seeds:  # doubled seeds: beyond the bar's estimate
                    bar.add_total(len(these))
                level = "settling" if sched.settling else "pooled"
                batch += [search_point(c, workload, s, self.slo, replay, self.stop(level, rate)) for s in these]
                wanted.append(len(these))
            results = run_counted(self.runner, batch, self.counts.searches)
            i = 0
            for c, k in zip(todo, wanted):
                rate = c.search.next_rate()
                sched = self.schedules[c.id]
                got = results[i:i + k]
                i += k
                if not all(r["fits"] for r in got):
                    runs = sched.runs + got
                    sched.runs = []
                    c.status, c.reason = "does_not_fit", next(r["reason"] for r in got if not r["fits"])
                    bar.add_total(-(search.max_tests - len(c.search.verdicts)) * search.seeds + len(runs)
                                  - len(search.curve_fractions))
                    continue
                settled = sched.give(rate, got, self.plan.slo.attainment)
                if settled is None:
                    continue
                verdict, runs = settled
                if len(runs) < search.seeds:
                    bar.add_total(-(search.seeds - len(runs)))
                c.evaluations.append(Evaluation(rate, [{"seed": s, **r} for s, r in zip(all_seeds, runs)],
                                                sustainable=verdict.passed, decided=verdict.decided,
                                                overloaded=verdict.overloaded, why=verdict.why,
                                                attainment=verdict.attainment,
                                                attainment_interval=[verdict.attainment_low, verdict.attainment_high]))
                c.search.record(verdict)
                if target_only and len(c.search.verdicts) == 1 and not verdict.passed:
                    c.search.stop()
                    c.scope_note = (f"fails at the target rate {round_sig(rate)} req/s ({verdict.why}); lower "
                                    f"rates not searched ({SCOPE_RULE})")
                if c.search.done:
                    bar.add_total(-(search.max_tests - len(c.search.verdicts)) * search.seeds)


SCOPE_RULE = ("search.scope: cheapest: price levels in increasing $/h; at each, every candidate is probed and tested "
              "at the target rate, and those that pass are searched in full (their max rate breaks ties of price); "
              "the first level with a candidate sustaining the target ends the plan: every dearer candidate is not "
              "searched")


def cheapest_scope(active: list[Candidate], target_rate: float, prepare, run, bar: ProgressBar, search) -> None:
    """SCOPE_RULE: only what the ranking needs; every candidate left out says why (status not_searched)."""
    per_candidate = search.max_tests * search.seeds + len(search.curve_fractions) + search.service_probe
    levels = sorted({c.usd_per_hour for c in active})
    for k, price in enumerate(levels):
        group = [c for c in active if c.usd_per_hour == price]
        prepare(group)
        tried = []
        for c in group:
            if c.floor_note:  # TPOT_FLOOR_RULE: out of reach, not simulated
                continue
            start = c.search.next_rate()
            if start < target_rate:  # its start is capped below the target: it cannot sustain it
                c.search.stop()
                cap = ("0.95 x its probed service rate" if c.probe is not None and c.probe.service_req_s else
                       "0.95 x its analytic service bound")
                c.status, c.reason = "not_searched", (f"cannot sustain the target: {cap} is {round_sig(start)} "
                                                      f"req/s < {round_sig(target_rate)} ({SCOPE_RULE})")
                bar.add_total(-(per_candidate - search.service_probe))
            else:
                tried.append(c)
        run(tried, target_only=True)  # first rate = the target: a pass is searched on to its max rate
        # the answer is the cheapest deployable candidate: a research row sustaining the target does not end the plan
        winners = [c for c in tried if c.status == "ok" and c.search.lo >= target_rate and c.deployable]
        if winners:
            best = min(winners, key=lambda c: c.id)
            for c in active:
                if c.usd_per_hour > price:
                    c.status, c.reason = "not_searched", (
                        f"not searched: ${c.usd_per_hour:g}/h > ${price:g}/h of {best.id!r}, which sustains the "
                        f"target ({SCOPE_RULE})")
                    bar.add_total(-per_candidate)
            return


def service_probes(active: list[Candidate], traffic: "TrafficModel", seed: int, slo: dict[str, Any],
                   runner: SweepRunner, counts: SimulationCounts) -> None:
    """SERVICE_PROBE_RULE: one saturated run per candidate, whatever the size of its search runs; its service rate
    in req/s on the candidate."""
    points = [probe_point(c, traffic, seed, slo) for c in active]
    for c, p, r in zip(active, points, run_counted(runner, points, counts.probes)):
        if not r["fits"]:
            continue  # the search's first run reports the reason
        tok_s = r.get("tok_s")
        c.probe = ServiceProbe(r.get("requests"), p.payload["probe"]["clients"], tok_s,
                               tok_s / c.mean_output_tokens if tok_s and c.mean_output_tokens else None)


def crossover_searches(plan: PlanConfig, active: list[Candidate], traffic: "TrafficModel", seeds: list[int],
                       slo: dict[str, Any], runner: SweepRunner, bar: ProgressBar, counts: SimulationCounts) -> None:
    """CROSSOVER_RULE (experiments/plan/crossover.py) for every searched drafting candidate with a searched AR
    sibling: its own search, both modes at each rate on the plan's seeds, runs of the SLO search's size."""
    s = plan.search
    sibling = ar_siblings(active)
    todo: dict[str, tuple[Candidate, Candidate, CrossoverSearch]] = {}
    for c in active:
        ar = sibling.get(c.id)
        if ar is None or c.search is None or ar.search is None:
            continue
        measured = [x.search.service_rate for x in (c, ar) if x.search.service_rate]
        if measured:
            top = MAX_UTILIZATION * min(measured)
        else:  # neither service rate measured (probe off, never overloaded): up to the higher max rate
            top = max(c.search.lo, ar.search.lo)
        if not top > 0:
            c.crossover = no_crossover("no rate range: neither mode sustains a rate or measured a service rate")
            continue
        todo[c.id] = (c, ar, CrossoverSearch(top, s.rel_tol, s.crossover_max_tests))
    while True:
        live = [v for v in todo.values() if not v[2].done]
        if not live:
            break
        batch = []
        for c, ar, cs in live:
            rate = cs.next_rate()
            workload, replay = traffic.at_rate(rate, c.num_requests)
            stop = {"level": "curve", "target": plan.slo.attainment, "rate": rate} if s.early_stop else None
            batch += [search_point(x, workload, seed, slo, replay, stop) for x in (c, ar) for seed in seeds]
        bar.add_total(len(batch))
        results = run_counted(runner, batch, counts.crossovers)
        k = len(seeds)
        for i, (c, ar, cs) in enumerate(live):
            got = results[2 * k * i: 2 * k * (i + 1)]
            cs.record(compare(cs.next_rate(), got[:k], got[k:]))
    for c, _, cs in todo.values():
        c.crossover = cs.result()


def curve_points(plan: PlanConfig, active: list[Candidate], traffic: "TrafficModel", seed: int,
                 slo: dict[str, Any], runner: SweepRunner, bar: ProgressBar, counts: SimulationCounts,
                 early_stop: bool = False) -> None:
    """One simulation (first seed) at each curve fraction of every candidate's max rate: the latency curves."""
    batch, owners = [], []
    for c in active:
        fractions = plan.search.curve_fractions
        if c.status != "ok" or not c.search.lo > 0:
            bar.add_total(-len(fractions))
            continue
        for f in fractions:
            workload, replay = traffic.at_rate(f * c.search.lo, c.curve_requests)
            stop = {"level": "curve", "target": plan.slo.attainment, "rate": f * c.search.lo} if early_stop else None
            batch.append(search_point(c, workload, seed, slo, replay, stop))
            owners.append((c, f * c.search.lo))
    for (c, rate), r in zip(owners, run_counted(runner, batch, counts.curves)):
        if r["fits"]:
            c.evaluations.append(Evaluation(rate, [{"seed": seed, **r}], overloaded=bool(r.get("overloaded")),
                                            curve_only=True))
