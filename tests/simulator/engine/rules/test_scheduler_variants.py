"""The scheduler variants (simulator/engine/scheduler.py SCHEDULERS) as data on the one token-assignment rule
(rules/decode_budget.py, rules/prefill_plan.py): decodes take 1 + drafts tokens each from the variant's decode budget
(max_num_batched_tokens under `vllm-v1`, unbounded under `draftsim`: rules/decode_budget.decode_side_budget), then
the prompt chunks take what is left of max_num_batched_tokens. Hand-worked on one state: a budget of 8, three
decoding requests (prompts of 4, one token out) and a waiting prompt of 10; in small runs; and as an invariant."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from types import SimpleNamespace

from simulator.engine.kv_pool import BlockPool
from simulator.engine.request_state import RequestState
from simulator.engine.rules.decode_budget import UNCHARGED, decode_side_budget, fit_decodes
from simulator.engine.rules.prefill_plan import PrefillLimits, plan_buffers
from simulator.engine.rules.queue import plan_step_prefills
from simulator.engine.scheduler import SCHEDULERS, Scheduler
from simulator.engine.workload_arrays import EngineWorkload
from tests.simulator.engine.engine_fixtures import linear
from tests.simulator.engine.rule_cases import Req, col, req, run

BUDGET = 8


def _server(rules: str, chunked: bool) -> SimpleNamespace:
    """Requests 0-2 running and decoding (prompt 4 prefilled, 1 token out, one 16-token block each); request 3
    waiting with a 10-token prompt; 100 free KV blocks; max_num_seqs 8: the state, the workload, the pool and the
    scheduler's settings."""
    wl = EngineWorkload(request_ids=[f"r{i}" for i in range(4)], trace_index=np.arange(4, dtype=np.int64),
                        arrival=np.zeros(4), prompt_len=np.array([4, 4, 4, 10], np.int64),
                        output_len=np.full(4, 5, np.int64), categories=["c"] * 4)
    st_ = RequestState(wl, 1)
    pool = BlockPool(103, 16)
    for i in range(3):
        st_.run[i] = i
        st_.gen[i], st_.prefill_done[i], st_.blocks[i] = 1, 4, 1
    st_.n_run = st_.admit = 3
    pool.used = 3
    st_.ptr = 4  # all four arrived (RequestState.arrived is in index order)
    sched = Scheduler(wl, pool, max_num_batched_tokens=BUDGET, chunked=chunked, rules=rules)
    return SimpleNamespace(state=st_, wl=wl, pool=pool, sched=sched, limits=PrefillLimits(8, BUDGET, chunked, 16))


def _mixed_step(server: SimpleNamespace, proposed: list[int]):
    """A mixed step's token assignment by the rules the kernels run: the decodes' budget cut
    (rules/decode_budget.fit_decodes over the variant's decode budget), then the prompt chunks after their tokens
    (rules/queue.plan_step_prefills). Returns (decodes scheduled, their drafts, {request: prompt chunk})."""
    prop = np.array(proposed, np.int64)
    drafts = np.empty_like(prop)
    n = int(fit_decodes(prop, len(prop), server.sched.decode_budget, drafts))
    st_, plan, window = server.state, plan_buffers(8), np.zeros(8, np.int64)
    sums = plan_step_prefills(server.limits, plan, window, n + int(drafts[:n].sum()), True, st_.run, st_.n_run,
                              st_.requeued, st_.nq, st_.arrived, st_.admit, st_.ptr, server.pool.free,
                              server.wl.prompt_len, st_.gen, st_.prefill_left, st_.prefill_done, st_.blocks)
    chunks = dict(zip(plan.request[:sums.count].tolist(), plan.tokens[:sums.count].tolist()))
    return n, drafts[:n].tolist(), chunks


# (rules, chunked): the variants a server can take (scheduler: vllm-v1 always chunks)
VARIANTS = [("vllm-v1", True), ("draftsim", True), ("draftsim", False)]


@pytest.mark.parametrize("rules, chunked, expected", [
    # 3 decode tokens; 5 left: vLLM V1 and chunked draftsim give the prompt a 5-token chunk ...
    ("vllm-v1", True, (3, [0, 0, 0], {3: 5})),
    ("draftsim", True, (3, [0, 0, 0], {3: 5})),
    # ... unchunked, the whole 10-token prompt does not fit in the 5 left: it waits (it runs alone only as a step's
    # first prefill with no decode tokens)
    ("draftsim", False, (3, [0, 0, 0], {})),
])
def test_plain_decodes_leave_the_rest_of_the_budget_to_the_prompt(rules, chunked, expected):
    assert _mixed_step(_server(rules, chunked), [0, 0, 0]) == expected


@pytest.mark.parametrize("rules, chunked, expected", [
    # 2 drafts each = 3 tokens: vLLM V1 serves 3 + 3, the third gets the 2 left (1 draft); nothing left to prefill
    ("vllm-v1", True, (3, [2, 2, 1], {})),
    # draftsim never cuts a decode: 9 tokens, over the budget of 8; the prompt gets nothing (chunked or not)
    ("draftsim", True, (3, [2, 2, 2], {})),
    ("draftsim", False, (3, [2, 2, 2], {})),
])
def test_decodes_with_drafts_over_the_budget(rules, chunked, expected):
    assert _mixed_step(_server(rules, chunked), [2, 2, 2]) == expected


