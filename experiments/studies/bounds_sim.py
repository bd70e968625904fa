"""Measure the PSD pipeline gain and saving with the engine: constant step costs, SD m vs PSD 2m.

Setup (printed with every result): every target step costs V, every drafting phase t (a drafter of
kind `constant`); every request has the same prompt length, an output length drawn uniformly (seeded), and the same acceptance
(acc_len = `acc_len` at every position, so both systems emit the same tokens per verify); SD admits m
requests, PSD 2m (two sub-batches of m), as MineDraft. Load is either a saturated closed loop of 2m
clients (think time 0) or Poisson arrivals at a fraction of SD's saturated capacity.
Gain = PSD throughput / SD throughput; saving = 1 - mean E2E PSD / mean E2E SD; both measured in the
steady window (the first and last 4m finishes are dropped as warm-up and drain).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from oracle.bounds import pipeline_gain, pipeline_saving
from simulator.costs.draft_cost import DraftCost
from simulator.measure.steady_state import saturated_window
from simulator.scenario import SimInputs, inputs_from_traces, make_scenario, simulate
from simulator.server_config import PSDConfig, RunSpec, ServerConfig, constant_profile
from traces.acceptance import emitted_tokens
from traces.bundle import DrafterTrace, RequestTrace

DRAFTER = "const"


@dataclass
class SimulatedBounds:
    """Simulated vs analytic gain and saving for one (t, V) and load."""

    simulated_gain: float
    simulated_saving: float
    gain_error_percent: float
    saving_error_points: float
    sd_throughput_tok_s: float
    psd_throughput_tok_s: float
    sd_mean_e2e_s: float
    psd_mean_e2e_s: float
    psd_fallback_steps: int
    setup: str

    def to_dict(self) -> dict:
        return asdict(self)


def _inputs(trace: RequestTrace, output_len: np.ndarray, arrival: np.ndarray | None, clients: int) -> SimInputs:
    """Every request replays `trace` (its prompt) with its own output length."""
    n = len(output_len)
    return inputs_from_traces([trace], [DRAFTER], trace_index=np.zeros(n, dtype=np.int64), output_len=output_len,
                              arrival=arrival, clients=clients, request_ids=[f"r{i}" for i in range(n)],
                              categories=["bounds"] * n)


def steady_state(requests, steps, trim: int) -> tuple[float, float]:
    """Throughput and mean E2E in the steady window (simulator.measure.steady_state.saturated_window) dropping `trim` finishes
    at each end; an error when too few requests leave a window."""
    window = saturated_window(requests, steps, trim)
    if window is None:
        raise ValueError(f"need more than {2 * trim + 1} finished requests, some arriving and finishing inside "
                         f"the steady window, to trim {trim} at each end; use more requests")
    return window


def _run(mode: str, t: float, v: float, m: int, inputs: SimInputs, k: int,
         seed: int, prefill: str = "mixed") -> tuple[float, float, int]:
    run = RunSpec(name=mode, mode=mode, policy={"name": "fixed", "drafter": DRAFTER, "k": k},
                  psd=PSDConfig(sub_batch_max_num_seqs=m) if mode == "psd" else None)
    # draftsim's scheduler rules: the published pipeline bound's model (every decode every step; prefill modes)
    server = ServerConfig(target_profile=constant_profile(v), max_num_seqs=m, max_num_batched_tokens=1_000_000,
                          kv_capacity_tokens=10_000_000, prefill=prefill, scheduler="draftsim")
    sc = make_scenario(run, server, {DRAFTER: DraftCost(kind="constant", seconds=t)}, seed)
    res = simulate(sc, inputs)
    x, e2e = steady_state(res.requests, res.steps, trim=4 * m)
    return x, e2e, int(res.extras["psd_fallback_steps"])


def simulate_pipeline(t: float, v: float, *, sub_batch: int = 16, num_requests: int = 600, prompt_len: int = 32,
                      output_len: tuple[int, int] = (128, 512), k: int = 3, acc_len: int = 3,
                      load: float | None = None, seed: int = 0, prefill: str = "mixed") -> SimulatedBounds:
    """Run SD (m) and PSD (2m) under the same load; `load=None` is a saturated closed loop of 2m clients,
    `load=x` is Poisson arrivals at x times SD's saturated request rate (m / (steps per request x (t + V))).
    `prefill` is the server's prefill mode (ServerConfig.prefill; "separate" = prefill-only steps)."""
    if sub_batch < 1 or num_requests < 1:
        raise ValueError("sub_batch and num_requests must be >= 1")
    rng = np.random.default_rng(seed)
    lo, hi = output_len
    lengths = rng.integers(lo, hi + 1, size=num_requests).astype(np.int64)  # varied, so sub-batches drift apart
    trace = RequestTrace(id="t0", prompt_len=prompt_len, output_len=hi,
                         drafters={DRAFTER: DrafterTrace(acc_len=np.full(hi, acc_len, dtype=np.int32))})
    if load is None:
        arrival, clients = None, PSDConfig(sub_batch_max_num_seqs=sub_batch).concurrency(sub_batch)  # PSD's 2m
        desc = f"saturated closed loop, {clients} clients"
    else:
        if not 0 < load < 1.5:
            raise ValueError(f"load must be in (0, 1.5), got {load!r}")
        emitted = emitted_tokens(acc_len, k)
        steps_per_request = 1 + float(np.mean(np.ceil((lengths - 1) / emitted)))
        sd_rate = sub_batch / (steps_per_request * (t + v))
        arrival = np.cumsum(rng.exponential(1.0 / (load * sd_rate), size=num_requests))
        clients = 0
        desc = f"Poisson at {load:.0%} of SD capacity ({load * sd_rate:.4g} req/s)"
    inputs = _inputs(trace, lengths, arrival, clients)
    x_sd, e_sd, _ = _run("sd", t, v, sub_batch, inputs, k, seed, prefill)
    x_psd, e_psd, fb = _run("psd", t, v, sub_batch, inputs, k, seed, prefill)
    gain, saving = x_psd / x_sd, 1.0 - e_psd / e_sd
    setup = (f"{desc}; SD max_num_seqs {sub_batch}, PSD 2 x {sub_batch}; {num_requests} requests, prompt "
             f"{prompt_len}, output uniform {lo}..{hi} tokens; k={k}, acc_len={acc_len} everywhere; constant costs t={t:g}s, V={v:g}s; prefill {prefill}")
    return SimulatedBounds(gain, saving, (gain / pipeline_gain(t, v) - 1) * 100,
                           (saving - pipeline_saving(t, v)) * 100, x_sd, x_psd, e_sd, e_psd, fb, setup)
