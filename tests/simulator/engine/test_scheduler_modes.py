"""Scheduler modes and engine guards: separate vs mixed prefill, PSD drafter prefill, defer_kv, sync,
duration guards, the up-front KV check with draft lookahead, sampled verification without tv, and
hypothesis invariants across modes."""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.base import FixedPolicy
from simulator.engine.arrivals import PushedArrivals
from simulator.costs.draft_cost import DraftCost
from simulator.costs.latency import LinearProfile, Provenance
from simulator.engine.simulation import ServerSimulation
from simulator.engine.server import Server
from simulator.server_config import PSDConfig, ServerConfig, constant_profile
from tests.simulator.engine.engine_fixtures import iid_traces, inputs, scenario, simulate, workload
from traces.bundle import DrafterTrace, RequestTrace


def _target_phases_by_step(steps):
    tgt = steps[steps.device == "target"]
    return tgt.groupby("step")["phase"].apply(set)


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
def test_separate_prefill_steps_never_mix_decode_and_prefill(mode):
    traces = iid_traces(30, seed=21)
    wl = workload(traces, 80, rate=60.0)
    sep = simulate(traces, wl, mode=mode, prefill="separate", psd=PSDConfig(sub_batch_max_num_seqs=8))
    mixed = simulate(traces, wl, mode=mode, prefill="mixed", psd=PSDConfig(sub_batch_max_num_seqs=8))
    for phases in _target_phases_by_step(sep.steps):
        assert "mixed" not in phases
        assert not ("prefill" in phases and phases & {"decode", "verify"}), phases
    s = sep.steps
    assert (s.loc[(s.device == "target") & (s.phase != "prefill"), "prefill_tokens"] == 0).all()
    assert (mixed.steps.phase == "mixed").any(), "the same load mixes prefills into decode steps in mixed mode"
    assert sep.requests.finish_time.notna().all()
    # prefill-only steps stall decodes: TPOT is higher than with prefills mixed in
    assert sep.requests.tpot.mean() > mixed.requests.tpot.mean()


def test_separate_prefill_refuses_chunked_prefill():
    with pytest.raises(ValueError, match="chunked_prefill"):
        ServerConfig(target_profile="x", kv_capacity_tokens=1000, prefill="separate", chunked_prefill=True,
                     scheduler="draftsim")
    traces = iid_traces(3, seed=22)
    with pytest.raises(ValueError, match="chunked_prefill"):
        simulate(traces, workload(traces, 3), prefill="separate", chunked=True)


@pytest.mark.parametrize("prefill", ["mixed", "separate"])
def test_psd_prices_the_drafters_own_prefill_on_the_draft_device(prefill):
    traces = iid_traces(20, seed=23, prompt=(100, 300))
    wl = workload(traces, 40, rate=30.0)
    draft_profile = LinearProfile("draft", {"batched_tokens": 1e-5, "const": 1e-3}, provenance=Provenance("test"))
    res = simulate(traces, wl, mode="psd", prefill=prefill, draft=DraftCost("autoregressive", profile=draft_profile),
                   target=constant_profile(0.01), psd=PSDConfig(sub_batch_max_num_seqs=8))
    s = res.steps
    dp = s[(s.device == "drafter") & (s.phase == "prefill")]
    assert len(dp) > 0
    expected = [draft_profile.step_time(n, t, kv) for n, t, kv in zip(dp.num_seqs, dp.prefill_tokens, dp.kv_tokens)]
    np.testing.assert_allclose(dp.end - dp.start, expected, rtol=1e-12)
    # every prompt token the target prefilled is prefilled by the drafter too
    assert dp.prefill_tokens.sum() == s.loc[s.device == "target", "prefill_tokens"].sum()
    if prefill == "separate":  # the drafter's prefill follows the target's, inside the same step
        tp = s[(s.device == "target") & (s.phase == "prefill")].set_index("step")
        for _, row in dp.iterrows():
            assert row.start == pytest.approx(tp.loc[row.step, "end"])
    # a drafter without a model (constant cost) has no prefill
    res0 = simulate(traces, wl, mode="psd", prefill=prefill, draft=DraftCost("constant", seconds=0.003),
                    target=constant_profile(0.01), psd=PSDConfig(sub_batch_max_num_seqs=8))
    assert not ((res0.steps.device == "drafter") & (res0.steps.phase == "prefill")).any()


def test_psd_sync_interval_is_in_the_steps_table():
    traces = iid_traces(20, seed=24)
    wl = workload(traces, 40, rate=None)
    res = simulate(traces, wl, mode="psd", target=constant_profile(0.01), draft=DraftCost("constant", seconds=0.004),
                   psd=PSDConfig(sub_batch_max_num_seqs=8, sync_s=0.002))
    s = res.steps
    sync = s[s.phase == "sync"]
    assert len(sync) > 0 and np.allclose(sync.end - sync.start, 0.002)
    assert res.requests.finish_time.max() <= s.end.max() + 1e-12
    ends = s.groupby("step")["end"].max()
    starts = s.groupby("step")["start"].min()
    assert np.allclose(starts.to_numpy()[1:] >= ends.to_numpy()[:-1] - 1e-12, True)


