"""Two-batch PSD on the compiled path (simulator/engine/compiled_psd_kernel.py) equals the step path (step_psd.py) bit for
bit, and PSD runs the PSD kernel cannot reproduce fall back to the step path and say why."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.registry import make_policy
from tests.simulator.engine.engine_fixtures import PSDConfig, workload
from tests.simulator.engine.test_compiled_run import (COSTS, assert_same, build, drawn_case, rooflines, run_path, tight_kv,
                                              with_roofline)
from tests.simulator.engine.engine_fixtures import traces_with


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), rate=st.floats(0.0, 0.9), ngram=st.booleans(),
       k=st.integers(1, 6), cost=st.sampled_from(sorted(COSTS)), rules=st.sampled_from(["mixed", "chunked", "separate"]),
       budget=st.sampled_from([16, 64, 4096]), arrivals=st.sampled_from(["poisson", "burst", "closed"]),
       req_rate=st.floats(5.0, 500.0), m=st.integers(1, 8), block_size=st.sampled_from([1, 4, 16]),
       slack=st.integers(0, 3), overhead=st.sampled_from([0.0, 1e-4, 0.0012]), segment=st.sampled_from([6, 1 << 16]),
       split_min=st.integers(0, 6), sync_s=st.sampled_from([0.0, 0.0, 3e-4]), defer_kv=st.booleans(), roof=rooflines)
def test_compiled_psd_equals_the_step_path_bit_for_bit(seed, n, rate, ngram, k, cost, rules, budget, arrivals,
                                                       req_rate, m, block_size, slack, overhead, segment, split_min,
                                                       sync_s, defer_kv, roof):
    traces, drafters, wl, budget = drawn_case(seed, n, rate, ngram, arrivals, req_rate, rules, budget)
    kw = dict(traces=traces, wl=wl, mode="psd", k=k, drafter="g" if ngram and seed % 2 else "d", drafters=drafters,
              cost=COSTS[cost], kv_tokens=tight_kv(wl, k, block_size, 2 * m, slack), max_num_seqs=m,
              block_size=block_size, step_overhead_s=overhead, max_num_batched_tokens=budget,
              chunked_prefill=rules == "chunked", prefill="separate" if rules == "separate" else "mixed",
              psd=PSDConfig(split_min_batch=split_min, sync_s=sync_s, defer_kv=defer_kv))
    kw = with_roofline(kw, roof, cost)
    fast = run_path(True, segment=segment, **kw)
    assert fast.extras["engine_path"] == "compiled", fast.extras.get("engine_path_reason")
    slow = run_path(False, **kw)
    assert slow.extras["engine_path"] == "steps"
    assert_same(fast, slow)


def test_a_longer_psd_run_with_sync_and_chunked_prefill_is_equal():
    traces = traces_with(20, 3, 0.7, False)
    wl = workload(traces, 300, rate=200.0, seed=3)
    kw = dict(traces=traces, wl=wl, mode="psd", k=4, cost=COSTS["autoregressive"], max_num_seqs=16,
              max_num_batched_tokens=256, chunked_prefill=True, psd=PSDConfig(split_min_batch=2, sync_s=2e-4))
    fast = run_path(True, **kw)
    assert fast.extras["engine_path"] == "compiled", fast.extras.get("engine_path_reason")
    assert fast.extras["psd_fallback_steps"] > 0
    assert (fast.steps["device"] == "drafter").any() and (fast.steps["phase"] == "sync").any()
    assert_same(fast, run_path(False, **kw))


def _psd_fallbacks():
    traces = traces_with(6, 1, 0.6, False)
    wl = workload(traces, 12, rate=100.0)
    base = dict(traces=traces, wl=wl, mode="psd", psd=PSDConfig())
    return {
        "adaptive-k": ({**base, "policy": make_policy({"name": "adaptive-k", "drafter": "d", "k_max": 3}, seed=0)},
                       "PSD with policy"),
        "ucb": ({**base, "policy": make_policy({"name": "ucb", "drafters": ["d"], "k": 3}, seed=0)},
                "PSD with policy"),
        "kv pressure": ({**base, "kv_tokens": int((wl.prompt_len + wl.output_len).max()) + 16}, "KV could preempt"),
        "vllm-v1": ({**base, "scheduler": "vllm-v1"}, "scheduler 'vllm-v1'"),
    }


@pytest.mark.parametrize("case", sorted(_psd_fallbacks()))
def test_an_ineligible_psd_run_falls_back_to_the_step_path_and_says_why(case):
    kw, why = _psd_fallbacks()[case]
    res = build(**kw).simulate()
    assert res.extras["engine_path"] == "steps"
    assert why in res.extras["engine_path_reason"], res.extras["engine_path_reason"]
