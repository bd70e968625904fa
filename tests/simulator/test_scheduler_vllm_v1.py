"""`scheduler: vllm-v1`: the shared token budget (decode + draft + prefill tokens), the preset's config rules,
and the budget cut as a property."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.kv_pool import BlockPool
from simulator.request_state import RequestState
from simulator.scheduler import VLLM_V1_RULES, Scheduler
from simulator.server_config import ServerConfig
from tests.simulator.engine_fixtures import iid_traces, simulate, workload


def test_preset_turns_chunked_prefill_on_and_refuses_contradictions():
    s = ServerConfig(target_profile="x", kv_capacity_tokens=1000, scheduler="vllm-v1")
    assert s.chunked_prefill and s.prefill == "mixed"
    with pytest.raises(ValueError, match="always chunks prefills"):
        ServerConfig(target_profile="x", kv_capacity_tokens=1000, scheduler="vllm-v1", chunked_prefill=False)
    with pytest.raises(ValueError, match="drop prefill: separate"):
        ServerConfig(target_profile="x", kv_capacity_tokens=1000, scheduler="vllm-v1", prefill="separate")
    assert ServerConfig(target_profile="x", kv_capacity_tokens=1000).scheduler == "draftsim"


def test_rules_are_listed_both_ways():
    assert VLLM_V1_RULES["modelled"] and VLLM_V1_RULES["not_modelled"]


@pytest.mark.parametrize("mode", ["ar", "sd"])
def test_vllm_v1_keeps_every_step_within_the_token_budget(mode):
    traces = iid_traces(20, seed=3, rate=0.7, prompt=(3, 8), out=(40, 80))
    wl = workload(traces, 40, rate=400.0)
    budget = 20  # 12 decoding requests x (1 + 4 drafts) would need 60
    v1 = simulate(traces, wl, mode=mode, k=4, max_num_seqs=12, budget=budget, chunked=True, scheduler="vllm-v1")
    old = simulate(traces, wl, mode=mode, k=4, max_num_seqs=12, budget=budget, chunked=True)
    tgt = v1.steps[v1.steps.device == "target"]
    assert (tgt.batched_tokens <= budget).all(), tgt.batched_tokens.max()
    assert v1.requests.finish_time.notna().all()
    assert int(tgt.emitted_tokens.sum()) == int(wl.output_len.sum())
    if mode == "sd":  # draftsim's own rule schedules every decode with its drafts, over the budget
        o = old.steps[old.steps.device == "target"]
        assert (o.batched_tokens > budget).any()


def _sched(budget: int) -> Scheduler:
    tr = iid_traces(2, seed=0)
    wl = workload(tr, 2)
    return Scheduler(RequestState(wl, 1), wl, BlockPool(100, 16), max_num_seqs=8, max_num_batched_tokens=budget,
                     chunked=True, rules="vllm-v1")


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(1, 40), proposed=st.lists(st.integers(0, 6), min_size=0, max_size=12))
def test_budget_cut_serves_running_requests_in_order(budget, proposed):
    prop = np.array(proposed, dtype=np.int64)
    n, cut = _sched(budget).fit_decodes(prop)
    assert len(cut) == n and 0 <= n <= len(prop)
    assert int((cut + 1).sum()) <= budget  # each scheduled request takes at least its 1 token
    assert (cut >= 0).all() and (cut <= prop[:n]).all()
    if n:
        assert (cut[:-1] == prop[:n - 1]).all()  # only the last one served may be cut
    if n < len(prop):
        assert int((cut + 1).sum()) == budget  # stopped because the budget ran out


def test_other_rules_are_refused():
    tr = iid_traces(2, seed=0)
    wl = workload(tr, 2)
    with pytest.raises(ValueError, match="expected 'draftsim' or 'vllm-v1'"):
        Scheduler(RequestState(wl, 1), wl, BlockPool(10, 16), max_num_seqs=2, max_num_batched_tokens=8,
                  chunked=True, rules="sglang")
