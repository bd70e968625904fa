"""Two-batch PSD (simulator/engine/compiled_psd_kernel.py) under the `draftsim` scheduler and vLLM V1's (the verify
side's decode budget, the engine-loop gap): a run in segments equals the run in one call and keeps the invariants;
the kernel's policy rules choose as the policies themselves; hand-checked sides, switches, budgets and KV pressure;
the same tables with numba's JIT on and off."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.registry import make_policy
from tests.simulator.engine.engine_fixtures import (PSDConfig, assert_same_run_tables, iid_traces,
                                                    tables_jit_on_and_off, tight_kv, traces_with, workload)
from policies.base import FixedPolicy
from traces.bundle import DrafterTrace
from tests.simulator.engine.test_compiled_run import (COSTS, PlugInThompson, Recorder, asked_in_python, assert_same,
                                                      assert_told_what_the_tables_show, drawn_case, profiles,
                                                      scheduler_of, simulate, with_profiles, with_tv)
from tests.simulator.engine.test_rules_invariants import check_invariants


# the random PSD configs of the tests below
PSD_CASES = dict(
    seed=st.integers(0, 10_000), n=st.integers(1, 40), rate=st.floats(0.0, 0.9), ngram=st.booleans(),
    k=st.integers(0, 6), cost=st.sampled_from(sorted(COSTS)),
    rules=st.sampled_from(["mixed", "chunked", "separate", "vllm-v1"]),
    budget=st.sampled_from([16, 64, 4096]), arrivals=st.sampled_from(["poisson", "burst", "closed"]),
    req_rate=st.floats(5.0, 500.0), m=st.integers(1, 8), block_size=st.sampled_from([1, 4, 16]),
    slack=st.integers(0, 3), overhead=st.sampled_from([0.0, 1e-4, 0.0012]), segment=st.sampled_from([6, 1 << 16]),
    split_min=st.integers(0, 6), sync_s=st.sampled_from([0.0, 0.0, 3e-4]), defer_kv=st.booleans(), roof=profiles,
    async_sched=st.booleans(), pressure=st.sampled_from([0, 0, 1, 3]), sampled=st.booleans(),
    switch=st.sampled_from([0.0, 0.0, 4e-4]))
# the PSD kernel's own policy rules (PSD_POLICIES): adaptive-k and the bandits over one drafter or every one
PSD_RULED = ["adaptive-k", "ucb", "ucb-all", "thompson-all", "exp3-all", "epsilon-greedy-all", "sliding-window-ucb-all",
             "metasd-ucb-all"]


def psd_case(policy, seed, n, rate, ngram, k, cost, rules, budget, arrivals, req_rate, m, block_size, slack, overhead,
             split_min, sync_s, defer_kv, roof, async_sched, pressure, sampled, switch) -> tuple[str, int, dict]:
    """One drawn case of PSD_CASES under `policy` (psd_policy's names): the policy's name (metasd-ucb-all without TV
    becomes ucb-all), its k and the run's build() arguments."""
    traces, drafters, wl, budget = drawn_case(seed, n, rate, ngram, arrivals, req_rate, rules, budget)
    if sampled:
        traces = with_tv(traces, seed)
    if policy != "fixed":
        k = max(k, 1)  # k = 0: the fixed policy only, a PSD server that drafts nothing (no drafter slot)
    kw = dict(traces=traces, wl=wl, mode="psd", k=k, drafter="g" if ngram and seed % 2 else "d", drafters=drafters,
              cost=COSTS[cost], kv_tokens=tight_kv(wl, k, block_size, 2 * m, slack, 0, pressure), max_num_seqs=m,
              block_size=block_size, step_overhead_s=overhead, max_num_batched_tokens=budget,
              chunked_prefill=rules in ("chunked", "vllm-v1"), prefill="separate" if rules == "separate" else "mixed",
              psd=PSDConfig(split_min_batch=split_min, sync_s=sync_s, defer_kv=defer_kv),
              **scheduler_of(rules, async_sched), verification="sampled" if sampled else "greedy",
              switch_cost_s=switch)
    kw = with_profiles(kw, roof, cost)
    if policy == "metasd-ucb-all" and not sampled:  # its BD reward reads the traces' TV
        policy = "ucb-all"
    return policy, k, kw


@settings(max_examples=80, deadline=None)
@given(**PSD_CASES, policy=st.sampled_from(["fixed", "fixed", *PSD_RULED, "asked", "plug-in", "plug-in-all"]))
def test_a_psd_run_in_segments_equals_the_run_in_one_call_and_keeps_the_invariants(segment, **case):
    """Random PSD runs, in segments of `segment` step rows as in one kernel call: the same tables, and the engine's
    invariants (test_rules_invariants.check_invariants). The runs (`async_sched`: vLLM V1 with async scheduling, the
    engine-loop gap hidden by the step; `pressure`: KV for fewer than both sub-batches' largest requests, so the run may
    preempt: the newest running requests back to the waiting queue's front, their proposals and sides dropped;
    `sampled`: sampled verification, each verified draft kept with probability 1 - tv by the server's generator;
    `switch`: a drafter switching cost, which one drafter never pays; `policy`: the fixed one (at k = 0 too), or one the
    kernel asks in Python at each step: adaptive-k (k per request from its estimates and the pipelined step-time
    estimates) and the bandits (UCB over one drafter, and UCB, Thompson, EXP3, epsilon-greedy, sliding-window UCB and
    MetaSD-UCB with its BD reward over every drafter of the traces: their rules in the PSD kernel, the drawing ones
    drawing from the policy's generator), or one asked in Python: the fixed policy with choose_batch replaced on the
    instance, a plug-in Thompson over one drafter or every one)."""
    policy, k, kw = psd_case(**case)
    drafters = kw["drafters"]
    whole = simulate(policy=psd_policy(policy, kw["drafter"], k, drafters), **kw)
    assert_same(simulate(segment, policy=psd_policy(policy, kw["drafter"], k, drafters), **kw), whole)
    check_invariants(whole, kw["wl"].output_len.tolist(), kw["max_num_batched_tokens"],
                     kw.get("scheduler") == "vllm-v1")


@settings(max_examples=80, deadline=None)
@given(**PSD_CASES, policy=st.sampled_from(PSD_RULED))
def test_each_psd_kernel_policy_rule_chooses_as_the_policy_itself(segment, **case):
    """adaptive-k and the bandits by the PSD kernel's own rules (choices over the asked side, updates from the
    verified side, pipelined step-time estimates, generator draws) against the same policy asked in Python at each
    step (asked_in_python), both compiled, over PSD_CASES' random configs: the same tables bit for bit, so a
    difference is the kernel's policy rule."""
    policy, k, kw = psd_case(**case)
    drafters = kw["drafters"]
    ruled = simulate(segment, policy=psd_policy(policy, kw["drafter"], k, drafters), **kw)
    asked = simulate(segment, policy=asked_in_python(psd_policy(policy, kw["drafter"], k, drafters)), **kw)
    assert_same(ruled, asked)


@pytest.mark.parametrize("seed", [1, 3, 7])
def test_psd_adaptive_k_caps_k_at_each_requests_match_length_as_the_policy_itself(seed):
    """PSD adaptive-k over the n-gram drafter 'g' (match lengths 0-4 per position) at k_max 6: the kernel caps each
    asked request's k at the match length of its next output position as the policy asked in Python at each step
    does (the same tables), so no verify step proposes more than 4 tokens per sequence."""
    policy, k, kw = psd_case("adaptive-k", seed=seed, n=30, rate=0.6, ngram=True, k=6, cost="constant",
                             rules="vllm-v1", budget=4096, arrivals="poisson", req_rate=200.0, m=4, block_size=16,
                             slack=3, overhead=0.0, split_min=0, sync_s=0.0, defer_kv=False, roof=None,
                             async_sched=False, pressure=0, sampled=False, switch=0.0)
    assert kw["drafter"] == "g" and k == 6
    ruled = simulate(policy=psd_policy(policy, "g", k, kw["drafters"]), **kw)
    asked = simulate(policy=asked_in_python(psd_policy(policy, "g", k, kw["drafters"])), **kw)
    assert_same(ruled, asked)
    verify = ruled.steps[ruled.steps.phase == "verify"]
    assert verify.proposed_tokens.sum() > 0 and (verify.proposed_tokens <= 4 * verify.num_seqs).all()


def psd_policy(name: str, drafter: str, k: int, drafters: tuple[str, ...]):
    """A fresh policy: None (build's fixed policy at k), adaptive-k, or one asked in Python (POL_GIVEN) over
    `drafter` or, named `...-all`, over all `drafters` (the arms in reverse order, so they differ from the slots')."""
    if name == "fixed":
        return None
    if name == "asked":
        return asked_in_python(FixedPolicy(drafter, k))
    arms = list(drafters)[::-1] if name.endswith("-all") else [drafter]
    if name.startswith("plug-in"):
        return PlugInThompson(arms, k=k)
    if name == "adaptive-k":
        return make_policy({"name": "adaptive-k", "drafter": drafter, "k_max": k}, seed=0)
    spec = {"name": name.removesuffix("-all"), "drafters": arms, "k": k}
    if name.startswith("sliding"):
        spec.update(window=4, reward="be")
    if name.startswith("exp3"):
        spec["gamma"] = 0.3
    return make_policy(spec, seed=7)


def test_a_longer_psd_run_with_sync_and_chunked_prefill_keeps_the_invariants():
    traces = traces_with(20, 3, 0.7, False)
    wl = workload(traces, 300, rate=200.0, seed=3)
    kw = dict(traces=traces, wl=wl, mode="psd", k=4, cost=COSTS["autoregressive"], max_num_seqs=16,
              max_num_batched_tokens=256, chunked_prefill=True, psd=PSDConfig(split_min_batch=2, sync_s=2e-4))
    fast = simulate(**kw)
    assert fast.extras["psd_fallback_steps"] > 0
    assert (fast.steps["device"] == "drafter").any() and (fast.steps["phase"] == "sync").any()
    check_invariants(fast, wl.output_len.tolist(), 256)


def _psd_v1_case() -> dict:
    """A PSD run under vLLM V1's scheduler whose verify sides overrun a 16-token budget (k = 5, up to 8 per side)
    with a 1 ms engine-loop gap between busy steps."""
    traces = iid_traces(20, seed=11, rate=0.8, out=(20, 60), prompt=(2, 10))  # short prompts: decodes fill the budget
    wl = workload(traces, 60, rate=300.0, seed=11)
    return dict(traces=traces, wl=wl, mode="psd", k=5, cost=COSTS["fraction"], max_num_seqs=8, scheduler="vllm-v1",
                max_num_batched_tokens=16, chunked_prefill=True, step_overhead_s=1e-3,
                psd=PSDConfig(sync_s=2e-4))


def test_psd_vllm_v1_budget_cuts_and_engine_loop_gaps():
    kw = _psd_v1_case()
    fast = simulate(64, **kw)
    tgt = fast.steps[(fast.steps.device == "target") & (fast.steps.phase != "sync")]
    assert (tgt.batched_tokens <= 16).all() and (tgt.batched_tokens == 16).any()
    verify = tgt[tgt.phase.isin(["verify", "mixed"])]
    assert (verify.proposed_tokens % 5 != 0).any()  # k = 5 drafts each, except those cut to the budget
    s = fast.steps.groupby("step")
    gaps = np.round(s.start.min().to_numpy()[1:] - s.end.max().to_numpy()[:-1], 9)
    assert (gaps == 1e-3).sum() > len(gaps) // 2  # busy steps are 1 ms apart (the engine loop's gap)


def test_psd_vllm_v1_kernel_as_plain_python_gives_the_same_tables(tmp_path):
    """The PSD kernel under vLLM V1's scheduler with numba's JIT off (NUMBA_DISABLE_JIT=1, plain Python) gives the
    compiled tables bit for bit (the same IEEE operations in the same order; tolerance zero)."""
    code = """
import pickle
from tests.simulator.engine.test_compiled_psd import _psd_v1_case
from tests.simulator.engine.test_compiled_run import build
res = build(**_psd_v1_case()).simulate()
pickle.dump([(res.requests, res.steps, res.itl.tobytes())], open(OUT, "wb"))
"""
    for a, b in tables_jit_on_and_off(code, tmp_path):
        assert_same_run_tables(a, b)



@pytest.mark.parametrize("rules", ["mixed", "separate", "vllm-v1"])
@pytest.mark.parametrize("defer_kv", [False, True])
def test_psd_under_kv_pressure_preempts_and_keeps_the_invariants(rules, defer_kv):
    """KV for one of the four largest requests of two sub-batches of 4: the PSD kernel preempts by recompute (the
    newest running requests to the waiting queue's front, their proposals and sides dropped, no admission in that
    step: the hand-worked case is test_rules_prefill_kv.py's) and keeps the engine's invariants."""
    traces, drafters, wl, budget = drawn_case(3, 40, 0.6, False, "burst", 100.0, rules, 64)
    kw = dict(traces=traces, wl=wl, mode="psd", k=3, drafter="d", drafters=drafters, cost=COSTS[sorted(COSTS)[0]],
              kv_tokens=tight_kv(wl, 3, 16, 8, 0, 0, 3), max_num_seqs=4, block_size=16, max_num_batched_tokens=budget,
              chunked_prefill=rules == "vllm-v1", prefill="separate" if rules == "separate" else "mixed",
              psd=PSDConfig(defer_kv=defer_kv), **scheduler_of(rules))
    fast = simulate(**kw)
    check_invariants(fast, wl.output_len.tolist(), budget, rules == "vllm-v1")
    assert fast.requests.preemptions.sum() > 0

def test_psd_with_sampled_verification_accepts_fewer_than_greedy_replay():
    """Sampled verification under PSD: each verified side's kept drafts are checked against the server's generator
    when verified (rules/sampled.sample_group; the hand-worked cases are test_rules_psd.py's); the draws matter
    (greedy replay of the same traces accepts more), and the same seed gives the same tables."""
    traces, drafters, wl, budget = drawn_case(5, 40, 0.8, False, "burst", 100.0, "mixed", 4096)
    kw = dict(traces=with_tv(traces, 5), wl=wl, mode="psd", k=4, drafter="d", drafters=drafters,
              cost=COSTS[sorted(COSTS)[0]], max_num_seqs=4, max_num_batched_tokens=budget, psd=PSDConfig())
    fast = simulate(verification="sampled", **kw)
    assert_same(fast, simulate(verification="sampled", **kw))
    greedy = simulate(verification="greedy", **kw)
    assert fast.steps.accepted_tokens.sum() < greedy.steps.accepted_tokens.sum()


def test_psd_with_a_switching_cost_over_one_drafter_charges_nothing_and_keeps_the_last_drafter():
    """One drafter never switches, so a switching cost charges nothing under PSD (the same tables as without one);
    each verified request's last drafter is still written."""
    traces, drafters, wl, budget = drawn_case(7, 30, 0.6, False, "poisson", 200.0, "mixed", 4096)
    kw = dict(traces=traces, wl=wl, mode="psd", k=3, drafter="d", drafters=drafters, cost=COSTS[sorted(COSTS)[0]],
              max_num_seqs=4, max_num_batched_tokens=budget, psd=PSDConfig(), switch_cost_s=1e-3)
    res, last = _run(kw)
    assert (last == 0).any()
    assert_same(res, simulate(**{**kw, "switch_cost_s": 0.0}))


def _run(kw: dict) -> tuple:
    """(result, each request's last drafter) of one run."""
    from tests.simulator.engine.test_compiled_run import build

    sim = build(**kw)
    res = sim.simulate()
    return res, sim.server.state.last_drafter.copy()


@pytest.mark.parametrize("split_min", [0, 3])
def test_psd_at_k_0_drafts_nothing_and_decodes_a_token_per_step(split_min):
    """PSD under the fixed policy at k = 0 names no drafter: nothing is proposed or drafted, no step row names a
    drafter, each decoding request emits one token per step it takes part in (its side's turn, or every step of a
    fallback step: `split_min` 3 makes small batches plain SD), so a request decodes in output_len - 1 steps."""
    traces = traces_with(12, 4, 0.6, False)
    kw = dict(traces=traces, wl=workload(traces, 24, rate=150.0), mode="psd", k=0, max_num_seqs=6,
              psd=PSDConfig(split_min_batch=split_min))
    res, _ = _run(kw)
    s = res.steps
    assert (s.proposed_tokens == 0).all() and (s.drafters == "").all() and not (s.device == "drafter").any()
    verify = s[(s.device == "target") & (s.phase == "verify")]
    assert len(verify) > 0 and (verify.emitted_tokens == verify.num_seqs).all()
    rq = res.requests
    assert (rq.proposed_tokens == 0).all() and (rq.decode_steps == rq.output_len - 1).all()
    assert res.extras["psd_fallback_steps"] > 0  # steps with one side empty (or, split_min 3, a small batch)


@pytest.mark.parametrize("verification", ["greedy", "sampled"])
def test_a_psd_bandit_over_two_drafters_pays_each_switch_and_names_its_drafters(verification):
    """UCB over two drafters under PSD (drafter order g, d: not alphabetical): each side's drafting is priced per
    drafter and pays the switching cost once per drafter that a member last drafted with the other; a verify row
    names the drafters it verifies in drafter order, as an SD row does."""
    traces = traces_with(10, 3, 0.6, True)
    if verification == "sampled":
        traces = with_tv(traces, 4)
    wl = workload(traces, 24, rate=None)  # all at t = 0, KV for all: each step's batch is the same at any cost
    kw = dict(traces=traces, wl=wl, mode="psd", drafters=("g", "d"), max_num_seqs=24, psd=PSDConfig(sync_s=1e-4),
              verification=verification, switch_cost_s=2e-3,
              policy=make_policy({"name": "ucb", "drafters": ["d", "g"], "k": 3}, seed=0))
    paid, last = _run(kw)
    free = simulate(**{**kw, "switch_cost_s": 0.0,
                             "policy": make_policy({"name": "ucb", "drafters": ["d", "g"], "k": 3}, seed=0)})
    steps = paid.steps
    both = steps[(steps.phase == "verify") & (steps.drafters.str.contains("[+]"))]
    assert len(both) and (both.drafters == "g+d").all()
    draft, draft_free = steps[steps.phase == "draft"], free.steps[free.steps.phase == "draft"]
    assert set(draft.drafters) >= {"g", "d", "g+d"}
    assert set(last) == {0, 1}  # each request's last drafter, by index: g = 0, d = 1
    # the same drafting priced without the cost: each phase pays 2 ms per drafter that switches (none, one or both)
    assert (draft_free.drafters.values == draft.drafters.values).all()
    switches = ((draft.end - draft.start).values - (draft_free.end - draft_free.start).values) / 2e-3
    assert np.allclose(switches, np.round(switches), atol=1e-6) and set(np.round(switches)) == {0, 1, 2}
    assert (np.round(switches) <= draft.drafters.str.count("[+]").values + 1).all()


def test_psd_metasd_ucb_learns_from_its_bd_reward():
    """MetaSD-UCB under PSD with sampled verification: each verified proposal's BD reward (the block divergence over
    the positions it drafted, read before its tokens move them) updates its request's arm; drafter 'g' diverges
    little from the target (TV 0.05) and 'd' much (TV 0.8), so the rewards steer the choices to 'g'."""
    traces = traces_with(10, 5, 0.6, True)
    rng = np.random.default_rng(5)
    for t in traces:
        for name, d in list(t.drafters.items()):
            tv = np.full(len(d.acc_len), 0.05 if name == "g" else 0.8, np.float32) + rng.uniform(0, 0.1, len(d.acc_len))
            t.drafters[name] = DrafterTrace(d.acc_len, tv=tv.astype(np.float32), proposal_len=d.proposal_len)
    kw = dict(traces=traces, wl=workload(traces, 30, rate=None), mode="psd", drafters=("d", "g"), max_num_seqs=8,
              psd=PSDConfig(), verification="sampled",
              policy=make_policy({"name": "metasd-ucb", "drafters": ["d", "g"], "k": 3, "beta": 0.1}, seed=0))
    res, _ = _run(kw)
    draft = res.steps[res.steps.phase == "draft"]
    assert draft.drafters.str.count("g").sum() > 2 * draft.drafters.str.count("d").sum()


@pytest.mark.parametrize("rules", ["mixed", "separate", "vllm-v1"])
@pytest.mark.parametrize("pressure", [0, 2])
def test_a_psd_plug_in_is_called_and_told_what_the_tables_show(rules, pressure):
    """Under PSD a plug-in over one drafter is asked for the drafted side (and, in a fallback step, for the verify
    side's requests without a proposal) and told of the verified side: what it is told agrees with the tables
    (assert_told_what_the_tables_show)."""
    traces, drafters, wl, budget = drawn_case(5, 30, 0.7, False, "poisson", 200.0, rules, 32)

    class OneDrafter(Recorder):
        def drafters_used(self):
            return ("d",)

        def choose_batch(self, view):
            self.log.append(("choose", view.now, list(view.request_ids), view.positions.tolist(),
                             [view.step_time_estimate("d", k) for k in range(4)]))
            ks = np.array([(int(p) + j) % 4 for j, p in enumerate(view.positions)], dtype=np.int64)
            return np.where(ks == 3, -1, 0).astype(np.int64), ks

    kw = dict(traces=traces, wl=wl, mode="psd", drafters=drafters, max_num_seqs=4, block_size=4,
              max_num_batched_tokens=budget, kv_tokens=tight_kv(wl, 3, 4, 8, 1, pressure=pressure),
              chunked_prefill=rules == "vllm-v1", prefill="separate" if rules == "separate" else "mixed",
              **scheduler_of(rules), psd=PSDConfig(split_min_batch=2, sync_s=1e-4))
    assert_told_what_the_tables_show(OneDrafter, kw)
