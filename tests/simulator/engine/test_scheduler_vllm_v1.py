"""`scheduler: vllm-v1`: the shared token budget (decode + draft + prefill tokens), the preset's config rules,
the budget cut as a property, and engine_step drafter costs (vLLM V1's proposer)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.kv_pool import BlockPool
from simulator.engine.rules.decode_budget import fit_decodes
from simulator.engine.scheduler import VLLM_V1_RULES, Scheduler
from simulator.server_config import ServerConfig
from tests.simulator.engine.engine_fixtures import iid_traces, simulate, workload


def test_preset_turns_chunked_prefill_on_and_refuses_contradictions():
    s = ServerConfig(target_profile="x", kv_capacity_tokens=1000, scheduler="vllm-v1")
    assert s.chunked_prefill and s.prefill == "mixed"
    with pytest.raises(ValueError, match="always chunks prefills"):
        ServerConfig(target_profile="x", kv_capacity_tokens=1000, scheduler="vllm-v1", chunked_prefill=False)
    with pytest.raises(ValueError, match="drop prefill: separate"):
        ServerConfig(target_profile="x", kv_capacity_tokens=1000, scheduler="vllm-v1", prefill="separate")
    assert ServerConfig(target_profile="x", kv_capacity_tokens=1000).scheduler == "vllm-v1"  # the default


def test_rules_are_listed_both_ways():
    assert VLLM_V1_RULES["modelled"] and VLLM_V1_RULES["not_modelled"]


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
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
    if mode != "ar":  # draftsim's own rule schedules every decode (PSD: every verified one) with its drafts, over it
        o = old.steps[old.steps.device == "target"]
        assert (o.batched_tokens > budget).any()


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(1, 40), proposed=st.lists(st.integers(0, 6), min_size=0, max_size=12))
def test_budget_cut_serves_running_requests_in_order(budget, proposed):
    prop = np.array(proposed, dtype=np.int64)
    drafts = np.empty_like(prop)
    n = fit_decodes(prop, len(prop), budget, drafts)  # vLLM V1's decode budget: the whole token budget
    cut = drafts[:n]
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
        Scheduler(wl, BlockPool(10, 16), max_num_batched_tokens=8, chunked=True, rules="sglang")


def test_engine_step_drafter_is_charged_once_per_step_including_prefill_steps():
    """vLLM V1's proposer runs after every forward in which a request samples (the prefill's last chunk too)."""
    from simulator.costs.draft_cost import DraftCost
    from simulator.costs.latency import LinearProfile, Provenance

    per_step = LinearProfile("p", {"const": 0.004, "batched_tokens": 1e-5}, provenance=Provenance("test"))
    traces = iid_traces(6, seed=5, prompt=(20, 40), out=(5, 15))
    wl = workload(traces, 6, rate=5.0)  # arrivals far apart: some steps are prefill-only
    res = simulate(traces, wl, mode="sd", k=3, chunked=True, scheduler="vllm-v1",
                   draft=DraftCost("engine_step", per_step))
    s = res.steps
    target = s[(s.device == "target") & (s.phase != "draft")]
    drafts = s[s.phase == "draft"]
    assert len(drafts) == len(target)  # every step samples something here, so every step pays the proposer
    expected = 0.004 + 1e-5 * target.batched_tokens.to_numpy()
    assert np.allclose((drafts.end - drafts.start).to_numpy(), expected)
    assert (target.phase == "prefill").any()


def test_only_the_proposers_of_the_policys_drafters_run_each_step():
    """Drafters 'd' and 'g' both priced as vLLM V1's proposer (the same per-step profile): a server drafting with 'd'
    alone deploys only its proposer (each step pays one), a bandit over both runs both every step (each step pays two,
    named after the drafter its requests drafted with, then the other)."""
    from policies.registry import make_policy
    from simulator.costs.draft_cost import DraftCost
    from simulator.costs.latency import LinearProfile, Provenance

    per_step = LinearProfile("p", {"const": 0.004, "batched_tokens": 1e-5}, provenance=Provenance("test"))
    traces = iid_traces(6, seed=5, prompt=(20, 40), out=(5, 15), drafters=("d", "g"))
    for policy, proposers in ((None, 1), (make_policy({"name": "ucb", "drafters": ["d", "g"], "k": 3}, seed=0), 2)):
        res = simulate(traces, workload(traces, 6, rate=5.0), mode="sd", k=3, chunked=True, scheduler="vllm-v1",
                       drafters=("d", "g"), policy=policy, draft=DraftCost("engine_step", per_step))
        s = res.steps
        target = s[(s.device == "target") & (s.phase != "draft")]
        drafts = s[s.phase == "draft"]
        assert len(drafts) == len(target)
        expected = proposers * (0.004 + 1e-5 * target.batched_tokens.to_numpy())
        assert np.allclose((drafts.end - drafts.start).to_numpy(), expected)
        names = drafts.drafters.str.split("+")
        assert (names.str.len() == proposers).all() and set(names.explode()) == {"d", "g"}.intersection(
            {"d"} if proposers == 1 else {"d", "g"})
        if proposers == 2:  # a step that drafted with 'g' alone names 'g', then the proposer that drafted nothing
            assert set(drafts.drafters) == {"d+g", "g+d"}


def test_a_step_estimate_adds_every_proposer_of_the_policys_drafters():
    """One request decoding alone (no prompt waiting): a policy's step estimate for (d, 2) is the target's step of one
    sequence and 3 tokens, 0.01 + 3 x 0.001 s, plus the proposers of both its drafters, 2 ms ('d') and 0.5 ms ('g'):
    15.5 ms; a third `engine_step` drafter it never drafts with ('h', 7 ms) is not deployed and adds nothing (the
    kernel asks the plug-in in Python with its own estimates)."""
    from policies.base import Choice, Policy
    from simulator.costs.draft_cost import DraftCost
    from simulator.costs.latency import LinearProfile, Provenance
    from simulator.engine.simulation import ServerSimulation
    from tests.simulator.engine.engine_fixtures import inputs, scenario

    class Estimates(Policy):
        name = "estimates"

        def __init__(self):
            self.seen = []

        def drafters_used(self):
            return ("d", "g")

        def max_draft_tokens(self):
            return 2

        def choose(self, view):
            self.seen.append(view.step_time_estimate("d", 2))
            return Choice("d", 2)

    def proposer(seconds):
        return DraftCost("engine_step", LinearProfile("p", {"const": seconds}, provenance=Provenance("test")))

    traces = iid_traces(1, seed=3, prompt=(10, 11), out=(12, 13), drafters=("d", "g", "h"))
    pol = Estimates()
    target = LinearProfile("t", {"const": 0.01, "batched_tokens": 0.001}, provenance=Provenance("test"))
    sc = scenario("sd", pol, target=target, costs={"d": proposer(0.002), "g": proposer(0.0005), "h": proposer(0.007)},
                  scheduler="vllm-v1", step_overhead_s=0.0)
    ServerSimulation(sc, inputs(traces, workload(traces, 1, rate=None), ("d", "g", "h"))).simulate()
    assert len(pol.seen) > 2 and pol.seen == pytest.approx([0.0155] * len(pol.seen), rel=1e-12)


def test_engine_step_drafter_is_refused_for_psd():
    from simulator.costs.draft_cost import DraftCost
    from simulator.server_config import PSDConfig

    traces = iid_traces(3, seed=1)
    with pytest.raises(ValueError, match="engine_step draft costs"):
        simulate(traces, workload(traces, 3), mode="psd", psd=PSDConfig(),
                 draft=DraftCost("engine_step", _one_ms_profile()))


def _one_ms_profile():
    from simulator.costs.latency import LinearProfile, Provenance

    return LinearProfile("p", {"const": 0.001}, provenance=Provenance("test"))