@pytest.mark.parametrize("rules, chunked, expected", [
    ("vllm-v1", True, (2, [3, 3], {})),  # 4 + 4 = 8: the third decode waits for the next step
    ("draftsim", True, (3, [3, 3, 3], {})),  # 12 tokens, all scheduled
])
def test_a_decode_the_budget_cannot_reach_waits_only_under_vllm_v1(rules, chunked, expected):
    assert _mixed_step(_server(rules, chunked), [3, 3, 3]) == expected


@pytest.mark.parametrize("rules, batched, proposed", [
    # three 2-token prompts (6 tokens) prefill together; then each verifies k = 2 (nothing accepted: 1 token a step,
    # 3 verify steps of 1.0 s to its 4 tokens). vLLM V1: 3 + 3 + the 2 left (r2 verifies 1 draft a step)
    ("vllm-v1", [6, 8, 8, 8], [6, 6, 3]),
    ("draftsim", [6, 9, 9, 9], [6, 6, 6]),  # never cut: 9 tokens a step over the budget of 8
])
def test_rule_each_variant_decode_budget_in_a_run(rules, batched, proposed):
    res = run([Req(0.0, 2, 4)] * 3, mode="sd", k=2, budget=BUDGET, scheduler=rules)
    assert col(res, "batched_tokens") == batched
    assert req(res, "proposed_tokens") == proposed
    assert req(res, "finish_time") == [4.0, 4.0, 4.0]


@pytest.mark.parametrize("rules, batched, finish", [
    # four 1-token prompts (sides 0, 1, 0, 1), output 6, every draft accepted, k = 2; each step after the prefill
    # [0, 1] takes max(1.0 verify, 0.5 draft) + 0.25 sync. Step 1 [1, 2.25]: side 0 a plain token each (2 tokens).
    # vLLM V1 cuts each verify side to 4 tokens (test_rules_vllm_v1.py works it step by step) ...
    ("vllm-v1", [2, 4, 4, 4, 4, 3, 3], [7.25, 6.0, 9.75, 8.5]),
    # ... draftsim never does: each side verifies 3 + 3 tokens. Step 2: r1, r3 1 -> 4; step 3: r0, r2 2 -> 5;
    # step 4 [4.75, 6]: r1, r3 finish; step 5 [6, 7.25]: r0, r2 finish
    ("draftsim", [2, 6, 6, 6, 6], [7.25, 6.0, 7.25, 6.0]),
])
def test_rule_each_variant_decode_budget_in_a_psd_run(rules, batched, finish):
    from simulator.costs.draft_cost import DraftCost
    from simulator.server_config import PSDConfig

    res = run([Req(0.0, 1, 6, {"d": [3] * 6})] * 4, mode="psd", k=2,
              costs={"d": DraftCost("constant", seconds=0.5)}, psd=PSDConfig(sync_s=0.25), budget=4, scheduler=rules)
    assert col(res, "batched_tokens", device="target", phase="verify") == batched
    assert req(res, "finish_time") == finish


@pytest.mark.parametrize("prefill, prefilled, finish", [
    # separate: at t = 1 the waiting 10-token prompt runs in a step of its own, r0's decode waits a step; r1's
    # second token comes with r0's in [2, 3]
    ("separate", [4, 10, 0, 0, 0], [5.0, 3.0]),
    # mixed, unchunked: beside r0's decode token only 9 of the budget of 10 are left, so the whole prompt waits
    # until no decode runs (r0 done at 4), then runs alone: [4, 5] prefill, [5, 6] r1's second token
    ("mixed", [4, 0, 0, 0, 10, 0], [4.0, 6.0]),
])
def test_rule_separate_prefill_runs_a_waiting_prompt_in_a_step_of_its_own(prefill, prefilled, finish):
    """draftsim's rules, unchunked, budget 10, every step 1 s: r0 (prompt 4, 4 tokens out) prefills over [0, 1];
    r1 (prompt 10, 2 tokens out) arrives at 0.5."""
    res = run([Req(0.0, 4, 4), Req(0.5, 10, 2)], budget=10, prefill=prefill, target=linear(0.0, 0.0, 1.0))
    assert col(res, "prefill_tokens") == prefilled
    assert req(res, "finish_time") == finish


def test_the_variant_records_choose_the_decode_budget():
    assert decode_side_budget(BUDGET, SCHEDULERS["vllm-v1"].decodes_in_budget) == BUDGET
    assert decode_side_budget(BUDGET, SCHEDULERS["draftsim"].decodes_in_budget) == UNCHARGED
    assert _server("vllm-v1", True).sched.decode_budget == BUDGET
    assert _server("draftsim", True).sched.decode_budget == UNCHARGED


@settings(max_examples=60, deadline=None)
@given(proposed=st.lists(st.integers(0, 8), max_size=40), compiled=st.booleans())
def test_an_uncharged_decode_budget_schedules_every_decode_with_all_its_drafts(proposed, compiled):
    """The draftsim variant's constraint: over UNCHARGED, the budget rule keeps every decode whole, whatever the
    proposals (the rule the kernels run, plain and compiled)."""
    rule = fit_decodes
    if compiled:
        from simulator.engine.compiled_kernel import fit_decodes as rule
    prop = np.array(proposed, np.int64)
    drafts = np.full(len(prop), -1, np.int64)
    assert int(rule(prop, len(prop), UNCHARGED, drafts)) == len(prop)
    assert drafts.tolist() == proposed
