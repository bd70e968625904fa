"""Where a plan's simulations go, stage by stage: the run statistics `draftsim plan` prints under its table (not in
plan.json, which holds no run statistics)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from experiments.sweep.runner import Point, SweepRunner


@dataclass
class Tally:
    """One stage's points: how many it asked for and how many of them were simulated (the others were read from the
    point cache or were the same point as another of its batch)."""

    points: int = 0
    computed: int = 0


@dataclass
class SeedTiers:
    """The rate searches' points by seed (experiments/plan/search.py SeedSchedule): a rate's first seed, the rest of
    the plan's `search.seeds`, and the doubled seeds of a rate still undecided after them."""

    first: int = 0
    plan: int = 0
    doubled: int = 0


@dataclass
class SimulationCounts:
    """A plan's points per stage, in the order they run."""

    probes: Tally = field(default_factory=Tally)
    searches: Tally = field(default_factory=Tally)
    crossovers: Tally = field(default_factory=Tally)
    curves: Tally = field(default_factory=Tally)
    search_seeds: SeedTiers = field(default_factory=SeedTiers)

    def line(self) -> str:
        """One line: the simulations of each stage (and points reused, when any)."""
        def part(name: str, t: Tally) -> str:
            reused = t.points - t.computed
            return f"{name} {t.computed:,}" + (f" (+{reused:,} reused)" if reused else "")

        s = self.search_seeds
        return (f"{part('probes', self.probes)}, {part('searches', self.searches)} (points by seed: first {s.first:,}, "
                f"plan seeds {s.plan:,}, doubled {s.doubled:,}), {part('crossovers', self.crossovers)}, "
                f"{part('curves', self.curves)}")


def run_counted(runner: SweepRunner, points: Sequence[Point], tally: Tally) -> list[Any]:
    """`runner.run(points)`, its points and newly computed simulations added to `tally`."""
    before = runner.stats.computed
    results = runner.run(points)
    tally.points += len(points)
    tally.computed += runner.stats.computed - before
    return results
