"""Fair PSD (one rule: simulator/server_config.py PSDConfig.concurrency / split): a PSD plan candidate at
max_num_seqs m runs m sequences in all, split over its two sub-batches, as its row states; SD at the same m runs m."""
from __future__ import annotations

import numpy as np

from experiments.plan.config import load_plan_config
from experiments.plan.candidates import base_experiment, build_candidates, concurrent_sequences
from experiments.plan.result import _comparison
from experiments.plan.prices import price_table
from experiments.run import run_experiment
from simulator.server_config import PSDConfig
from tests.experiments.test_plan import make_known_case

SEQS = 8


def max_in_flight(req) -> int:
    """Most requests between their first scheduling and their finish at once (a finish at t frees its slot before a
    start at t)."""
    starts = req["first_scheduled_time"].to_numpy(dtype=float)
    ends = req["finish_time"].to_numpy(dtype=float)
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends], key=lambda e: (e[0], e[1]))
    return int(np.max(np.cumsum([d for _, d in events])))


def test_psd_split_rule():
    assert PSDConfig.split(64).sub_batch_max_num_seqs == 32 and PSDConfig.split(64).concurrency(999) == 64
    assert PSDConfig.split(7).concurrency(7) == 6 and PSDConfig.split(1).sub_batch_max_num_seqs == 1
    assert PSDConfig().concurrency(10) == 20 and PSDConfig(sub_batch_max_num_seqs=3).concurrency(10) == 6


def test_a_saturated_psd_candidate_runs_the_concurrency_its_row_states(tmp_path):
    case = make_known_case(tmp_path)
    case["candidates"]["modes"] = [
        {"name": "sd", "mode": "sd", "policy": {"name": "fixed", "drafter": "d", "k": 2}},
        {"name": "psd", "mode": "psd", "policy": {"name": "fixed", "drafter": "d", "k": 2}}]
    case["candidates"]["scheduler"] = {"max_num_seqs": [SEQS]}
    plan = load_plan_config(case)
    base = base_experiment(plan)
    by_mode = {c.mode.name: c for c in build_candidates(plan, base, price_table(None, {}))}
    for name, c in by_mode.items():
        assert concurrent_sequences(c) == SEQS
        assert _comparison(c).startswith(f"{'PSD: ' if name == 'psd' else ''}{SEQS} sequences per target replica")
        # a closed loop of 5 x SEQS clients: a queue always waits, so the server runs as many as it admits
        doc = {**c.config, "seed": 1, "workload": {"num_requests": 400, "sample": {"with_replacement": True},
                                                   "arrival": {"kind": "closed_loop", "clients": 5 * SEQS,
                                                               "think_time": 0.0}}}
        res = run_experiment(doc)
        assert max_in_flight(res.requests) == SEQS, name
    assert "split over its two sub-batches of 4" in _comparison(by_mode["psd"])


def test_a_psd_candidate_places_the_state_of_the_sequences_it_runs():
    """Qwen3-Next (linear attention): a PSD candidate at max_num_seqs m runs 2 x (m // 2) sequences, and placement
    holds that many recurrent states, as its runs do. One state on a TP-4 H100 GPU costs exactly 804 KV tokens
    (tests/simulator/test_scenario_placement.py works it by hand): at m = 15 PSD runs 14, one state fewer than AR."""
    from simulator.scenario import kv_capacity
    from tests.simulator.test_scenario_placement import TOKENS_PER_STATE

    doc = {"kind": "plan", "name": "psd-state", "base": "default", "traffic": {"target_rate": 4, "num_requests": 40},
           "slo": {"ttft_s": 2.0, "attainment": 0.9},
           "candidates": {"target": "qwen3-next-80b-a3b", "gpus": ["h100-80gb"], "tp": [4],
                          "modes": [{"name": "AR", "mode": "ar"},
                                    {"name": "psd", "mode": "psd", "policy": {"name": "fixed", "drafter": "eagle3",
                                                                              "k": 2}}],
                          "scheduler": {"max_num_seqs": [15, 16]}, "deployment": {"max_model_len": 4096}}}
    plan = load_plan_config(doc)
    cands = {(c.mode.name, c.scheduler.server()["max_num_seqs"]): c
             for c in build_candidates(plan, base_experiment(plan), price_table(None, {}))}
    tokens = {key: c.placement["kv_capacity_tokens"] for key, c in cands.items()}
    assert tokens[("psd", 15)] - tokens[("AR", 15)] == TOKENS_PER_STATE
    assert tokens[("psd", 16)] == tokens[("AR", 16)]
    for (name, seqs), c in cands.items():
        running = 2 * (seqs // 2) if name == "psd" else seqs
        assert concurrent_sequences(c) == c.config["server"]["deployment"]["max_num_seqs"] == running
        # the candidate's placement is the one its simulated runs get
        assert kv_capacity(c.experiment.server, c.experiment.runs[0])[0] == tokens[(name, seqs)]