@pytest.mark.parametrize("value", [math.nan, -0.01, math.inf])
def test_a_profile_with_a_non_finite_or_negative_coefficient_is_refused_when_made(value):
    """Step-time coefficients are seconds per unit (every fit is non-negative): a profile that could price a step
    below zero or at NaN is refused before any run, naming the profile and the coefficient."""
    from simulator.costs.step_model import StructuredProfile

    with pytest.raises(ValueError, match=r"profile 'p': coefficient 'const' is .*; expected a finite number"):
        LinearProfile("p", {"const": value, "num_seqs": 1e-4}, provenance=Provenance("test"))
    with pytest.raises(ValueError, match=r"structured profile 'p': coefficient 'const' is"):
        StructuredProfile("p", {"const": value})


def test_nan_overhead_and_draft_fraction_are_refused():
    traces = iid_traces(3, seed=26)
    with pytest.raises(ValueError, match="step_overhead_s"):
        simulate(traces, workload(traces, 3), overhead=math.nan)
    with pytest.raises(ValueError, match="fraction"):
        DraftCost("fraction_of_verify", fraction=math.nan)
    with pytest.raises(ValueError, match="fraction"):
        DraftCost("fraction_of_verify", fraction=-0.1)


def test_kv_check_counts_the_draft_lookahead():
    traces = [RequestTrace("t0", 100, 100, {"d": DrafterTrace(np.full(100, 50, np.int32))})]
    wl = workload(traces, 1, rate=None)
    # 100 + 100 + 16 tokens fit (the old margin), but drafting k = 40 from the last position needs 239
    with pytest.raises(ValueError, match=r"40 draft lookahead.*raise kv_capacity_tokens or lower k"):
        simulate(traces, wl, mode="sd", k=40, kv_tokens=224, max_num_seqs=1)
    res = simulate(traces, wl, mode="sd", k=40, kv_tokens=240, max_num_seqs=1)  # enough: never stalls
    assert res.requests.finish_time.notna().all()


def _fixed_length_traces(lengths):
    """One trace per (prompt, output), acceptance 1 everywhere."""
    return [RequestTrace(f"t{i}", p, o, {"d": DrafterTrace(np.ones(o, np.int32))}) for i, (p, o) in enumerate(lengths)]


def test_requests_longer_than_max_model_len_are_refused_with_their_count():
    # prompt + output: 150, 250, 400, replayed twice -> the two 400-token requests exceed 300
    traces = _fixed_length_traces([(100, 50), (200, 50), (300, 100)])
    wl = workload(traces, 6, rate=None)
    dep = {"target": "llama3.1-8b", "gpu": "h100-80gb", "max_model_len": 300}
    sc = scenario("ar", kv_tokens=10**5, deployment=dep)
    with pytest.raises(ValueError, match=r"2 of 6 requests have prompt \+ output above deployment.max_model_len=300 "
                                         r"\(the longest: request 'r2', 300 prompt \+ 100 output tokens\)"):
        ServerSimulation(sc, inputs(traces, wl)).simulate()
    # at the limit (prompt + output == max_model_len, as vLLM admits) every request runs
    ok = scenario("ar", kv_tokens=10**5, deployment={**dep, "max_model_len": 400})
    assert ServerSimulation(ok, inputs(traces, wl)).simulate().requests.finish_time.notna().all()
    # a deployment without max_model_len bounds no request length
    assert scenario("ar", kv_tokens=10**5, deployment={k: v for k, v in dep.items() if k != "max_model_len"}) \
        .server.max_model_len is None


def test_kv_check_counts_every_request_that_cannot_fit():
    # AR needs prompt + output KV tokens: 150, 250, 400 -> 10, 16, 25 blocks of 16; 16 blocks (256 tokens) hold two
    traces = _fixed_length_traces([(100, 50), (200, 50), (300, 100)])
    wl = workload(traces, 6, rate=None)
    with pytest.raises(ValueError, match=r"2 of 6 requests need more KV than the server holds \(16 blocks, 256 "
                                         r"tokens\); the largest, request 'r2', needs 25 KV blocks"):
        simulate(traces, wl, mode="ar", kv_tokens=256)


def test_sampled_verification_without_tv_names_the_drafter():
    traces = iid_traces(3, seed=27, drafters=("eagle",))
    with pytest.raises(ValueError, match=r"sampled.*\['eagle'\]"):
        simulate(traces, workload(traces, 3), drafter="eagle", drafters=("eagle",), verification="sampled")


