"""A server's prices as the kernels take them: its target profile, the drafters' costs and the step's fixed times,
each checked when the server is made (the pricing rules themselves: simulator/engine/rules/pricing.py).

A duration passes `checked`, so a NaN, infinite or negative value (a bad overhead or switching cost, or an estimate
a policy asks for) is an error naming its source.
"""
from __future__ import annotations

import math
from typing import Mapping

from simulator.costs.draft_cost import DraftCost
from simulator.costs.latency import LatencyProfile


def checked(seconds: float, source: str) -> float:
    """`seconds` if it is a finite non-negative duration, else a ValueError naming `source`."""
    if not (seconds >= 0.0 and seconds != math.inf):  # also catches NaN
        raise ValueError(f"step duration from {source} is {seconds!r}; expected a finite number >= 0 "
                         "(check that profile's coefficients, the drafter's cost and the step overhead)")
    return seconds


class Pricing:
    """The target profile and draft costs of one server, with its step overhead and switching cost."""

    def __init__(self, target: LatencyProfile, draft_costs: Mapping[str, DraftCost], overhead_s: float,
                 switch_cost_s: float, tree_passes: tuple[int, ...] | None = None, proposers: tuple[str, ...] = ()):
        self.target = target
        # the policy's drafters of kind `engine_step` (vLLM V1's proposer), in drafter order: each runs every SD step
        self.proposers = proposers
        # a static draft tree's tokens read per drafting pass (traces/tree.TreeShape.draft_pass_tokens), or None
        self.tree_passes = tree_passes
        self.draft_costs = dict(draft_costs)
        self.overhead = checked(overhead_s, "server.step_overhead_s")
        self.switch_cost_s = checked(switch_cost_s, "run.switch_cost_s")

    def cost_of(self, name: str) -> DraftCost:
        cost = self.draft_costs.get(name)
        if cost is None:
            raise ValueError(f"policy chose drafter {name!r} but the experiment's 'drafters:' gives no cost for it "
                             f"(have: {sorted(self.draft_costs)})")
        return cost
