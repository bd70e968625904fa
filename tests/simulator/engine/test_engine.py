"""Engine invariants (DESIGN "Testing standards") and PSD rules."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.base import Choice, FixedPolicy, Policy
from simulator.costs.draft_cost import DraftCost
from simulator.server_config import PSDConfig, constant_profile
from tests.simulator.engine.engine_fixtures import iid_traces, inputs, linear, scenario, simulate, workload
from traces.walk import walk_positions
from traces.bundle import DrafterTrace, RequestTrace


def _emitted_total(res) -> int:
    s = res.steps
    return int(s.loc[s.device == "target", "emitted_tokens"].sum())


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
def test_no_request_lost_and_tokens_match_output(mode):
    traces = iid_traces(40, seed=1)
    wl = workload(traces, 120, rate=40.0)
    res = simulate(traces, wl, mode=mode, k=3)
    rq = res.requests
    assert len(rq) == 120 and rq.request_id.is_unique
    assert rq.finish_time.notna().all()
    assert (rq.finish_time >= rq.first_token_time).all() and (rq.first_token_time > rq.arrival_time).all()
    assert _emitted_total(res) == int(wl.output_len.sum())


def test_preemption_never_loses_requests_and_kv_stays_in_bounds():
    traces = iid_traces(30, seed=2, prompt=(100, 400), out=(100, 300))
    wl = workload(traces, 60, rate=None)  # everyone at t=0
    res = simulate(traces, wl, mode="sd", k=4, kv_tokens=4000, max_num_seqs=32)
    rq = res.requests
    assert rq.preemptions.sum() > 0, "the KV pool was meant to be too small to hold everyone"
    assert rq.finish_time.notna().all()
    assert _emitted_total(res) == int(wl.output_len.sum())
    total = res.extras["kv_total_blocks"]
    assert (res.steps.kv_blocks_used >= 0).all() and (res.steps.kv_blocks_used <= total).all()
    assert res.extras["kv_peak_blocks"] <= total


def test_sd_with_free_drafter_and_zero_acceptance_matches_ar():
    # verify cost independent of query tokens, so drafting k tokens that are all rejected changes nothing
    traces = iid_traces(25, seed=3, rate=0.0)
    wl = workload(traces, 60, rate=30.0)
    prof = linear(a_kv=1e-7, b_tok=0.0, const=4e-3)
    ar = simulate(traces, wl, mode="ar", target=prof)
    sd = simulate(traces, wl, mode="sd", k=3, target=prof)
    np.testing.assert_allclose(sd.requests.finish_time, ar.requests.finish_time, rtol=1e-12)
    np.testing.assert_allclose(sd.requests.ttft, ar.requests.ttft, rtol=1e-12)


def test_ngram_without_match_proposes_nothing_and_costs_nothing():
    rng = np.random.default_rng(0)
    traces = []
    for t in range(20):
        o = int(rng.integers(20, 80))
        traces.append(RequestTrace(f"t{t}", 50, o, {"ngram": DrafterTrace(
            acc_len=rng.integers(1, 6, o).astype(np.int32), proposal_len=np.zeros(o, np.int32))}))
    wl = workload(traces, 40, rate=20.0)
    ar = simulate(traces, wl, mode="ar", drafters=("ngram",))
    sd = simulate(traces, wl, mode="sd", k=5, drafter="ngram", drafters=("ngram",),
                  draft=DraftCost("constant", seconds=1.0))
    assert sd.requests.proposed_tokens.sum() == 0
    np.testing.assert_allclose(sd.requests.finish_time, ar.requests.finish_time, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(acc=st.lists(st.integers(1, 9), min_size=1, max_size=60), k=st.integers(0, 8))
def test_replay_rule_alone_matches_trace_walk(acc, k):
    acc_arr = np.asarray(acc, dtype=np.int32)
    traces = [RequestTrace("t0", 7, len(acc), {"d": DrafterTrace(acc_arr)})]
    wl = workload(traces, 1, rate=None)
    res = simulate(traces, wl, mode="sd" if k else "ar", k=max(k, 1) if k else 1)
    expected = len(walk_positions(acc_arr, k))  # the one replay walk: prefill makes token 0, steps from 1
    assert int(res.requests.decode_steps.iloc[0]) == expected
    assert _emitted_total(res) == len(acc)


def test_same_seed_same_result_different_seed_differs_for_random_workload():
    traces = iid_traces(20, seed=4)
    a = simulate(traces, workload(traces, 50, seed=7), mode="sd")
    b = simulate(traces, workload(traces, 50, seed=7), mode="sd")
    c = simulate(traces, workload(traces, 50, seed=8), mode="sd")
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert not a.requests.e2e.equals(c.requests.e2e)


def _closed_loop_throughput(res) -> float:
    """Tokens per second in the steady middle of the run (10%..90% of the makespan): no ramp-up or drain."""
    s = res.steps[res.steps.device == "target"]
    t0, t1 = s.start.min(), s.end.max()
    lo, hi = t0 + 0.1 * (t1 - t0), t0 + 0.9 * (t1 - t0)
    mid = s[(s.end > lo) & (s.end <= hi)]
    return mid.emitted_tokens.sum() / (mid.end.max() - mid.end.min() + (mid.end - mid.start).iloc[0])


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
def test_a_closed_loop_client_sends_its_next_request_think_time_after_its_last_finishes(mode):
    """Hand-worked: one client, think time 0.5 s, every step 0.25 s (no draft cost, no acceptance: one token a
    step). Request 0 arrives at 0 and finishes at 0.25 x its output length (its prefill step makes the first token);
    the client sends request 1 at that finish + 0.5, the idle server schedules it at once and it finishes 0.25 x its
    output length later; request 2 the same."""
    traces = iid_traces(3, seed=4, rate=0.0)
    wl = workload(traces, 3, rate=None, clients=1, think=0.5)
    res = simulate(traces, wl, mode=mode, target=constant_profile(0.25), max_num_seqs=4).requests
    out = wl.output_len.astype(float)
    arrival, finish = [0.0], []
    for i in range(3):
        finish.append(arrival[i] + 0.25 * out[i])
        arrival.append(finish[i] + 0.5)
    assert list(res["arrival_time"]) == pytest.approx(arrival[:3], abs=1e-12)
    assert list(res["first_scheduled_time"]) == pytest.approx(arrival[:3], abs=1e-12)
    assert list(res["finish_time"]) == pytest.approx(finish, abs=1e-12)


def test_psd_zero_draft_cost_equals_sd_zero_draft_cost():
    traces = iid_traces(30, seed=5, out=(200, 400))
    V = 0.01
    wl_sd = workload(traces, 300, clients=8)
    wl_psd = workload(traces, 300, clients=16)
    sd = simulate(traces, wl_sd, mode="sd", target=constant_profile(V), max_num_seqs=8)
    psd = simulate(traces, wl_psd, mode="psd", target=constant_profile(V), max_num_seqs=8,
                   psd=PSDConfig(sub_batch_max_num_seqs=8))
    assert _closed_loop_throughput(psd) == pytest.approx(_closed_loop_throughput(sd), rel=0.02)


def test_psd_doubles_sd_throughput_when_draft_equals_verify():
    traces = iid_traces(30, seed=6, out=(200, 400))
    V = 0.01
    cost = DraftCost("constant", seconds=V)
    sd = simulate(traces, workload(traces, 400, clients=8), mode="sd", target=constant_profile(V), draft=cost,
                  max_num_seqs=8)
    psd = simulate(traces, workload(traces, 400, clients=16), mode="psd", target=constant_profile(V), draft=cost,
                   max_num_seqs=8, psd=PSDConfig(sub_batch_max_num_seqs=8))
    assert _closed_loop_throughput(psd) / _closed_loop_throughput(sd) == pytest.approx(2.0, rel=0.01)


def test_psd_sub_batches_stay_balanced_and_tracks_overlap():
    traces = iid_traces(30, seed=7, out=(100, 200))
    res = simulate(traces, workload(traces, 200, clients=16), mode="psd", target=constant_profile(0.01),
                   draft=DraftCost("constant", seconds=0.008), max_num_seqs=8, psd=PSDConfig(sub_batch_max_num_seqs=8))
    s = res.steps
    ver = s[(s.device == "target") & (s.phase == "verify")]
    dr = s[s.device == "drafter"]
    assert len(ver) and len(dr)
    # in steady state the draft of one sub-batch overlaps the verify of the other
    both = set(ver.step) & set(dr.step)
    assert len(both) > 0.8 * len(ver)
    merged = ver.merge(dr, on="step", suffixes=("_v", "_d"))
    merged = merged[merged.sub_batch_d != -1]
    assert (merged.sub_batch_v != merged.sub_batch_d).mean() > 0.9
    sizes = ver.num_seqs.to_numpy()
    assert np.median(sizes) == 8  # each verify handles one full sub-batch of m = 8


def test_psd_falls_back_to_sequential_sd_with_one_request():
    traces = iid_traces(1, seed=8, out=(50, 51))
    res = simulate(traces, workload(traces, 1, rate=None), mode="psd", target=constant_profile(0.01),
                   draft=DraftCost("constant", seconds=0.005), psd=PSDConfig())
    # one request: the other sub-batch is always empty, so every decode step is draft then verify
    assert res.extras["psd_fallback_steps"] == res.requests.decode_steps.iloc[0]
    s = res.steps
    ver = s[(s.device == "target") & (s.phase == "verify")]
    assert np.allclose(ver.end - ver.start, 0.01) and np.allclose((ver.start - s[s.device == "drafter"].start.to_numpy()), 0.005)


class _Oracle(Policy):
    name = "test-oracle"
    reads_ground_truth = True

    def bind_ground_truth(self, traces):
        self.truth = traces

    def drafters_used(self):
        return ("d",)

    def max_draft_tokens(self):
        return max(int(t.drafters["d"].acc_len.max()) - 1 for t in self.truth.values())

    def choose(self, view):
        acc = self.truth[view.request_id].drafters["d"].acc_len[view.position]
        return Choice("d", int(acc) - 1) if acc > 1 else Choice(None, 0)


def test_oracle_policy_is_bound_to_truth_and_refused_live():
    traces = iid_traces(10, seed=10)
    wl = workload(traces, 20, rate=20.0)
    res = simulate(traces, wl, mode="sd", policy=_Oracle())
    rq = res.requests
    assert (rq.accepted_tokens == rq.proposed_tokens).all()  # an oracle proposes only what is accepted
    from simulator.engine.simulation import ServerSimulation

    with pytest.raises(ValueError, match="cannot run live"):
        ServerSimulation(scenario("sd", _Oracle(), max_num_seqs=8), inputs(traces, wl), live=True)


def test_request_too_large_for_kv_is_a_clear_error():
    traces = iid_traces(3, seed=11, prompt=(900, 1000))
    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        simulate(traces, workload(traces, 3), kv_tokens=500)


def test_chunked_prefill_splits_long_prompts_within_budget():
    traces = iid_traces(10, seed=12, prompt=(3000, 5000), out=(20, 40))
    wl = workload(traces, 10, rate=None)
    with pytest.raises(ValueError, match="chunked_prefill"):
        simulate(traces, wl, budget=1024)
    res = simulate(traces, wl, budget=1024, chunked=True)
    s = res.steps
    assert (s.loc[s.device == "target", "batched_tokens"] <= 1024).all()
    assert res.requests.finish_time.notna().all()


def test_sampled_verification_accepts_with_probability_one_minus_tv():
    rng = np.random.default_rng(13)
    traces = []
    for t in range(40):
        o = 400
        traces.append(RequestTrace(f"t{t}", 20, o, {"d": DrafterTrace(
            acc_len=np.ones(o, np.int32), tv=np.full(o, 0.3, np.float32))}))
    wl = workload(traces, 40, rate=None)
    from simulator.engine.simulation import ServerSimulation

    def run(seed, verification):
        sc = scenario("sd", FixedPolicy("d", 3), costs={"d": DraftCost("constant", seconds=0.0)}, seed=seed,
                      max_num_seqs=64, max_num_batched_tokens=8192, verification=verification)
        return ServerSimulation(sc, inputs(traces, wl)).simulate().requests

    greedy = run(0, "greedy")
    assert greedy.accepted_tokens.sum() == 0  # greedy replay uses acc_len (all 1) and ignores tv
    a = 0.7
    expected = a + a**2 + a**3  # accepted drafts per step, k = 3, i.i.d. acceptance 1 - tv
    r0 = run(1, "sampled")
    per_step = r0.accepted_tokens.sum() / r0.decode_steps.sum()
    assert per_step == pytest.approx(expected, rel=0.03)
    assert r0.equals(run(1, "sampled")) and not r0.accepted_tokens.equals(run(2, "sampled").accepted_tokens)


def test_bd_reward_policy_is_refused_upfront_on_traces_without_tv():
    from policies.registry import make_policy

    traces = iid_traces(5, seed=14, drafters=("a", "b"))
    pol = make_policy({"name": "metasd-ucb", "drafters": ["a", "b"]})
    with pytest.raises(ValueError, match="reward: be"):
        simulate(traces, workload(traces, 5), mode="sd", policy=pol, drafters=("a", "b"))


def test_psd_split_min_batch_keeps_sd_latency_at_low_load():
    traces = iid_traces(30, seed=15, out=(100, 200))
    V = 0.01
    cost = DraftCost("constant", seconds=0.003)
    wl = workload(traces, 150, rate=3.0)  # a few requests at a time
    kw = dict(target=constant_profile(V), draft=cost, max_num_seqs=8)
    sd = simulate(traces, wl, mode="sd", **kw)
    split = simulate(traces, wl, mode="psd", psd=PSDConfig(sub_batch_max_num_seqs=8), **kw)
    adaptive = simulate(traces, wl, mode="psd", psd=PSDConfig(sub_batch_max_num_seqs=8, split_min_batch=100), **kw)
    # splitting a small batch verifies each request only every other step: slower than SD
    assert split.requests.e2e.mean() > 1.2 * sd.requests.e2e.mean()
    np.testing.assert_allclose(adaptive.requests.e2e, sd.requests.e2e, rtol=1e-9)


def _psd_sim(traces, wl, m=4):
    from simulator.engine.simulation import ServerSimulation

    sc = scenario("psd", FixedPolicy("d", 3), target=constant_profile(0.01),
                  costs={"d": DraftCost("constant", seconds=0.01)}, psd=PSDConfig(sub_batch_max_num_seqs=m),
                  max_num_seqs=m, max_num_batched_tokens=8192)
    return ServerSimulation(sc, inputs(traces, wl))


def test_psd_slots_are_recycled_and_sides_stay_within_one():
    traces = iid_traces(40, seed=17, out=(30, 300))
    m = 4
    res = _psd_sim(traces, workload(traces, 200, clients=2 * m), m=m).simulate()
    s = res.steps
    ver = s[(s.device == "target") & (s.phase == "verify")]  # steps without prefills: num_seqs = verify side
    dr = s[(s.device == "drafter") & (s.sub_batch >= 0)]
    both = ver.merge(dr, on="step", suffixes=("_v", "_d"))
    # finished requests give back their slots: 2m requests keep flowing and neither side exceeds m + 1
    assert res.requests.finish_time.notna().all() and len(both) > 100
    assert (both.num_seqs_v <= m + 1).all()
    assert (both.num_seqs_d <= m + 1).all()
    assert np.median(both.num_seqs_d) == m


def test_an_sd_run_over_inputs_made_without_acceptance_is_refused_when_the_server_is_made():
    """Inputs made for AR runs only (with_acceptance=False) carry no acceptance: a server that drafts with 'd' over
    them is refused before any step, naming the run, the policy and the drafter."""
    from simulator.engine.acceptance_table import AcceptanceTable
    from simulator.engine.simulation import ServerSimulation
    from simulator.scenario import SimInputs

    traces = iid_traces(3, seed=2)
    wl = workload(traces, 3)
    bare = SimInputs(wl, AcceptanceTable.from_traces(traces, ["d"], with_acceptance=False), traces)
    sc = scenario("sd", FixedPolicy("d", 3), costs={"d": DraftCost("constant", seconds=0.0)})
    with pytest.raises(ValueError, match=r"policy 'fixed' drafts with 'd', but the inputs carry no acceptance"):
        ServerSimulation(sc, bare)
    assert ServerSimulation(scenario("ar", None), bare).simulate().requests.finish_time.notna().all()
