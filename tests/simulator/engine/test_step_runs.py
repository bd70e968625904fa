"""Macro-steps (simulator/engine/step_runs.py) against the step-by-step path: the same requests, steps and ITL tables
bit for bit over random configs (modes, prefill rules, chunked prefill, vLLM V1 rules, KV pressure with
preemption, draft cost kinds, n-gram proposal caps, open and closed loops, PSD and learning policies, which
stay on the step path), and a check that the macro path really carries most steps of a quiet run."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.base import FixedPolicy
from policies.registry import make_policy
from simulator.engine import compiled_run, step_runs
from simulator.costs.draft_cost import DraftCost
from tests.simulator.engine.engine_fixtures import PSDConfig, linear, simulate, workload
from traces.bundle import DrafterTrace, RequestTrace


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


def both_paths(**kw):
    """The same simulation with macro-steps off and on (the compiled path off); also how many steps the macro path
    took."""
    results = []
    orig = step_runs.StepRuns.apply
    compiled_run.COMPILED = False
    try:
        for macro in (False, True):
            step_runs.MACRO_STEPS = macro
            taken: list[int] = []

            def counting(self, run, _taken=taken):
                _taken.append(run.steps)
                return orig(self, run)

            step_runs.StepRuns.apply = counting
            results.append((simulate(**kw), sum(taken)))
    finally:
        step_runs.StepRuns.apply = orig
        step_runs.MACRO_STEPS = compiled_run.COMPILED = True
    return results


def assert_same(a, b) -> None:
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


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "sd", "psd"]), seed=st.integers(0, 10_000),
       n=st.integers(1, 60), rate=st.floats(0.0, 0.9), ngram=st.booleans(),
       rules=st.sampled_from(["mixed", "chunked", "separate", "vllm-v1"]),
       arrivals=st.sampled_from(["poisson", "burst", "closed"]), req_rate=st.floats(5.0, 500.0),
       kv_slack=st.floats(1.0, 8.0), max_num_seqs=st.integers(1, 12), k=st.integers(0, 5),
       cost=st.sampled_from(sorted(COSTS)), overhead=st.sampled_from([0.0, 1e-4, 0.0012]),
       learning=st.booleans())
def test_macro_steps_equal_the_step_path_bit_for_bit(mode, seed, n, rate, ngram, rules, arrivals,
                                                     req_rate, kv_slack, max_num_seqs, k, cost, overhead,
                                                     learning):
    traces = traces_with(max(1, n // 2), seed, rate, ngram)
    drafters = ("d", "g") if ngram else ("d",)
    drafter = "g" if ngram and seed % 2 else "d"
    wl = workload(traces, n, rate=None if arrivals == "burst" else req_rate, seed=seed,
                  clients=3 if arrivals == "closed" else 0, think=0.01 if seed % 3 == 0 else 0.0)
    # KV pressure: from just enough for the largest request (preemptions) to plenty
    largest = int((wl.prompt_len + wl.output_len).max()) + 8
    kv_tokens = int(largest * kv_slack) + 16
    policy = None
    if learning and mode != "ar" and k > 0:
        policy = make_policy({"name": "ucb", "drafters": list(drafters), "k": k}, seed=seed) \
            if len(drafters) > 1 else make_policy({"name": "adaptive-k", "drafter": "d", "k_max": k}, seed=seed)
    elif mode != "ar":
        policy = FixedPolicy(drafter, k)
    kw = dict(traces=traces, wl=wl, mode=mode, k=k, drafter=drafter, drafters=drafters, policy=policy,
              kv_tokens=kv_tokens, max_num_seqs=max_num_seqs, overhead=overhead,
              draft=COSTS[cost], target=linear(1e-7, 2e-5, 5e-3), seed=seed,
              psd=PSDConfig() if mode == "psd" else None,
              budget=64 if rules == "vllm-v1" else (256 if rules == "chunked" else 4096),
              chunked=rules in ("chunked", "vllm-v1"), prefill="separate" if rules == "separate" else "mixed",
              scheduler="vllm-v1" if rules == "vllm-v1" else "draftsim")
    (step_path, off), (macro_path, on) = both_paths(**kw)
    assert off == 0
    assert_same(step_path, macro_path)
    if mode == "psd" or policy is not None and type(policy) is not FixedPolicy:
        assert on == 0  # these stay on the step path


def test_a_quiet_fixed_k_run_goes_mostly_through_macro_steps():
    """A closed loop of 8 long requests: nearly every step is between events, so the macro path carries it."""
    traces = traces_with(8, 3, 0.7, False)
    for t in traces:
        t.output_len = 200
        t.drafters["d"] = DrafterTrace(np.random.default_rng(1).geometric(0.3, 200).astype(np.int32))
    wl = workload(traces, 40, rate=None, clients=8)
    for mode in ("ar", "sd"):
        (a, off), (b, on) = both_paths(traces=traces, wl=wl, mode=mode, k=3,
                                       draft=COSTS["fraction"], max_num_seqs=8)
        assert_same(a, b)
        assert on > 0.8 * b.extras["steps"], (mode, on, b.extras["steps"])


def test_column_buffer_merges_rows_blocks_and_deferred_rows_in_step_order():
    """Rows appended one by one, as column blocks and by a deferred source come out typed and ordered by step."""
    from simulator.engine.records import STEP_COLUMNS, ColumnBuffer

    def row(step: int, phase: str) -> dict:
        return {c: (phase if c == "phase" else "target" if c == "device" else "" if t == "str" else step)
                for c, (t, _) in STEP_COLUMNS.items()}

    rows = ColumnBuffer(STEP_COLUMNS)
    plain = ColumnBuffer(STEP_COLUMNS)
    pending = [row(2, "verify"), row(3, "draft"), row(3, "verify")]
    source = [list(pending)]

    def deferred():  # like StepRuns._columns: the rows added since the last call, None when there are none
        if not source[0]:
            return None
        got, source[0] = source[0], []
        return {c: np.array([r[c] for r in got], dtype=object if t == "str" else t) for c, (t, _) in STEP_COLUMNS.items()}

    rows.defer(deferred, order_by="step")
    for r in (row(0, "prefill"), row(1, "draft"), row(1, "verify"), row(4, "mixed")):
        rows.append(**r)
    for r in (row(0, "prefill"), row(1, "draft"), row(1, "verify"), *pending, row(4, "mixed")):
        plain.append(**r)
    pd.testing.assert_frame_equal(rows.frame(), plain.frame(), check_exact=True)
    assert list(rows.frame().phase) == ["prefill", "draft", "verify", "verify", "draft", "verify", "mixed"]
