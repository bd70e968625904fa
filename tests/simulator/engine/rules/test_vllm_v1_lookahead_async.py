"""vLLM V1's lookahead KV slots (rules/kv.lookahead_slots, decode_hold, peak_tokens; prefill_plan's continuing
chunks) and async scheduling (rules/engine_loop.overlapped_gap, server `async_scheduling`), on hand-worked steps
and a hypothesis invariant."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator.engine.rules import kv
from simulator.engine.rules.engine_loop import overlapped_gap
from simulator.server_config import ServerConfig
from tests.simulator.engine.engine_fixtures import linear
from tests.simulator.engine.rule_cases import Req, col, req, run
from tests.simulator.engine.test_rules_invariants import check_invariants

KEEPS_KV = ["eagle", "mtp", "draft_model", "int8", "truncated"]  # vLLM: use_eagle() or uses_draft_model()
NO_KV = ["ngram", "suffix", "synthetic"]


# ---------------------------------------------------------------- the rules alone


def test_lookahead_slots_by_kind_k_and_scheduler():
    for kind in KEEPS_KV:
        assert kv.lookahead_slots([kind], 3, "vllm-v1") == 3
        assert kv.lookahead_slots([kind], 3, "draftsim") == 0  # draftsim's own rules reserve none
    for kind in NO_KV + [""]:  # "" a drafter whose kind the inputs do not state
        assert kv.lookahead_slots([kind], 3, "vllm-v1") == 0
    assert kv.lookahead_slots(["ngram", "eagle"], 5, "vllm-v1") == 5  # one drafter that keeps KV is enough
    assert kv.lookahead_slots(["eagle"], 0, "vllm-v1") == 0  # nothing drafted, nothing reserved


def test_decode_hold_and_peak_hand_worked():
    # context 9 (8 computed + the token sampled last step), 3 drafts, 3 lookahead: 8 + 1 + 3 + 3 = 15
    assert kv.decode_hold(9, 3, 3) == 15
    assert list(kv.decode_hold(np.array([9, 20]), np.array([3, 0]), 2)) == [14, 22]
    # the most a request ever holds: prompt 8 + output 6 - 1 context, k = 3 drafts, 3 lookahead slots
    assert kv.peak_tokens(8, 6, 3, 3) == 19
    assert kv.peak_tokens(8, 6, 0, 0) == 14  # AR: prompt + output (a recompute's last chunk reserves one slot)


@pytest.mark.parametrize("gap, forward, left", [
    (1.0, 1.5, 0.0),  # host work shorter than the forward: hidden entirely
    (1.0, 0.75, 0.25),  # longer: what exceeds the forward is left
    (1.0, 1.0, 0.0),  # equal: nothing left
    (0.0, 0.5, 0.0),  # no host work configured
])
def test_overlapped_gap_hand_worked(gap, forward, left):
    from simulator.engine import compiled_kernel

    for rule in (overlapped_gap, compiled_kernel._overlapped_gap):
        assert rule(gap, forward) == left
        assert forward + rule(gap, forward) == max(forward, gap)  # the step's period: max(forward, host)


def test_async_scheduling_needs_vllm_v1():
    with pytest.raises(ValidationError, match="async_scheduling: true needs scheduler: vllm-v1"):
        ServerConfig(target_profile=linear(), kv_capacity_tokens=100, scheduler="draftsim", async_scheduling=True)
    cfg = ServerConfig(target_profile=linear(), kv_capacity_tokens=100, scheduler="vllm-v1", async_scheduling=True)
    assert cfg.async_scheduling and cfg.chunked_prefill
    default = ServerConfig(target_profile=linear(), kv_capacity_tokens=100, async_scheduling=True)  # vllm-v1 default
    assert default.scheduler == "vllm-v1" and default.async_scheduling


# ---------------------------------------------------------------- hand-worked steps


@pytest.mark.parametrize("kind, expected", [(k, [9, 15, 16]) for k in KEEPS_KV] + [(k, [9, 12, 13]) for k in NO_KV])
def test_rule_eagle_request_holds_one_plus_k_plus_k_slots_beyond_its_computed_tokens(kind, expected):
    # block size 1 (blocks = tokens), k = 3, nothing accepted. Step 0 prefills the 8-token prompt of a request with
    # nothing computed: 8 + 1 slots, no lookahead (vLLM: effective_lookahead_tokens 0 for it). Step 1: 8 computed
    # tokens + 1 sampled + 3 drafts (+ 3 lookahead slots for a proposer with KV) = 12 (15); step 2: one more token
    # computed: 13 (16)
    res = run([Req(0.0, 8, 3)], mode="sd", k=3, block_size=1, scheduler="vllm-v1", kinds={"d": kind})
    assert col(res, "kv_blocks_used") == expected
    assert col(res, "proposed_tokens") == [0, 3, 3]


def test_rule_lookahead_only_under_vllm_v1():
    # the same EAGLE request under draftsim's scheduler: context + drafts only
    res = run([Req(0.0, 8, 3)], mode="sd", k=3, block_size=1, chunked=True, kinds={"d": "eagle"})
    assert col(res, "kv_blocks_used") == [9, 12, 13]


def test_rule_continuing_prompt_chunk_holds_the_lookahead():
    # budget 4, prompt 10, block size 1, EAGLE k = 2: chunk 1 (nothing computed) holds 4 slots; chunk 2 (a running
    # request) 4 + 4 + 2 lookahead = 10; chunk 3 ends the prompt: 10 + 1 + 2 = 13; then the decode: 10 computed + 1 +
    # 2 drafts + 2 = 15 (the budget of 4 holds its 1 + 2 tokens)
    res = run([Req(0.0, 10, 2)], mode="sd", k=2, block_size=1, budget=4, scheduler="vllm-v1",
              kinds={"d": "eagle"})
    assert col(res, "prefill_tokens") == [4, 4, 2, 0]
    assert col(res, "kv_blocks_used") == [4, 10, 13, 15]


@pytest.mark.parametrize("kind, admitted_at, finished_at, step1_seqs", [("ngram", 1.0, 2.0, 2), ("eagle", 6.0, 7.0, 1)])
def test_rule_a_server_at_the_kv_edge_admits_one_fewer_eagle_request(kind, admitted_at, finished_at,
                                                                     step1_seqs):
    # 22 KV slots (block size 1), k = 3, every step 1 s. r0 (prompt 8, output 6) prefills in step 0 (9 slots) and
    # decodes from step 1: 9 + 3 = 12 slots with n-gram, + 3 lookahead = 15 with EAGLE. r1 (prompt 8, output 1,
    # arriving at 0.5) needs 9 slots to be admitted in step 1: 12 + 9 = 21 <= 22 fits; 15 + 9 = 24 does not, and
    # EAGLE's r0 holds 16..19 in steps 2-5, so r1 waits for r0's finish at 6.0 and prefills in step 6
    res = run([Req(0.0, 8, 6), Req(0.5, 8, 1)], mode="sd", k=3, block_size=1, kv_tokens=22,
              scheduler="vllm-v1", kinds={"d": kind})
    assert col(res, "num_seqs")[1] == step1_seqs
    assert req(res, "first_scheduled_time") == [0.0, admitted_at]
    assert req(res, "finish_time") == [6.0, finished_at]
    assert req(res, "preemptions") == [0, 0]


def test_rule_up_front_kv_check_counts_the_lookahead_slots():
    # prompt 8 + output 6 - 1 + 3 drafts = 16 slots fit a 16-slot pool under n-gram; EAGLE's 3 lookahead slots
    # make 19, which it does not hold: refused before the run (Scheduler.check_fits over rules/kv.peak_tokens)
    run([Req(0.0, 8, 6)], mode="sd", k=3, block_size=1, kv_tokens=16, scheduler="vllm-v1",
        kinds={"d": "ngram"})
    with pytest.raises(ValueError, match=r"needs 19 KV blocks .* 3 draft lookahead tokens \+ 3 proposer lookahead"):
        run([Req(0.0, 8, 6)], mode="sd", k=3, block_size=1, kv_tokens=16, scheduler="vllm-v1",
            kinds={"d": "eagle"})


@pytest.mark.parametrize("async_scheduling, starts, ends", [
    (True, [0.0, 1.5, 2.5], [1.5, 2.25, 3.25]),
    (False, [0.0, 2.5, 4.25], [1.5, 3.25, 5.0]),
])
def test_rule_async_scheduling_step_period_is_max_of_forward_and_host(async_scheduling, starts, ends):
    # AR, prompt 4, output 3, step time 0.5 s + 0.25 s per batched token, host work (step_overhead_s, vLLM V1's
    # engine-loop gap) 1.0 s. Step 0 prefills 4 tokens: forward 1.5 s; step 1 decodes 1 token: 0.75 s.
    # async: the host work runs under the forward, so a step starts max(forward, host) after the last one started:
    # 0 -> 1.5 (max(1.5, 1.0)) -> 2.5 (max(0.75, 1.0)). sync: forward + host: 0 -> 2.5 -> 4.25
    res = run([Req(0.0, 4, 3)], target=linear(0.0, 0.25, 0.5), overhead=1.0, scheduler="vllm-v1",
              async_scheduling=async_scheduling)
    assert col(res, "start") == starts
    assert col(res, "end") == ends
    assert req(res, "finish_time") == [ends[-1]]


# ---------------------------------------------------------------- invariant


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_invariant_kv_never_negative_nor_above_capacity_with_lookahead(data):
    """Random small vLLM V1 servers with an EAGLE drafter (k slots of lookahead per running request), async or not,
    with KV from just what the largest request needs (rules/kv.peak_tokens, as Scheduler.check_fits) up to 4x:
    KV used stays within [0, capacity], every request finishes with its whole output, and the usual invariants."""
    n = data.draw(st.integers(1, 6))
    reqs = []
    for _ in range(n):
        out = data.draw(st.integers(1, 10))
        acc = data.draw(st.lists(st.integers(1, 5), min_size=out, max_size=out))
        reqs.append(Req(data.draw(st.sampled_from([0.0, 0.0, 0.3, 1.0, 2.5])), data.draw(st.integers(1, 12)), out,
                        acc={"d": acc}))
    k = data.draw(st.integers(1, 4))
    bs = data.draw(st.sampled_from([1, 2, 4, 8]))
    need = max(-(-(r.prompt + r.output - 1 + k + k) // bs) for r in reqs)  # prompt + output - 1 + k drafts + k slots
    kv_blocks = need + data.draw(st.integers(0, 3 * need))
    kw = dict(mode="sd", k=k, block_size=bs, kv_tokens=kv_blocks * bs, max_num_seqs=data.draw(st.integers(1, 4)),
              budget=data.draw(st.integers(4, 20)), chunked=True, prefill="mixed", scheduler="vllm-v1",
              overhead=data.draw(st.sampled_from([0.0, 0.3, 2.0])), target=linear(0.0, 1e-2, 1.0))
    res = run(reqs, kinds={"d": "eagle"}, async_scheduling=data.draw(st.booleans()), **kw)
    check_invariants(res, [r.output for r in reqs], kw["budget"], kw["scheduler"] == "vllm-v1")
    assert res.extras["kv_peak_blocks"] <= kv_blocks
