"""Small builders for engine tests: synthetic traces, workloads and a one-call simulate."""
from __future__ import annotations

import numpy as np
import pandas as pd

from policies.base import FixedPolicy
from simulator.engine.acceptance_table import AcceptanceTable
from simulator.costs.draft_cost import DraftCost
from simulator.engine.simulation import ServerSimulation
from simulator.costs.latency import LinearProfile, Provenance
from simulator.seeds import ServerSeeds
from simulator.server_config import PSDConfig, Scenario, ServerConfig, constant_profile
from simulator.engine.workload_arrays import EngineWorkload, SimInputs
from traces.bundle import DrafterTrace, RequestTrace


def iid_traces(n: int, seed: int = 0, rate: float = 0.6, out=(20, 120), prompt=(10, 200),
               drafters=("d",)) -> list[RequestTrace]:
    """Requests whose acc_len follows i.i.d. acceptance with the given rate."""
    rng = np.random.default_rng(seed)
    traces = []
    for t in range(n):
        o = int(rng.integers(*out))
        dt = {}
        for d in drafters:
            acc = rng.geometric(1 - rate, o) if rate > 0 else np.ones(o, dtype=np.int64)
            dt[d] = DrafterTrace(acc.astype(np.int32))
        traces.append(RequestTrace(f"t{t}", int(rng.integers(*prompt)), o, dt))
    return traces


def workload(traces, n: int | None = None, *, rate: float | None = 50.0, clients: int = 0, seed: int = 0,
             think: float = 0.0) -> EngineWorkload:
    rng = np.random.default_rng(seed + 1)
    n = n or len(traces)
    ti = np.arange(n) % len(traces)
    arrival = np.cumsum(rng.exponential(1 / rate, n)) if rate else np.zeros(n)
    return EngineWorkload([f"r{i}" for i in range(n)], ti, arrival,
                          np.array([traces[t].prompt_len for t in ti]), np.array([traces[t].output_len for t in ti]),
                          ["c"] * n, closed_loop_clients=clients, think_time=think)


def linear(a_kv=1e-7, b_tok=2e-5, const=5e-3) -> LinearProfile:
    return LinearProfile("test", {"kv_tokens": a_kv, "batched_tokens": b_tok, "const": const},
                         provenance=Provenance("test"))


def scenario(mode="sd", policy=None, *, target=None, costs=None, kv_tokens=10**6, seed=0, psd=None,
             switch_cost_s=0.0, name=None, scheduler="draftsim", **server) -> Scenario:
    """A resolved Scenario with a policy object (no config spec): `server` are ServerConfig fields. The engine tests
    hand-work draftsim's scheduler rules, so it is named here unless a test asks for another (as `simulate` does)."""
    cfg = ServerConfig(target_profile=target or linear(), kv_capacity_tokens=kv_tokens, scheduler=scheduler, **server)
    return Scenario(name=name or mode, mode=mode, server=cfg, target=cfg.target(), draft_costs=dict(costs or {}),
                    policy=policy, seeds=ServerSeeds.of(seed), kv_capacity_tokens=kv_tokens,
                    psd=psd or PSDConfig(), switch_cost_s=switch_cost_s)


def inputs(traces, wl, drafters=("d",)) -> SimInputs:
    return SimInputs(wl, AcceptanceTable.from_traces(traces, list(drafters)), traces)


def simulate(traces, wl, *, mode="sd", k=3, drafter="d", target=None, draft=None, policy=None, kv_tokens=10**6,
             max_num_seqs=16, budget=4096, overhead=0.0, chunked=False, psd=None, seed=0, drafters=("d",),
             prefill="mixed", verification="greedy", on_step=None, scheduler="draftsim", switch_cost_s=0.0):
    if policy is None and mode != "ar":
        policy = FixedPolicy(drafter, k)
    costs = {d: (draft or DraftCost("constant", seconds=0.0)) for d in drafters}
    server = dict(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, step_overhead_s=overhead,
                  prefill=prefill, scheduler=scheduler, verification=verification)
    if chunked or scheduler != "vllm-v1":
        server["chunked_prefill"] = chunked
    sc = scenario(mode, policy, target=target, costs=costs, kv_tokens=kv_tokens, seed=seed,
                  psd=psd if mode == "psd" else None, switch_cost_s=switch_cost_s, **server)
    return ServerSimulation(sc, inputs(traces, wl, drafters), on_step=on_step).simulate()


__all__ = ["iid_traces", "workload", "linear", "scenario", "inputs", "simulate", "constant_profile", "PSDConfig",
           "DraftCost"]


def traces_with(n: int, seed: int, rate: float, ngram: bool) -> list[RequestTrace]:
    """i.i.d. acceptance for drafter 'd'; with `ngram`, drafter 'g' with proposal lengths (0 = no match)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        o = int(rng.integers(1, 60))
        dt = {"d": DrafterTrace(rng.geometric(1 - rate, o).astype(np.int32))}
        if ngram:
            dt["g"] = DrafterTrace(rng.geometric(0.5, o).astype(np.int32),
                                   proposal_len=rng.integers(0, 5, o).astype(np.int32))
        out.append(RequestTrace(f"t{t}", int(rng.integers(1, 120)), o, dt))
    return out


def assert_same(a, b) -> None:
    """Two results with the same requests, steps and ITL tables, bit for bit, and the same extras."""
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert a.itl.tobytes() == b.itl.tobytes()
    assert a.extras == b.extras


COSTS = {
    "constant": DraftCost("constant", seconds=0.002),
    "zero": DraftCost("constant", seconds=0.0),
    "fraction": DraftCost("fraction_of_verify", fraction=0.13),
    "whole": DraftCost("whole_proposal", profile=linear(3e-8, 1e-5, 1e-3)),
    "autoregressive": DraftCost("autoregressive", profile=linear(2e-8, 3e-6, 4e-4)),
}


def tables_jit_on_and_off(code: str, tmp_path) -> list[tuple]:
    """Run `code` (a script that pickles a list of (requests, steps, itl bytes) to the path named OUT)
    in a fresh interpreter with numba's JIT on, then off; returns the pairs of those tuples, run by run."""
    import os
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    tables = []
    for jit_off in ("0", "1"):
        out = tmp_path / f"out{jit_off}"
        env = dict(os.environ, NUMBA_DISABLE_JIT=jit_off)
        subprocess.run([sys.executable, "-c", code.replace("OUT", repr(str(out)))], cwd=root, env=env, check=True)
        tables.append(pickle.loads(out.read_bytes()))
    return list(zip(*tables))


def assert_same_run_tables(a: tuple, b: tuple) -> None:
    """Two (requests, steps, itl bytes) tuples hold the same tables, bit for bit."""
    pd.testing.assert_frame_equal(a[0], b[0], check_exact=True)
    pd.testing.assert_frame_equal(a[1], b[1], check_exact=True)
    assert a[2] == b[2]


def tight_kv(wl, k: int, block_size: int, max_num_seqs: int, slack: int, lookahead: int = 0,
             pressure: int = 0) -> int:
    """KV tokens just enough (plus `slack` blocks) for the max_num_seqs largest requests at their largest KV (with
    `lookahead` slots each: vLLM V1's for an EAGLE drafter); with `pressure` p > 0, for only max_num_seqs // (p + 1)
    of them (at least the largest: the server refuses less), so the run may preempt."""
    need = np.sort(-(-(wl.prompt_len + wl.output_len - 1 + max(1, k) + lookahead) // block_size))[::-1]
    fit = max_num_seqs if pressure == 0 else max(1, max_num_seqs // (pressure + 1))
    return int(need[:fit].sum() + slack) * block_size
