"""Python-side kernel calls per simulation of a plan's clusters, on the compiled cluster loop and on the per-replica
path (simulator/cluster/compiled_cluster.py ENABLED off): counts, not times (docs/speed.md).

Run from the repository root:  python -m benchmarks.count_cluster_calls [PLAN] [--rate R] [CANDIDATE_ID ...]

Each candidate's first search-round point (the plan's first seed, its run length, `--rate` req/s, default the plan's
target rate) with the plan's early stop, once per path; printed per candidate: requests, then per path the calls
(per-replica: run_steps calls summed over replicas; loop: run_cluster calls), the steps the kernels took, the
requests finished when the early stop decided (None: ran to the end) and the SLO attainment (equal on both paths).
"""
from __future__ import annotations

import argparse

import simulator.scenario as scenario
from experiments.plan.config import load_plan_config
from experiments.plan.candidates import base_experiment, build_candidates
from experiments.plan.point import _stopping_point, search_point
from experiments.plan.prices import price_table
from experiments.plan.traffic import TrafficModel
from experiments.sweep.hashing import derive_seed
from simulator.cluster import compiled_cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", nargs="?", default="experiments/configs/plan_llama70b.yaml")
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("candidates", nargs="*")
    args = ap.parse_args()
    plan = load_plan_config(args.plan)
    base = base_experiment(plan)
    traffic = TrafficModel.of(plan, base)
    cands = [c for c in build_candidates(plan, base, price_table(plan.prices.file, plan.prices.usd_per_gpu_hour))
             if c.status == "ok" and c.replicas > 1 and (not args.candidates or c.id in args.candidates)]
    rate = args.rate or traffic.target_rate
    seed = derive_seed(plan.seed, "replicate-0")
    made = []
    build = scenario.simulation

    def recording(*a, **k):
        made.append(build(*a, **k))
        return made[-1]

    scenario.simulation = recording  # the simulation _stopping_point builds (it imports the name when called)
    print("candidate requests | per-replica: calls steps finished attainment | loop: calls steps finished attainment")
    for c in cands:
        c.num_requests = traffic.requests_for(c.replicas)
        workload, replay = traffic.at_rate(rate, c.num_requests)
        p = search_point(c, workload, seed, plan.slo.bounds(), replay,
                   {"level": "settling", "target": plan.slo.attainment, "rate": rate})
        row = [c.id, c.num_requests]
        for enabled in (False, True):
            compiled_cluster.ENABLED = enabled
            out = _stopping_point(p.payload["config"], p.payload["slo"], p.payload["stop"])
            sim = made[-1]
            steps = sum(int(r.server.compiled.rs.step) for r in sim.replicas)
            if sim.compiled is not None:
                calls = sim.compiled.calls
            elif enabled:
                calls = f"per-replica ({sim.cluster_path_reason})"
            else:
                calls = sum(r.server.compiled.kernel_calls for r in sim.replicas)
            row += [calls, steps, out.get("stopped", {}).get("requests_finished"), out.get("steady_slo_attainment")]
        print(*row, flush=True)
    compiled_cluster.ENABLED = True


if __name__ == "__main__":
    main()