def test_servers_share_one_environment_and_take_pushed_requests():
    traces = iid_traces(10, seed=28)
    env = simpy.Environment()
    servers = []
    for j in range(2):
        wl = workload(traces, 10, rate=None)
        arr = PushedArrivals(env)
        sc = scenario("sd", FixedPolicy("d", 3), costs={"d": DraftCost("constant")}, name=f"s{j}", max_num_seqs=4,
                      max_num_batched_tokens=4096)
        srv = Server(env, sc, inputs(traces, wl), arrivals=arr)
        servers.append((srv, arr))

    def router():
        for i in range(10):
            for srv, arr in servers:
                arr.push(i)
            yield env.timeout(0.05)

    env.process(router())
    env.run()
    for srv, _ in servers:
        r = srv.result().requests
        assert r.finish_time.notna().all() and np.allclose(r.arrival_time, np.arange(10) * 0.05)


@settings(max_examples=25, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "psd"]), prefill=st.sampled_from(["mixed", "separate"]),
       chunked=st.booleans(), k=st.integers(1, 6), kv_blocks=st.integers(40, 200), seqs=st.integers(1, 12),
       rate=st.sampled_from([None, 20.0, 200.0]), clients=st.sampled_from([0, 3]), defer=st.booleans(),
       seed=st.integers(0, 10_000))
def test_scheduler_invariants_across_modes(mode, prefill, chunked, k, kv_blocks, seqs, rate, clients, defer, seed):
    if prefill == "separate":
        chunked = False
    traces = iid_traces(12, seed=seed, prompt=(5, 300), out=(1, 120))
    wl = workload(traces, 30, rate=rate if not clients else None, clients=clients, seed=seed)
    kv_tokens = kv_blocks * 16
    # the smallest pool the up-front check admits (the largest request alone, with its draft lookahead):
    # anything it admits must run to the end without stalling
    lookahead = max(1, 0 if mode == "ar" else k)
    need = -(-(int((wl.prompt_len + wl.output_len).max()) - 1 + lookahead) // 16) * 16
    budget = 512 if chunked else max(512, int(wl.prompt_len.max()))
    res = simulate(traces, wl, mode=mode, k=k, kv_tokens=max(kv_tokens, need), max_num_seqs=seqs, budget=budget,
                   chunked=chunked, prefill=prefill, psd=PSDConfig(sub_batch_max_num_seqs=seqs, defer_kv=defer),
                   target=constant_profile(0.01), draft=DraftCost("constant", seconds=0.003), seed=seed)
    rq = res.requests
    assert len(rq) == 30 and rq.request_id.is_unique  # none lost or duplicated
    assert rq.finish_time.notna().all()
    s = res.steps
    # every output token is emitted exactly once (prefill first tokens + verify/decode, cut at the end)
    assert int(s.loc[s.device == "target", "emitted_tokens"].sum()) == int(wl.output_len.sum())
    assert (s.kv_blocks_used >= 0).all() and (s.kv_blocks_used <= res.extras["kv_total_blocks"]).all()
    assert res.extras["kv_peak_blocks"] <= res.extras["kv_total_blocks"]
    assert (rq.accepted_tokens <= rq.proposed_tokens).all()
    assert rq.finish_time.max() <= s.end.max() + 1e-12


@pytest.mark.parametrize("prefill", ["mixed", "separate"])
def test_sd_prices_a_model_drafters_own_prefill_on_the_target_devices(prefill):
    traces = iid_traces(20, seed=26, prompt=(100, 300))
    wl = workload(traces, 40, rate=30.0)
    draft_profile = LinearProfile("draft", {"batched_tokens": 1e-5, "const": 1e-3}, provenance=Provenance("test"))
    res = simulate(traces, wl, mode="sd", prefill=prefill, draft=DraftCost("autoregressive", profile=draft_profile),
                   target=constant_profile(0.01))
    s = res.steps
    dp = s[s.phase == "draft_prefill"]
    assert len(dp) > 0 and (dp.device == "target").all() and (dp.emitted_tokens == 0).all()
    expected = [draft_profile.step_time(n, t, kv) for n, t, kv in zip(dp.num_seqs, dp.prefill_tokens, dp.kv_tokens)]
    np.testing.assert_allclose(dp.end - dp.start, expected, rtol=1e-12)
    # the drafter passes over every prompt token the target prefilled, after the target, inside the same step
    target_pre = s[(s.device == "target") & (s.phase.isin(["prefill", "mixed"]))]
    assert dp.prefill_tokens.sum() == target_pre.prefill_tokens.sum()
    assert (dp.set_index("step").start >= target_pre.groupby("step").end.max().loc[dp.step].to_numpy() - 1e-12).all()
    assert int(res.requests.output_len.sum()) == int(s.emitted_tokens.sum())
    # prompt lookup (no model) has no prefill; AR none either
    res0 = simulate(traces, wl, mode="sd", prefill=prefill, draft=DraftCost("constant", seconds=0.003),
                    target=constant_profile(0.01))
    assert not (res0.steps.phase == "draft_prefill").any()
