"""Where a plan's simulations go (experiments/plan/counts.py): each stage's points against the plan's own record of
them in plan.json, and a rerun in the same folder reusing every point."""
from __future__ import annotations

from experiments.plan.config import load_plan_config
from experiments.plan.planner import run_plan
from tests.experiments.test_plan import make_known_case


def test_stage_counts_match_what_plan_json_records_and_a_rerun_reuses_them(tmp_path):
    plan = load_plan_config(make_known_case(tmp_path))
    first = run_plan(plan, tmp_path / "plan", backend="serial", progress=False)
    stats = first.pop("_stats")
    counts = stats["stages"]
    (c,) = first["candidates"]
    searched = [e for e in c["curve"] if e["sustainable"] is not None]
    curves = [e for e in c["curve"] if e["sustainable"] is None]
    assert counts.probes.points == counts.probes.computed == 1
    assert counts.searches.points == sum(e["seeds"] for e in searched)
    assert counts.search_seeds.first == c["rates_tested"] == len(searched)  # every rate's first seed alone
    tiers = counts.search_seeds
    assert tiers.first + tiers.plan + tiers.doubled == counts.searches.points
    assert counts.curves.points == len(curves) == len(plan.search.curve_fractions)
    assert counts.crossovers.points == 0  # an AR-only plan has no SD-vs-AR pair
    assert c["simulations"] == counts.probes.points + counts.searches.points + counts.curves.points
    stages = (counts.probes, counts.searches, counts.crossovers, counts.curves)
    assert sum(t.computed for t in stages) == stats["computed"] and stats["cached"] == 0
    assert "probes 1, searches " in counts.line()

    again = run_plan(plan, tmp_path / "plan", backend="serial", progress=False)["_stats"]
    assert again["computed"] == 0 and again["cached"] == stats["computed"]
    assert all(t.computed == 0 for t in (again["stages"].probes, again["stages"].searches, again["stages"].curves))
    assert again["stages"].searches.points == counts.searches.points
    assert "(+1 reused)" in again["stages"].line()
