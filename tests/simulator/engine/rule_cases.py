"""Tiny hand-made cases for the rule tests: requests with explicit acceptance traces, a server with the given
limits, one simulation."""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import pytest

from policies.base import FixedPolicy
from simulator.costs.draft_cost import DraftCost
from simulator.engine.acceptance_table import AcceptanceTable
from simulator.engine.server import SimResult
from simulator.engine.simulation import ServerSimulation
from simulator.engine.workload_arrays import EngineWorkload, SimInputs
from tests.simulator.engine.engine_fixtures import linear, scenario
from traces.bundle import DrafterTrace, RequestTrace

FREE = DraftCost("constant", seconds=0.0)


class Req(NamedTuple):
    """One request: arrival time, prompt and output lengths, and per drafter its acc_len (one per output
    position; default all 1: nothing accepted), optional proposal_len (n-gram match lengths) and optional tv (the
    per-position total variation sampled verification reads)."""

    arrival: float
    prompt: int
    output: int
    acc: dict | None = None
    proposal: dict | None = None
    tv: dict | None = None


def traces_of(reqs: Sequence[Req], drafters: Sequence[str]) -> list[RequestTrace]:
    out = []
    for j, r in enumerate(reqs):
        dt = {}
        for d in drafters:
            acc = (r.acc or {}).get(d)
            acc = np.ones(r.output, np.int32) if acc is None else np.asarray(acc, np.int32)
            assert len(acc) == r.output, "acc_len needs one entry per output position"
            prop, tv = (r.proposal or {}).get(d), (r.tv or {}).get(d)
            dt[d] = DrafterTrace(acc, proposal_len=None if prop is None else np.asarray(prop, np.int32),
                                 tv=None if tv is None else np.asarray(tv, np.float32))
        out.append(RequestTrace(f"t{j}", r.prompt, r.output, dt))
    return out


def run(reqs: Sequence[Req], *, mode: str = "ar", policy=None, k: int = 0, drafters=("d",),
        costs: dict | None = None, target=None, block_size: int = 4, kv_tokens: int = 10**6,
        max_num_seqs: int = 8, budget: int = 4096, chunked: bool = False, prefill: str = "mixed",
        overhead: float = 0.0, psd=None, scheduler: str = "draftsim", seed: int = 0,
        kinds: dict | None = None, async_scheduling: bool = False, switch_cost_s: float = 0.0,
        verification: str = "greedy") -> SimResult:
    """Simulate `reqs` on one server. `kinds`: each drafter's bundle kind (SimInputs.drafter_kinds)."""
    traces = traces_of(reqs, drafters)
    n = len(reqs)
    wl = EngineWorkload([f"r{i}" for i in range(n)], np.arange(n), np.array([r.arrival for r in reqs], float),
                        np.array([r.prompt for r in reqs]), np.array([r.output for r in reqs]), ["c"] * n)
    if policy is None and mode != "ar":
        policy = FixedPolicy(drafters[0], k)
    server = dict(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, step_overhead_s=overhead,
                  prefill=prefill, scheduler=scheduler, block_size=block_size, verification=verification)
    if scheduler != "vllm-v1":
        server["chunked_prefill"] = chunked
    if async_scheduling:
        server["async_scheduling"] = True
    sc = scenario(mode, policy, target=target or linear(0.0, 0.0, 1.0),
                  costs=costs if costs is not None else {d: FREE for d in drafters}, kv_tokens=kv_tokens, seed=seed,
                  psd=psd if mode == "psd" else None, switch_cost_s=switch_cost_s, **server)
    sim = ServerSimulation(sc, SimInputs(wl, AcceptanceTable.from_traces(traces, list(drafters)), traces,
                                         dict(kinds or {})))
    return sim.simulate()


def col(res: SimResult, name: str, phase: str | None = None, device: str = "target") -> list:
    """A step-table column on `device` (rows of `phase`, or every non-draft row)."""
    s = res.steps[res.steps.device == device]
    s = s[s.phase == phase] if phase is not None else s[~s.phase.isin(["draft", "draft_prefill", "sync"])]
    return s[name].tolist()


def req(res: SimResult, name: str) -> list:
    """A requests-table column in request order r0, r1, ... (the table itself is in arrival order)."""
    rq = res.requests
    order = rq.request_id.str[1:].astype(int).argsort().to_numpy()
    return rq[name].to_numpy()[order].tolist()
