"""The compiled engine (simulator/engine/compiled_run.py and its kernels) over random configs (AR and SD, k and
drafters with and without n-gram proposal caps, every draft cost kind, mixed/chunked/separate prefill and vLLM V1's
scheduler (decode budget, engine-loop gap, EAGLE lookahead KV slots, async scheduling), Poisson, burst and
closed-loop arrivals, lengths, max_num_seqs, block sizes, KV tight enough to preempt, linear, roofline, structured or
table profiles): a run in small segments gives the tables of the same run in one call, and keeps the invariants;
each built-in policy's compiled rule chooses as the policy itself asked in Python; profiles the kernels cannot price
are refused; an early stop returns the full run's finishes."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle.registry  # noqa: F401  (registers the oracles make_policy names)
from policies.adaptive_k import AdaptiveKPolicy
from policies.base import Choice, FixedPolicy, Policy
from policies.registry import make_policy
from policies.thompson import ThompsonPolicy
from simulator.engine import compiled_run
from simulator.engine.arrivals import PushedArrivals
from simulator.costs.draft_cost import DraftCost
from simulator.engine.simulation import ServerSimulation
from simulator.costs.latency import LinearProfile, resolve_profile
from simulator.costs.roofline import RooflineProfile
from simulator.costs.step_model import ROOFLINE_TERMS, StructuredProfile
from simulator.engine.server import Server
from tests.simulator.engine.engine_fixtures import (COSTS, PSDConfig, assert_same_run_tables, inputs, linear, scenario,
                                                 tables_jit_on_and_off, tight_kv, traces_with, workload)
from tests.simulator.engine.test_rules_invariants import check_invariants
from traces.bundle import DrafterTrace, RequestTrace
from traces.catalog import get_gpu, get_model


def build(traces, wl, *, mode="sd", k=3, drafter="d", drafters=("d",), cost=None, policy=None, kv_tokens=10**6,
          psd=None, switch_cost_s=0.0, target=None, kinds=None, proposer=None, proposer_for=None, **server):
    """`proposer`: an `engine_step` cost (vLLM V1's proposer) for `drafter` (or each drafter of `proposer_for`), the
    others keeping `cost`."""
    if policy is None and mode != "ar":
        policy = FixedPolicy(drafter, k)
    costs = {d: cost or COSTS["fraction"] for d in drafters}
    if proposer is not None:
        for d in proposer_for or (drafter,):
            costs[d] = proposer
    server.setdefault("max_num_seqs", 8)
    sc = scenario(mode, policy, target=target or linear(1e-7, 2e-5, 5e-3), costs=costs, kv_tokens=kv_tokens,
                  psd=psd, switch_cost_s=switch_cost_s, **server)
    sim_inputs = inputs(traces, wl, drafters)
    if kinds:  # each drafter's bundle kind: vLLM V1's lookahead KV reads it
        sim_inputs = dataclasses.replace(sim_inputs, drafter_kinds=dict(kinds))
    return ServerSimulation(sc, sim_inputs)


def simulate(segment: int | None = None, **kw):
    """One simulation of build(**kw); `segment`: the kernel's step rows per call (small: the run in many calls)."""
    old = compiled_run.SEGMENT_ROWS
    compiled_run.SEGMENT_ROWS = old if segment is None else segment
    try:
        return build(**kw).simulate()
    finally:
        compiled_run.SEGMENT_ROWS = old


def assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert a.itl.tobytes() == b.itl.tobytes()
    assert a.extras == b.extras


def assert_ruled_as_asked(spec: dict, kw: dict, segment: int | None = None, seed: int = 0) -> None:
    """The policy of `spec` run by the kernel's rule and asked in Python at each step (asked_in_python), both
    compiled (`segment` rows per kernel call): the same tables bit for bit. Only the choosing differs between the two
    runs, so a difference is the kernel's policy rule."""
    ruled = simulate(segment, policy=make_policy(spec, seed=seed), **kw)
    asked = simulate(segment, policy=asked_in_python(make_policy(spec, seed=seed)), **kw)
    assert_same(ruled, asked)
    return ruled


# roofline profiles the properties draw: targets (dense and MoE, small to large) and drafters (small models)
ROOFLINE_TARGETS = ("llama3.1-8b", "qwen3-235b-a22b", "qwen3-14b", "llama3.2-1b", "vicuna-33b")
ROOFLINE_DRAFTERS = ("qwen3-0.6b", "smollm2-135m", "llama3.2-1b")
GPUS = ("h100-80gb", "h200-141gb", "a100-80gb", "l40s")


def roofline(model: str, gpu: str, tp: int, mfu: float, bw: float, floor_s: float, overlap: str = "step",
             host_s: float = 0.0) -> RooflineProfile:
    """A roofline profile; a TP degree that does not divide the model's heads falls back to 1."""
    m = get_model(model)
    return RooflineProfile(m, get_gpu(gpu), tp=tp if m.tp_problem(tp) is None else 1, mfu=mfu, bandwidth_util=bw,
                           floor_s=floor_s, overlap=overlap, host_s=host_s)


# structured step models the properties draw: each term's typical seconds (ROOFLINE_TERMS order: const, num_seqs,
# draft_tokens, decode_kv, prefill_tokens, prefill_seqs, prefill_attn, prefill_step, verify_step, flop_tokens)
STRUCTURED_SCALE = np.array([5e-3, 5e-5, 2e-5, 5e-8, 2e-5, 2e-4, 1e-9, 2e-3, 1e-3, 3e-5])


def structured(form: str, seed: int, scale: float = 1.0) -> StructuredProfile:
    """A structured step model of `form` with coefficients drawn from `seed`: the constant and each other term
    present with probability 0.8, up to twice its typical size (the roofline form's compute term binds on the larger
    steps). The constant keeps every step's price above 0, which an exact plan's costs must be (min-time refuses a
    free step: test_min_time_refuses_step_estimates_that_cost_nothing)."""
    rng = np.random.default_rng(seed)
    size = rng.uniform(0.0, 2.0, len(ROOFLINE_TERMS))
    present = rng.random(len(ROOFLINE_TERMS)) < 0.8
    present[0] = True
    c = STRUCTURED_SCALE * scale * size * present
    terms = ROOFLINE_TERMS if form == "roofline" else ROOFLINE_TERMS[:-1]
    return StructuredProfile(f"s{seed}", {t: float(v) for t, v in zip(terms, c)}, form)


# shipped table profiles the properties draw (by position): CPU and GPU targets, each triangulated, and a drafter
# table whose points span no volume (its linear fit answers everywhere)
TABLES = ("smollm2-135m-instruct-cpu-table", "qwen3-8b-h200-hf-bf16-table", "qwen3-0.6b-h200-hf-bf16-drafter-table")

# (kind, model, gpu, tp, mfu, bandwidth_util, floor_s, overlap, host_s) a roofline profile, ("structured", kind,
# form, seed) a structured step model, ("table", kind, i) a shipped table profile; None a linear profile
profiles = st.one_of(st.none(), st.tuples(st.just("table"), st.sampled_from(["target", "drafter", "both"]),
                                          st.integers(0, len(TABLES) - 1)), st.tuples(
    st.sampled_from(["target", "target", "drafter", "both"]), st.integers(0, 4), st.sampled_from(GPUS),
    st.sampled_from([1, 2, 4]), st.floats(0.05, 1.0), st.floats(0.05, 1.0), st.sampled_from([0.0, 0.0, 2e-3, 6e-3]),
    st.sampled_from(["step", "op"]), st.sampled_from([0.0, 0.0, 5e-4])), st.tuples(
    st.just("structured"), st.sampled_from(["target", "target", "drafter", "both"]),
    st.sampled_from(["linear", "roofline"]), st.integers(0, 10_000)))


def with_profiles(kw: dict, drawn, cost: str) -> dict:
    """`kw` with the drawn roofline, structured or table target and/or drafter profile (the drafter's: for a
    profiled cost kind, or a whole_proposal cost of its own where the drawn kind has none)."""
    if drawn is None:
        return kw
    kw = dict(kw)
    base = COSTS[cost]
    kind_of = base.kind if base.profile is not None else "whole_proposal"
    if drawn[0] == "table":
        _, kind, i = drawn
        if kind in ("target", "both"):
            kw["target"] = resolve_profile(TABLES[i])
        if kind in ("drafter", "both"):
            kw["cost"] = DraftCost(kind_of, profile=resolve_profile(TABLES[(i + 1) % len(TABLES)]))
        return kw
    if drawn[0] == "structured":
        _, kind, form, seed = drawn
        if kind in ("target", "both"):
            kw["target"] = structured(form, seed)
        if kind in ("drafter", "both"):
            kw["cost"] = DraftCost(kind_of, profile=structured(form, seed + 1, scale=0.1))
        return kw
    kind, model, gpu, tp, mfu, bw, floor_s, overlap, host_s = drawn
    if kind in ("target", "both"):
        kw["target"] = roofline(ROOFLINE_TARGETS[model], gpu, tp, mfu, bw, floor_s, overlap, host_s)
    if kind in ("drafter", "both"):
        prof = roofline(ROOFLINE_DRAFTERS[model % 3], gpu, 1, mfu, bw, floor_s / 10, overlap, host_s / 10)
        # the drafter's host term per drafting phase (draft_cost.host_s) drawn with the roofline's host_s
        kw["cost"] = DraftCost(kind_of, profile=prof, host_s=2 * host_s)
    return kw


def with_tv(traces, seed: int):
    """The traces with a TV distance per position for every drafter (sampled verification reads it)."""
    rng = np.random.default_rng(seed)
    for t in traces:
        for name, d in list(t.drafters.items()):
            t.drafters[name] = DrafterTrace(d.acc_len, tv=rng.uniform(0.0, 1.0, len(d.acc_len)).astype(np.float32),
                                            proposal_len=d.proposal_len)
    return traces


def scheduler_of(rules: str, async_scheduling: bool = False) -> dict:
    """The server's scheduler setting of a drawn prefill rule: vLLM V1's (chunked, mixed; async scheduling when
    drawn) or the default."""
    if rules != "vllm-v1":
        return {}
    return {"scheduler": "vllm-v1", **({"async_scheduling": True} if async_scheduling else {})}


def drawn_case(seed: int, n: int, rate: float, ngram: bool, arrivals: str, req_rate: float, rules: str, budget: int):
    """(traces, drafter names, workload, token budget) of one drawn equality case, shared by the SD and PSD tests."""
    traces = traces_with(max(1, n // 2), seed, rate, ngram)
    drafters = ("d", "g") if ngram else ("d",)
    wl = workload(traces, n, rate=None if arrivals != "poisson" else req_rate, seed=seed,
                  clients=1 + seed % 4 if arrivals == "closed" else 0, think=0.01 if seed % 3 == 0 else 0.0)
    if rules not in ("chunked", "vllm-v1") and budget < int(wl.prompt_len.max()):
        # without chunked prefill a prompt over the budget is refused up front; just above it, decode and draft
        # tokens can leave too little budget for the next prompt
        budget = int(wl.prompt_len.max()) + seed % 9
    return traces, drafters, wl, budget


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "sd"]), seed=st.integers(0, 10_000), n=st.integers(1, 40),
       rate=st.floats(0.0, 0.9), ngram=st.booleans(), k=st.integers(0, 5), cost=st.sampled_from(sorted(COSTS)),
       rules=st.sampled_from(["mixed", "chunked", "separate", "vllm-v1"]), budget=st.sampled_from([16, 64, 4096]),
       arrivals=st.sampled_from(["poisson", "burst", "closed"]), req_rate=st.floats(5.0, 500.0),
       max_num_seqs=st.integers(1, 12), block_size=st.sampled_from([1, 4, 16]), slack=st.integers(0, 3),
       overhead=st.sampled_from([0.0, 1e-4, 0.0012]), segment=st.sampled_from([4, 1 << 16]), roof=profiles,
       eagle=st.booleans(), async_sched=st.booleans(), proposer=st.booleans(), sampled=st.booleans(),
       pressure=st.sampled_from([0, 0, 1, 3]))
def test_a_run_in_segments_equals_the_run_in_one_call_and_keeps_the_invariants(
        mode, seed, n, rate, ngram, k, cost, rules, budget, arrivals, req_rate, max_num_seqs, block_size, slack,
        overhead, segment, roof, eagle, async_sched, proposer, sampled, pressure):
    """The kernel run in segments of `segment` step rows (it returns when its buffers are full and continues from its
    state) gives the tables of the same run in one call, and the run keeps the engine's invariants
    (test_rules_invariants.check_invariants). `eagle`: drafter 'd' is an EAGLE drafter (vLLM V1 reserves k lookahead KV
    slots per running request for it; 'g' is n-gram, none); `async_sched`: vLLM V1 with async scheduling (the
    engine-loop gap hidden by the forward); `proposer`: the drafter is priced as vLLM V1's proposer, once per engine
    step (an `engine_step` cost, on the drawn drafter profile when there is one); `sampled`: sampled verification (1 -
    tv per draft, the server's generator's draws); `pressure`: KV for fewer requests than max_num_seqs at their largest
    (preemption by recompute: the newest running requests back to the waiting queue's front)."""
    traces, drafters, wl, budget = drawn_case(seed, n, rate, ngram, arrivals, req_rate, rules, budget)
    if sampled:
        traces = with_tv(traces, seed)
    drafter = "g" if ngram and seed % 2 else "d"
    kind = ("draft_model" if seed % 5 == 0 else "eagle") if eagle else "ngram"  # drafter 'd' (both keep KV)
    look = k if mode == "sd" and rules == "vllm-v1" and eagle and drafter == "d" else 0
    kw = dict(traces=traces, wl=wl, mode=mode, k=k, drafter=drafter, drafters=drafters,
              cost=COSTS[cost], kv_tokens=tight_kv(wl, k if mode == "sd" else 0, block_size, max_num_seqs, slack, look,
                                                   pressure),
              max_num_seqs=max_num_seqs, block_size=block_size, step_overhead_s=overhead,
              max_num_batched_tokens=budget, chunked_prefill=rules in ("chunked", "vllm-v1"),
              prefill="separate" if rules == "separate" else "mixed", **scheduler_of(rules, async_sched),
              kinds={"d": kind, "g": "ngram"}, verification="sampled" if sampled else "greedy")
    kw = with_profiles(kw, roof, cost)
    if proposer:  # at k = 0 the fixed policy drafts with nobody: no proposer runs
        kw["proposer"] = DraftCost("engine_step", profile=kw["cost"].profile or linear(1e-8, 5e-6, 2e-4))
    whole = simulate(**kw)
    assert_same(simulate(segment, **kw), whole)
    check_invariants(whole, wl.output_len.tolist(), budget, rules == "vllm-v1")


def policy_spec(name: str, ngram: bool, seed: int, k_max: int, prior: float, weight: float, decay: float, scope: str,
                min_match: int, k_ngram: int, k_eagle: int, reward: str = "be") -> dict:
    """A compiled policy's config: adaptive-k on 'd' or (with n-gram lengths) 'g', combine-match of 'g' and 'd', or UCB
    (`reward`: BE, or MetaSD's BD where the traces carry tv) over 'd' and, with n-gram lengths, 'g'."""
    if name == "adaptive-k":
        return {"name": name, "drafter": "g" if ngram and seed % 2 else "d", "k_max": k_max, "prior": prior,
                "prior_weight": weight, "decay": decay, "scope": scope}
    if name == "k-by-batch":  # k from the batch size: ranges cut at min_match and k_ngram + 2, k 0 allowed at first
        cut1, cut2 = min_match, min_match + k_ngram
        return {"name": name, "drafter": "g" if ngram and seed % 2 else "d", "ranges": [
            {"min_batch": 1, "max_batch": cut1, "k": k_max % 3}, {"min_batch": cut1 + 1, "max_batch": cut2,
                                                                   "k": k_eagle},
            {"min_batch": cut2 + 1, "max_batch": None, "k": k_ngram}]}
    if name in BANDITS:  # arms in either order; each one's parameters from the prior and weight draws
        arms = (["g", "d"] if seed % 2 else ["d", "g"]) if ngram else ["d"]
        spec = {"name": name, "drafters": arms, "k": k_ngram, "scope": scope, "reward": reward}
        return spec | {"ucb": {"beta": 2.0 * prior}, "metasd-ucb": {"beta": 2.0 * prior},
                       "discounted-ucb": {"beta": 2.0 * prior, "gamma": 0.5 + decay / 2.0},
                       "sliding-window-ucb": {"beta": 2.0 * prior, "window": 1 + int(weight) % 6},
                       "epsilon-greedy": {"epsilon": prior}, "random-drafter": {},
                       "thompson": {"prior_alpha": weight, "prior_beta": 0.1 + prior},
                       "exp3": {"gamma": 0.05 + 0.95 * prior}}[name]
    if name == "combine-adaptive":  # priors and cost ratios from the draws (the ratios price the plain loop only)
        return {"name": name, "ngram": "g", "eagle": "d", "k_ngram": k_ngram, "k_eagle": k_eagle,
                "prior_ngram": prior, "prior_eagle": 1.0 - prior, "prior_weight": weight, "decay": decay}
    return {"name": name, "ngram": "g", "eagle": "d", "k_ngram": k_ngram, "k_eagle": k_eagle, "min_match": min_match}


# the bandits over drafters the kernel runs (POL_BANDIT): UCB's family and the ones that draw from their generator
BANDITS = ("ucb", "metasd-ucb", "discounted-ucb", "sliding-window-ucb", "epsilon-greedy", "random-drafter",
           "thompson", "exp3")


# the random configs of the policies' tests below: every built-in policy the kernel runs by its own rule
POLICY_CASES = dict(
    policy=st.sampled_from(["adaptive-k", "adaptive-k", "combine-match", "combine-adaptive", "k-by-batch", *BANDITS]),
    seed=st.integers(0, 10_000), n=st.integers(1, 40), rate=st.floats(0.0, 0.9), ngram=st.booleans(),
    cost=st.sampled_from(sorted(COSTS)),
    rules=st.sampled_from(["mixed", "chunked", "separate", "vllm-v1"]), budget=st.sampled_from([16, 64, 4096]),
    arrivals=st.sampled_from(["poisson", "burst", "closed"]), req_rate=st.floats(5.0, 500.0),
    max_num_seqs=st.integers(1, 12), block_size=st.sampled_from([1, 4, 16]), slack=st.integers(0, 3),
    overhead=st.sampled_from([0.0, 1e-4, 0.0012]), segment=st.sampled_from([4, 1 << 16]),
    k_max=st.integers(1, 8), prior=st.floats(0.0, 1.0), weight=st.floats(0.1, 8.0), decay=st.floats(0.3, 1.0),
    scope=st.sampled_from(["request", "shared"]), min_match=st.integers(1, 4), k_ngram=st.integers(1, 6),
    k_eagle=st.integers(1, 5), roof=profiles, eagle=st.booleans(), async_sched=st.booleans(),
    sampled=st.booleans(), switch=st.sampled_from([0.0, 0.0, 7e-4]), pressure=st.sampled_from([0, 0, 1, 3]),
    proposer=st.sampled_from(["", "d", "all"]))


def policy_case(policy, seed, n, rate, ngram, cost, rules, budget, arrivals, req_rate, max_num_seqs, block_size,
                slack, overhead, k_max, prior, weight, decay, scope, min_match, k_ngram, k_eagle, roof, eagle,
                async_sched, sampled, switch, pressure, proposer) -> tuple[dict, dict]:
    """One drawn case of POLICY_CASES: the policy's spec and the run's build() arguments."""
    ngram = ngram or policy.startswith("combine")  # they draft with the n-gram 'g'; combine-match reads its lengths
    traces = traces_with(max(1, n // 2), seed, rate, ngram)
    if policy == "combine-adaptive" and seed % 3 == 0:  # 'g' keeps its acceptance but loses its match lengths
        traces = without_match_lengths(traces, "g")
    if sampled:  # sampled verification: the learning policies see the drawn acceptance
        traces = with_tv(traces, seed)
    drafters = ("d", "g") if ngram else ("d",)
    wl = workload(traces, n, rate=None if arrivals != "poisson" else req_rate, seed=seed,
                  clients=1 + seed % 4 if arrivals == "closed" else 0, think=0.01 if seed % 3 == 0 else 0.0)
    if rules not in ("chunked", "vllm-v1") and budget < int(wl.prompt_len.max()):
        budget = int(wl.prompt_len.max()) + seed % 9
    spec = policy_spec(policy, ngram, seed, k_max, prior, weight, decay, scope, min_match, k_ngram, k_eagle,
                       "bd" if sampled and seed % 2 else "be")  # BD reads the tv sampled runs carry
    look = k_max if policy == "adaptive-k" else k_ngram if policy in BANDITS else max(k_ngram, k_eagle, k_max % 3)
    # 'd' an EAGLE drafter (when drawn): under vLLM V1 every running request holds `look` lookahead slots when the
    # policy uses it (adaptive-k on 'g' does not)
    uses_d = not (policy in ("adaptive-k", "k-by-batch") and spec["drafter"] == "g")
    slots = look if rules == "vllm-v1" and eagle and uses_d else 0
    kw = dict(traces=traces, wl=wl, drafters=drafters, cost=COSTS[cost],
              kv_tokens=tight_kv(wl, look, block_size, max_num_seqs, slack, slots, pressure), max_num_seqs=max_num_seqs,
              block_size=block_size, step_overhead_s=overhead, max_num_batched_tokens=budget,
              chunked_prefill=rules in ("chunked", "vllm-v1"), prefill="separate" if rules == "separate" else "mixed",
              **scheduler_of(rules, async_sched), kinds={"d": "eagle" if eagle else "ngram", "g": "ngram"},
              verification="sampled" if sampled else "greedy", switch_cost_s=switch)
    kw = with_profiles(kw, roof, cost)
    if proposer:
        kw["proposer"] = DraftCost("engine_step", profile=kw["cost"].profile or linear(1e-8, 5e-6, 2e-4))
        kw["proposer_for"] = drafters if proposer == "all" else ("d",)
    return spec, kw


@settings(max_examples=100, deadline=None)
@given(**POLICY_CASES)
def test_each_compiled_policy_rule_chooses_as_the_policy_itself(segment, **case):
    """Each built-in policy the kernel runs by its own rule (adaptive-k, combine-match, combine-adaptive, k-by-batch
    and every bandit: its choices, updates, step-time estimates and generator draws) against the same policy asked
    in Python at each step (asked_in_python: the kernel pauses for its own choose_batch and tells it observe_batch,
    start_request and finish_request), both compiled, over POLICY_CASES' random configs: the same tables bit for
    bit. Only the choosing differs between the two runs, so a difference is the kernel's policy rule."""
    spec, kw = policy_case(**case)
    assert_ruled_as_asked(spec, kw, segment)


@pytest.mark.parametrize("scope", ["request", "shared"])
@pytest.mark.parametrize("name", BANDITS)
def test_each_bandit_rule_chooses_as_the_bandit_itself(name, scope):
    """Every bandit the kernel runs, its parameters off their defaults, per-request or shared statistics, over two
    drafters with up to 6 requests drafting per step (a shared drawing bandit draws once per request, in batch order)
    and a switching cost: the kernel's rule and the bandit asked in Python at each step give the same tables."""
    traces = with_tv(traces_with(10, 4, 0.6, True), 4)
    wl = workload(traces, 30, rate=200.0, seed=4)
    spec = {"name": name, "drafters": ["g", "d"], "k": 3, "scope": scope} | {
        "ucb": {"beta": 0.7}, "metasd-ucb": {"beta": 0.7, "reward": "bd"}, "discounted-ucb": {"gamma": 0.8},
        "sliding-window-ucb": {"window": 3, "reward": "bd"}, "epsilon-greedy": {"epsilon": 0.4},
        "random-drafter": {}, "thompson": {"prior_alpha": 2.0, "prior_beta": 0.5}, "exp3": {"gamma": 0.3}}[name]
    kw = dict(traces=traces, wl=wl, drafters=("d", "g"), max_num_seqs=6, switch_cost_s=3e-4,
              verification="sampled")
    ruled = assert_ruled_as_asked(spec, kw, seed=3)
    assert {"d", "g"} <= set("+".join(ruled.steps.drafters).split("+"))  # both arms drafted
    if scope == "request" or name in ("epsilon-greedy", "random-drafter", "thompson", "exp3"):  # a choice per request
        assert (ruled.steps.drafters == "d+g").any()



@pytest.mark.parametrize("spec", [
    {"name": "adaptive-k", "drafter": "d", "k_max": 5, "scope": "request"},
    {"name": "adaptive-k", "drafter": "g", "k_max": 5, "scope": "shared", "prior": 0.3, "decay": 0.7},
    {"name": "k-by-batch", "drafter": "d", "ranges": [{"min_batch": 1, "max_batch": 2, "k": 0},
                                                      {"min_batch": 3, "max_batch": None, "k": 4}]},
    {"name": "combine-match", "ngram": "g", "eagle": "d", "k_ngram": 6, "k_eagle": 3, "min_match": 2},
    {"name": "combine-adaptive", "ngram": "g", "eagle": "d", "k_ngram": 6, "k_eagle": 3, "prior_ngram": 0.2},
    {"name": "combine-adaptive", "ngram": "g", "eagle": "d", "k_ngram": 6, "k_eagle": 2, "prior_ngram": 0.95,
     "prior_eagle": 0.05, "prior_weight": 50.0},
    {"name": "oracle-k", "drafter": "d", "plan": "greedy", "k_max": 5},
    {"name": "oracle-k", "drafter": "g", "plan": "min-steps", "k_max": 4},
    {"name": "oracle-k", "drafter": "d", "plan": "min-time", "k_max": 4},
    {"name": "oracle-combine", "ngram": "g", "eagle": "d", "costs": "reference", "plan": "min-steps"},
    {"name": "oracle-combine", "ngram": "g", "eagle": "d", "costs": "honest", "switch_cost_s": 3e-4},
    {"name": "oracle-best-drafter", "drafters": ["g", "d"], "k_max": 4, "switch_cost_s": 3e-4},
    {"name": "oracle-best-drafter", "drafters": ["d", "g"], "plan": "min-steps", "k_max": 4},
    {"name": "oracle-best-fixed", "drafters": ["g", "d"], "k": 3, "cost_ratios": {"g": 0.02, "d": 0.1}}],
    ids=lambda spec: "-".join(str(v) for v in spec.values() if isinstance(v, str)))
def test_each_policy_and_oracle_rule_chooses_as_the_policy_itself(spec):
    """adaptive-k, k-by-batch, combine-match and combine-adaptive (n-gram k capped by match lengths of 0-4 under
    k_ngram 6) and the oracles the kernel follows (by position, their plans, the greedy oracle's estimates): the
    kernel's rule and the policy asked in Python at each step give the same tables, with a switching cost."""
    traces = traces_with(10, 4, 0.6, True)
    wl = workload(traces, 30, rate=200.0, seed=4)
    kw = dict(traces=traces, wl=wl, drafters=("d", "g"), max_num_seqs=6, switch_cost_s=3e-4)
    ruled = assert_ruled_as_asked(spec, kw, seed=3)
    assert ruled.steps.proposed_tokens.sum() > 0

def oracle_spec(name: str, ngram: bool, seed: int, plan: str, k_max: int | None, switch: float = 0.0) -> dict:
    """An oracle that chooses by position alone: oracle-k (greedy or min-steps) on 'd' or, with n-gram lengths, 'g';
    oracle-combine (reference costs, greedy or min-steps), oracle-best-drafter (min-steps) and oracle-best-fixed (one
    drafter per request at k_max, or 2, by its replayed rounds and cost ratio) over 'g' and 'd'; or the greedy
    oracle, which weighs each drafter's oracle k by the step's time estimate and its own switching cost `switch`:
    oracle-combine `honest` and oracle-best-drafter (greedy); or, with plan min-time, oracle-k, oracle-combine and
    oracle-best-drafter following exact plans priced at each request's first decode step."""
    if name == "oracle-combine-honest":
        return {"name": "oracle-combine", "ngram": "g", "eagle": "d", "costs": "honest", "k_max": k_max,
                "switch_cost_s": switch}
    if name == "oracle-best-drafter-greedy":
        return {"name": "oracle-best-drafter", "drafters": ["g", "d"] if seed % 2 else ["d", "g"], "k_max": k_max,
                "switch_cost_s": switch}
    if name == "oracle-best-fixed":
        return {"name": name, "drafters": ["g", "d"] if seed % 2 else ["d", "g"], "k": k_max or 2,
                "cost_ratios": {"g": 0.01 * (seed % 5), "d": 0.1}}
    if name == "oracle-k":
        return {"name": name, "drafter": "g" if ngram and seed % 2 else "d", "plan": plan, "k_max": k_max}
    if name == "oracle-combine":
        return {"name": name, "ngram": "g", "eagle": "d", "costs": "reference", "plan": plan, "k_max": k_max}
    return {"name": name, "drafters": ["g", "d"] if seed % 2 else ["d", "g"],
            "plan": "min-steps" if plan == "greedy" else plan, "k_max": k_max}


@settings(max_examples=110, deadline=None)
@given(policy=st.sampled_from(["oracle-k", "oracle-k", "oracle-combine", "oracle-best-drafter", "oracle-best-fixed",
                               "oracle-combine-honest", "oracle-best-drafter-greedy"]),
       plan=st.sampled_from(["greedy", "min-steps", "min-time"]), k_max=st.sampled_from([None, 1, 3, 6]),
       seed=st.integers(0, 10_000), n=st.integers(1, 40), rate=st.floats(0.0, 0.9), ngram=st.booleans(),
       cost=st.sampled_from(sorted(COSTS)), rules=st.sampled_from(["mixed", "chunked", "separate", "vllm-v1"]),
       budget=st.sampled_from([16, 64, 4096]), arrivals=st.sampled_from(["poisson", "burst", "closed"]),
       req_rate=st.floats(5.0, 500.0), max_num_seqs=st.integers(1, 12), block_size=st.sampled_from([1, 4, 16]),
       slack=st.integers(0, 3), segment=st.sampled_from([4, 1 << 16]), roof=profiles,
       pressure=st.sampled_from([0, 0, 2]), switch=st.sampled_from([0.0, 0.0, 4e-4]), proposer=st.booleans())
def test_each_oracle_rule_chooses_as_the_oracle_itself(policy, plan, k_max, seed, n, rate, ngram, cost, rules, budget,
                                                       arrivals, req_rate, max_num_seqs, block_size, slack, segment,
                                                       roof, pressure, switch, proposer):
    """The kernel reads an oracle's table of choices by position (Replay.choice_slot / choice_k, from its
    position_choices); the greedy oracle's each drafter's oracle k by position (Replay.slot_k, from its oracle_ks),
    weighed by the step-time estimates (tokens_per_time, with its switching cost after a change of drafter); plan
    min-time's exact plans made from the estimates at each request's first decode (PolicyState.plan_*): over random
    configs, the same tables as the oracle asked in Python each step (its own choose_batch, its estimates the
    kernel's)."""
    ngram = ngram or policy != "oracle-k"  # the two-drafter oracles read 'g', which has n-gram match lengths
    traces, drafters, wl, budget = drawn_case(seed, n, rate, ngram, arrivals, req_rate, rules, budget)
    spec = oracle_spec(policy, ngram, seed, plan, k_max, switch)
    look = max(1, max(int(t.drafters[d].acc_len.max()) for t in traces for d in drafters) if k_max is None else k_max)
    if policy == "oracle-best-fixed":
        look = spec["k"]
    kw = dict(traces=traces, wl=wl, drafters=drafters, cost=COSTS[cost],
              kv_tokens=tight_kv(wl, look, block_size, max_num_seqs, slack, pressure=pressure),
              max_num_seqs=max_num_seqs,
              block_size=block_size, max_num_batched_tokens=budget, chunked_prefill=rules in ("chunked", "vllm-v1"),
              prefill="separate" if rules == "separate" else "mixed", **scheduler_of(rules))
    kw = with_profiles(kw, roof, cost)
    if proposer and "d" in make_policy(spec, seed=0).drafters_used():  # 'd' priced as vLLM V1's proposer
        kw["proposer"] = DraftCost("engine_step", profile=kw["cost"].profile or linear(1e-8, 5e-6, 2e-4))
    assert_ruled_as_asked(spec, kw, segment)


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(ROOFLINE_TARGETS + ROOFLINE_DRAFTERS), gpu=st.sampled_from(GPUS),
       tp=st.sampled_from([1, 2, 4]), mfu=st.floats(0.01, 1.0), bw=st.floats(0.01, 1.0),
       floor_s=st.sampled_from([0.0, 1e-3, 1e-2]), latency=st.floats(0.0, 1e-4), num_seqs=st.integers(0, 512),
       batched_tokens=st.integers(-1, 20_000), kv_tokens=st.integers(0, 2_000_000),
       overlap=st.sampled_from(["step", "op"]), host_s=st.sampled_from([0.0, 3e-4, 1.7e-3]))
def test_the_kernels_roofline_is_the_profiles_step_time_bit_for_bit(model, gpu, tp, mfu, bw, floor_s, latency,
                                                                    num_seqs, batched_tokens, kv_tokens, overlap,
                                                                    host_s):
    """compiled_kernel._price on a roofline record (compiled_run.profile_terms) against RooflineProfile.step_time,
    over batch shapes well past the property runs' (MoE weight reads past where every expert is touched, large KV,
    every TP)."""
    import simulator.engine.compiled_kernel as ker

    prof = dataclasses.replace(roofline(model, gpu, tp, mfu, bw, floor_s, overlap, host_s), allreduce_latency_s=latency)
    got = ker._price(compiled_run.profile_terms(prof), num_seqs, batched_tokens, kv_tokens)
    want = prof.step_time(num_seqs, batched_tokens, kv_tokens)
    assert np.float64(got).tobytes() == np.float64(want).tobytes(), (got, want)


def test_an_moe_whose_experts_are_rarely_all_touched_runs_compiled():
    """An MoE routing 8 of 200,000 experts (its weight reads still growing past 200,000 batched tokens) runs, each AR
    step lasting the profile's own step time for its batch (no step overhead)."""
    traces = traces_with(6, 1, 0.6, False)
    prof = RooflineProfile(dataclasses.replace(get_model("qwen3-235b-a22b"), num_experts=200_000),
                           get_gpu("h100-80gb"), tp=8)
    assert prof.weight_bytes_read(10**5) < prof.weight_bytes_read(2 * 10**5) < prof.terms.weight_bytes
    res = simulate(traces=traces, wl=workload(traces, 12, rate=100.0), target=prof, mode="ar")
    rows = res.steps[res.steps.device == "target"]
    want = [prof.step_time(r.num_seqs, r.batched_tokens, r.kv_tokens) for r in rows.itertuples()]
    assert len(rows) > 12
    np.testing.assert_allclose((rows.end - rows.start).to_numpy(), want, rtol=1e-9)


@settings(max_examples=150, deadline=None)
@given(table=st.sampled_from(TABLES), num_seqs=st.integers(0, 512), batched_tokens=st.integers(0, 20_000),
       kv_tokens=st.integers(0, 2_000_000), at_measured=st.integers(-1, 200))
def test_the_kernels_table_is_the_profiles_step_time_bit_for_bit(table, num_seqs, batched_tokens, kv_tokens,
                                                                  at_measured):
    """compiled_kernel._price on a table record (compiled_run.profile_terms: the triangulation and linear fit)
    against TableProfile.step_time, inside the measured points (`at_measured`: one of them) and far outside them."""
    import simulator.engine.compiled_kernel as ker

    prof = resolve_profile(table)
    if 0 <= at_measured < len(prof.measurements):
        m = prof.measurements[at_measured]
        num_seqs, batched_tokens, kv_tokens = m.num_seqs, m.batched_tokens, m.kv_tokens
    got = ker._price(compiled_run.profile_terms(prof), num_seqs, batched_tokens, kv_tokens)
    want = prof.step_time(num_seqs, batched_tokens, kv_tokens)
    assert np.float64(got).tobytes() == np.float64(want).tobytes(), (got, want)


def test_a_longer_sd_run_with_prefill_chunks_and_draft_prefills_keeps_the_invariants():
    """150 requests through chunked prefill with an autoregressive drafter (draft and draft-prefill rows)."""
    traces = traces_with(30, 7, 0.7, False)
    wl = workload(traces, 150, rate=80.0, seed=7)
    kw = dict(traces=traces, wl=wl, mode="sd", k=4, cost=COSTS["autoregressive"], max_num_seqs=10,
              max_num_batched_tokens=48, chunked_prefill=True, step_overhead_s=1e-4)
    res = simulate(**kw)
    assert set(res.steps.phase) >= {"draft", "verify", "mixed", "draft_prefill"}
    check_invariants(res, wl.output_len.tolist(), 48, False)


def test_vllm_v1_budget_cuts_and_engine_loop_gaps():
    """`scheduler: vllm-v1`: 60 requests whose decodes and drafts overrun a 16-token budget (cut
    drafts, decodes left for the next step) with a 1 ms engine-loop gap between busy steps."""
    traces = traces_with(20, 11, 0.8, False)
    wl = workload(traces, 60, rate=300.0, seed=11)
    kw = dict(traces=traces, wl=wl, mode="sd", k=5, cost=COSTS["fraction"], max_num_seqs=8, scheduler="vllm-v1",
              max_num_batched_tokens=16, chunked_prefill=True, step_overhead_s=1e-3)
    tgt = simulate(**kw).steps
    tgt = tgt[tgt.device == "target"]
    assert (tgt.batched_tokens <= 16).all() and (tgt.batched_tokens == 16).any()
    assert (tgt.proposed_tokens % 5 != 0).any()  # k = 5 drafts each, except those cut to the budget
    gaps = np.round(tgt.start.to_numpy()[1:] - tgt.end.to_numpy()[:-1], 9)
    assert (gaps == 1e-3).sum() > len(gaps) // 2  # busy steps are 1 ms apart (the engine loop's gap)


class PlugInThompson(ThompsonPolicy):
    """A user's policy built on a built-in one: its own class, so the kernel (which runs the built-in rules) asks it
    in Python each step."""

    name = "plug-in-thompson"


class PlugInAdaptiveK(AdaptiveKPolicy):
    """adaptive-k under a class of its own: asked in Python, its step-time estimates the kernel's."""

    name = "plug-in-adaptive-k"


def asked_in_python(policy):
    """`policy` with its choose_batch replaced on the instance by a pass-through (a recorder, a test spy): the kernel
    cannot see inside it, so it asks the policy in Python each step (compiled_run.python_chooses)."""
    inner = policy.choose_batch
    policy.choose_batch = lambda view: inner(view)
    return policy


class NoDrafter(Policy):
    """A plug-in that never drafts and names no drafter."""

    name = "no-drafter"

    def choose(self, view):
        return Choice(None, 0)

    def drafters_used(self):
        return ()

    def max_draft_tokens(self):
        return 0


def _fallback_cases(python: bool = False):
    traces = traces_with(6, 1, 0.6, False)
    wl = workload(traces, 12, rate=100.0)
    base = dict(traces=traces, wl=wl)

    class Scaled(LinearProfile):
        """A profile kind the kernel does not know."""

    gtraces = traces_with(6, 1, 0.6, True)
    gbase = dict(traces=gtraces, wl=workload(gtraces, 12, rate=100.0), drafters=("d", "g"))
    twins = workload(traces, 12, rate=100.0)
    twins.request_ids[1] = twins.request_ids[0]
    gtwins = workload(gtraces, 12, rate=100.0)
    gtwins.request_ids[1] = gtwins.request_ids[0]

    def ADAPTIVE():
        return make_policy({"name": "adaptive-k", "drafter": "d", "k_max": 3}, seed=0)

    def COMBINE():
        return make_policy({"name": "combine-match", "ngram": "g", "eagle": "d"}, seed=0)

    def HONEST(plan="greedy", subclass=False):
        pol = make_policy({"name": "oracle-combine", "ngram": "g", "eagle": "d", "costs": "honest", "plan": plan},
                          seed=0)
        if subclass:  # a plug-in that chooses otherwise: its class is not the greedy oracle's

            class Mine(type(pol)):
                pass

            pol.__class__ = Mine
        return pol

    if python:  # runs whose policy the kernel asks in Python each step (compiled_run.python_chooses)
        return {
            "plug-in bandit": {**base, "policy": PlugInThompson(["d"], k=3)},
            "sliding window past the ring": {**base, "policy": make_policy(
                {"name": "sliding-window-ucb", "drafters": ["d"], "k": 3, "window": compiled_run.MAX_RING // 12 + 1,
                 "reward": "be"}, seed=0)},
            "policy method replaced": {**base, "policy": asked_in_python(ADAPTIVE())},
            "ucb repeated ids": {**base, "wl": twins, "policy": make_policy({"name": "ucb", "drafters": ["d"], "k": 3},
                                                                            seed=0)},
            "combine-adaptive repeated ids": {**gbase, "wl": gtwins, "policy": make_policy(
                {"name": "combine-adaptive", "ngram": "g", "eagle": "d"}, seed=0)},
            "greedy oracle subclass": {**gbase, "policy": HONEST(subclass=True)},
            "adaptive-k repeated ids": {**base, "wl": twins, "policy": ADAPTIVE()},
            "plug-in naming no drafter": {**base, "policy": NoDrafter()},
            "psd plug-in naming no drafter": {**base, "mode": "psd", "psd": PSDConfig(), "policy": NoDrafter()},
            "psd fixed policy method replaced": {**base, "mode": "psd", "psd": PSDConfig(),
                                                 "policy": asked_in_python(FixedPolicy("d", 3))},
        }
    return {
        "adaptive-k draft profile kind": ({**base, "policy": ADAPTIVE(), "cost": DraftCost(
            "whole_proposal", profile=Scaled("s", {"const": 1e-3}))}, "draft cost profile 's' is a Scaled"),
        "profile kind": ({**base, "target": Scaled("t", {"const": 0.01})}, "target profile 't' is a Scaled"),
        "draft profile kind": ({**base, "cost": DraftCost("whole_proposal", profile=Scaled("s", {"const": 1e-3}))},
                               "draft cost profile 's' is a Scaled"),
    }


@pytest.mark.parametrize("case", sorted(_fallback_cases()))
def test_a_profile_class_the_kernels_do_not_price_is_refused_before_any_step(case):
    """A plug-in profile class (here a LinearProfile subclass) is refused when the server is made, naming the profile,
    its class and the kinds the engine prices."""
    kw, why = _fallback_cases()[case]
    with pytest.raises(ValueError, match=f"run 'sd': {why}; the engine prices LinearProfile, RooflineProfile"):
        simulate(**kw)


@pytest.mark.parametrize("case", sorted(_fallback_cases(python=True)))
def test_a_policy_the_kernel_asks_in_python_runs_and_keeps_the_invariants(case):
    """Plug-ins, methods replaced on the instance, per-request state under repeated ids and sliding-window UCB past
    the ring: the kernel pauses for the policy's own choose_batch each step; the run keeps the engine's invariants,
    and the same run again gives the same tables."""
    sim = build(**_fallback_cases(python=True)[case])
    assert compiled_run.python_chooses(sim.server, sim.server.drafting.policy)
    res = sim.simulate()
    wl = _fallback_cases(python=True)[case]["wl"]
    check_invariants(res, wl.output_len.tolist(), None, ids=list(wl.request_ids))
    assert_same(res, simulate(**_fallback_cases(python=True)[case]))


class Recorder(Policy):
    """A plug-in written from scratch: per request, the k (0..3) and drafter ('d' or 'g') of most tokens per estimated
    second, a drafter at k = 0 now and then; it logs every call the engine makes and what it was told."""

    name = "recorder"

    def __init__(self):
        self.log = []

    def drafters_used(self):
        return ("d", "g")

    def max_draft_tokens(self):
        return 3

    def start_request(self, request_id):
        self.log.append(("start", request_id))

    def finish_request(self, request_id):
        self.log.append(("finish", request_id))

    def choose_batch(self, view):
        est = {(d, k): view.step_time_estimate(d, k) for d in ("d", "g") for k in range(4)}
        self.log.append(("choose", view.now, list(view.request_ids), view.positions.tolist(),
                         {d: a.tolist() for d, a in view.proposal_len.items()}, est, view.step_time_estimate(None, 2)))
        d_idx = np.empty(view.batch_size, dtype=np.int64)
        ks = np.empty(view.batch_size, dtype=np.int64)
        for j in range(view.batch_size):
            d, k = max(est, key=lambda a: ((1 + a[1] * (0.4 + 0.1 * (j % 3))) / est[a], a))
            d_idx[j], ks[j] = view.drafters.index(d), k if (view.positions[j] % 5) else 0
        return d_idx, ks

    def observe_batch(self, fb):
        self.log.append(("observe", list(fb.request_ids), fb.positions.tolist(), fb.drafter_idx.tolist(),
                         fb.k.tolist(), fb.proposed.tolist(), fb.accepted.tolist(), fb.step_time,
                         None if fb.tv is None else [None if t is None else t.tolist() for t in fb.tv]))


@pytest.mark.parametrize("rules", ["mixed", "separate", "vllm-v1"])
@pytest.mark.parametrize("pressure", [0, 2])
@pytest.mark.parametrize("sampled", [False, True])
def test_a_plug_in_is_called_and_told_what_the_tables_show(rules, pressure, sampled):
    """The calls the engine makes on a plug-in (choose_batch with its view and step-time estimates, observe_batch
    with the feedback, start_request, finish_request) agree with the run's tables, under vLLM V1's budget cuts, KV
    pressure (preemption), separate prefill steps and sampled verification (feedback with tv)."""
    traces, drafters, wl, budget = drawn_case(7, 30, 0.7, True, "poisson", 200.0, rules, 32)
    if sampled:
        traces = with_tv(traces, 7)
    kw = dict(traces=traces, wl=wl, drafters=drafters, max_num_seqs=6, block_size=4, max_num_batched_tokens=budget,
              kv_tokens=tight_kv(wl, 3, 4, 6, 1, pressure=pressure), chunked_prefill=rules == "vllm-v1",
              prefill="separate" if rules == "separate" else "mixed", **scheduler_of(rules),
              verification="sampled" if sampled else "greedy", switch_cost_s=2e-4,
              cost=COSTS["autoregressive"], drafter="g", proposer=COSTS["whole"])  # 'g' drafts at its own cost
    res = assert_told_what_the_tables_show(Recorder, kw)
    assert (res.steps.accepted_tokens > 0).any()


def assert_told_what_the_tables_show(recorder: type, kw: dict):
    """A `recorder` plug-in's log against the run's tables: each request started once, before it is first asked
    about, and finished once, after it was last told of; the feedback's proposed and accepted drafts add up to each
    request's in the requests table, each told at the position it was asked at, with no more drafts than the k it
    chose; a second run with a fresh recorder gets the same calls. Returns the run's result."""
    policy = recorder()
    res = simulate(policy=policy, **kw)
    log = policy.log
    calls = [c[0] for c in log]
    assert calls.count("start") == calls.count("finish") == len(kw["wl"]) and calls.count("observe") > 10
    started, finished, asked_at = set(), set(), {}
    proposed, accepted = {}, {}
    for call in log:
        if call[0] == "start":
            assert call[1] not in started
            started.add(call[1])
        elif call[0] == "finish":
            assert call[1] in started and call[1] not in finished
            finished.add(call[1])
        elif call[0] == "choose":
            for rid, pos in zip(call[2], call[3]):
                assert rid in started and rid not in finished
                asked_at[rid] = pos
        else:
            _, rids, positions, _, ks, props, accs = call[:7]
            for rid, pos, k, p, a in zip(rids, positions, ks, props, accs):
                assert rid in started and rid not in finished and asked_at[rid] == pos and 0 <= a <= p <= k
                proposed[rid] = proposed.get(rid, 0) + p
                accepted[rid] = accepted.get(rid, 0) + a
    rq = res.requests.set_index("request_id")
    assert {r: v for r, v in proposed.items() if v > 0} == {r: v for r, v in rq.proposed_tokens.items() if v > 0}
    assert {r: v for r, v in accepted.items() if v > 0} == {r: v for r, v in rq.accepted_tokens.items() if v > 0}
    again = recorder()
    simulate(policy=again, **kw)
    assert again.log == log
    return res


def test_a_plug_in_asking_for_a_drafter_it_does_not_name_gets_an_error_naming_it():
    """The compiled path prices and replays the drafters a policy names in drafters_used(): an estimate or a choice
    of another is refused with the policy's name and the drafters it named."""
    traces = traces_with(6, 1, 0.6, True)

    class Stray(Recorder):
        def drafters_used(self):
            return ("d",)

    sim = build(traces, workload(traces, 12, rate=100.0), drafters=("d", "g"), policy=Stray())
    with pytest.raises(ValueError, match=r"policy 'recorder' asked for a step-time estimate at drafter 'g'.*\['d'\]"):
        sim.simulate()


def test_k_by_batch_ranges_short_of_max_num_seqs_are_asked_in_python_which_names_the_batch():
    """k-by-batch is compiled as its k at every batch size up to max_num_seqs; ranges that stop short leave batch
    sizes without a k, so the kernel asks the policy itself, which fails at the first such batch and names it."""
    traces = traces_with(6, 1, 0.6, False)
    spec = {"name": "k-by-batch", "drafter": "d", "ranges": [{"min_batch": 1, "max_batch": 2, "k": 2}]}
    sim = build(traces, workload(traces, 12, rate=100.0), policy=make_policy(spec, seed=0))
    assert compiled_run.python_chooses(sim.server, sim.server.drafting.policy)
    with pytest.raises(ValueError, match="no range covers batch size 4"):  # the first batch past 2 decodes 4
        sim.simulate()


def min_time_case(target=None, longer: bool = False) -> dict:
    """oracle-combine (plan min-time) over 'g' and 'd' on 12 requests (`longer`: each one output token past its
    trace)."""
    traces = traces_with(6, 1, 0.6, True)
    wl = workload(traces, 12, rate=100.0)
    if longer:
        wl.output_len = wl.output_len + 1
    policy = make_policy({"name": "oracle-combine", "ngram": "g", "eagle": "d", "plan": "min-time"}, seed=0)
    return dict(traces=traces, wl=wl, drafters=("d", "g"), policy=policy, target=target)


@pytest.mark.parametrize("spec", [{"name": "oracle-k", "drafter": "d"},
                                  {"name": "oracle-combine", "ngram": "g", "eagle": "d", "costs": "honest"},
                                  {"name": "oracle-combine", "ngram": "g", "eagle": "d", "plan": "min-time"}])
def test_oracles_past_their_traces_read_the_last_position(spec):
    """A request one token longer than its trace: past the trace an oracle reads the trace's last position, as the
    replay does (traces.acceptance.trace_position), where nothing more will be accepted, so it drafts nothing there,
    by the kernel's rule as asked in Python. An oracle by position (oracle-k) then proposes, request by request,
    exactly what it proposes when each request stops at its trace's end."""
    kw = min_time_case(longer=True)
    del kw["policy"]
    fast = assert_ruled_as_asked(spec, kw)
    assert (fast.requests.output_len == kw["wl"].output_len).all()
    if spec["name"] == "oracle-k":
        kw["wl"] = min_time_case()["wl"]
        exact = simulate(policy=make_policy(spec, seed=0), **kw)
        assert fast.requests.proposed_tokens.tolist() == exact.requests.proposed_tokens.tolist()
        assert fast.requests.proposed_tokens.sum() > 0


def test_min_time_refuses_step_estimates_that_cost_nothing():
    """A target that costs nothing prices plain decoding at 0, which the exact plan's cost model refuses
    (StepCosts): the kernel refuses it at the first decode, naming the request; so does the oracle asked in Python,
    naming the cost it needs."""
    free = linear(0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="request 'r0'"):
        simulate(**min_time_case(target=free))
    kw = min_time_case(target=free)
    kw["policy"] = asked_in_python(kw["policy"])
    with pytest.raises(ValueError, match="finite cost > 0"):
        simulate(**kw)


def test_the_greedy_oracle_over_a_free_target_takes_the_first_free_option():
    """A target priced at nothing makes every option's rate unbounded (policies/base.tokens_per_time: inf, not a
    division by zero): a tie, so plain decoding, the first option, wins by the kernel's rule as asked in Python, and
    the drafts cost the steps their drafting only (never taken here: each step is plain)."""
    traces = traces_with(6, 1, 0.6, True)
    kw = dict(traces=traces, wl=workload(traces, 12, rate=100.0), drafters=("d", "g"), target=linear(0.0, 0.0, 0.0))
    spec = {"name": "oracle-combine", "ngram": "g", "eagle": "d", "costs": "honest"}
    fast = assert_ruled_as_asked(spec, kw)
    assert (fast.steps.proposed_tokens == 0).all()


def test_min_time_stopped_midway_leaves_the_plans_the_oracle_itself_makes():
    """Stopped after a few finishes, the plans of the requests still running are in the policy's follower (as
    PlanFollower.plan_of made them for the same oracle asked in Python at each step on the same kernel, from the same
    step's estimates) and nobody else's; over the whole run the tables are equal."""
    kw = min_time_case()
    kw["wl"] = workload(kw["traces"], 30, rate=200.0, seed=4)
    kw.update(max_num_seqs=6, cost=COSTS["fraction"])
    del kw["policy"]
    spec = {"name": "oracle-combine", "ngram": "g", "eagle": "d", "plan": "min-time", "k_max": 5}
    pol = make_policy(spec, seed=0)
    sim = stopped_midway(policy=pol, **kw)
    st = sim.server.state
    unfinished = {kw["wl"].request_ids[i] for i in range(len(kw["wl"])) if np.isnan(st.finish[i])}
    slow, made = make_policy(spec, seed=0), {}
    plan_of = slow.time_plan.plan_of
    slow.time_plan.plan_of = lambda rid, request, view=None: made.setdefault(rid, plan_of(rid, request, view))
    full = simulate(policy=asked_in_python(slow), **kw)
    held = pol.time_plan._plans
    assert held and set(held) <= unfinished
    for rid, plan in held.items():
        want = made[rid]
        for field in ("action_drafter", "action_k", "cost_to_go", "path"):
            assert np.array_equal(getattr(plan, field), getattr(want, field)), (rid, field)
    assert_same(simulate(policy=make_policy(spec, seed=0), **kw), full)


def test_a_policy_over_more_drafters_than_the_codes_hold_is_refused():
    """The drafters column codes each slot's draft, the prompt pass and each slot's proposer as bits of an int64
    (bits 0..2G): a policy over 32 drafters is refused when the server is made."""
    names = [f"x{j:02d}" for j in range(32)]
    traces = [RequestTrace(f"t{t}", 10, 8, {d: DrafterTrace(np.ones(8, dtype=np.int32)) for d in names})
              for t in range(2)]
    kw = dict(traces=traces, wl=workload(traces, 2), drafters=tuple(names))
    with pytest.raises(ValueError, match="policy 'ucb' uses 32 drafters; the engine runs a policy over at most 31"):
        build(policy=make_policy({"name": "ucb", "drafters": names, "k": 2}, seed=0), **kw).simulate()


@pytest.mark.parametrize("slots, proposers", [(8, False), (8, True), (11, True)])
def test_a_bandit_over_many_drafters_chooses_as_the_bandit_itself(slots, proposers):
    """UCB and Thompson over 8 drafters (the kernel's records padded to SLOT_PAD: one kernel build) and over 11 (two
    pads), their drafters column naming up to all of them, a switching cost, and (`proposers`) every drafter priced
    as vLLM V1's proposer, each run every step: the kernel's rule and the bandit asked in Python give the same
    tables."""
    assert compiled_run.padded_slots(slots) == (8 if slots <= 8 else 16)
    rng = np.random.default_rng(9)
    names = [f"x{j:02d}" for j in range(slots)][::-1]  # drafter order not alphabetical
    traces = []
    for t in range(10):
        o = int(rng.integers(5, 40))
        traces.append(RequestTrace(f"t{t}", int(rng.integers(5, 60)), o, {
            d: DrafterTrace(rng.geometric(1 - 0.05 * (j % 15), o).astype(np.int32)) for j, d in enumerate(names)}))
    wl = workload(traces, 30, rate=300.0)
    for spec in ({"name": "ucb", "drafters": names, "k": 2}, {"name": "thompson", "drafters": names[::-1], "k": 3}):
        kw = dict(traces=traces, wl=wl, drafters=tuple(names), switch_cost_s=2e-4)
        if proposers:
            kw.update(proposer=DraftCost("engine_step", profile=linear(1e-8, 5e-6, 2e-5)), proposer_for=tuple(names))
        fast = assert_ruled_as_asked(spec, kw)
        assert fast.steps.drafters.str.count(r"\+").max() >= (slots - 1 if proposers else 2)


@pytest.mark.parametrize("mode", ["ar", "sd", "psd"])
def test_servers_fed_by_pushed_arrivals_run_as_a_server_told_the_arrival_times(mode):
    """Two servers in one Environment take requests a process pushes at run time (PushedArrivals: not a cluster's
    router, so nothing tells when the next one comes; some pushed at one instant, some while a step runs): each
    takes one step per kernel call (compiled_replica.py), and its tables are those of a server whose workload names
    the same arrival times up front (the whole run in one kernel call)."""
    traces = traces_with(8, 3, 0.6, False)
    n = 20
    gaps = np.random.default_rng(4).exponential(0.004, n) * (np.arange(n) % 3 > 0)
    env = simpy.Environment()
    servers = []
    for _ in range(2):
        wl = workload(traces, n, rate=None)
        sc = build(traces=traces, wl=wl, mode=mode, psd=PSDConfig() if mode == "psd" else None,
                   max_num_seqs=4).server.scenario
        servers.append(Server(env, sc, inputs(traces, wl), arrivals=PushedArrivals(env)))

    def pusher():  # requests of one instant pushed together, before the servers wake
        for i in range(n):
            for srv in servers:
                srv.arrivals.push(i)
            if gaps[i] > 0:
                yield env.timeout(gaps[i])

    env.process(pusher())
    env.run()
    told = workload(traces, n, rate=None)
    told.arrival = np.concatenate([[0.0], np.cumsum(gaps)[:-1]])
    want = build(traces=traces, wl=told, mode=mode, psd=PSDConfig() if mode == "psd" else None,
                 max_num_seqs=4).simulate()
    for srv in servers:
        assert srv.compiled.stepwise
        got = srv.result()
        pd.testing.assert_frame_equal(got.requests, want.requests, check_exact=True)
        pd.testing.assert_frame_equal(got.steps, want.steps, check_exact=True)
        assert got.itl.tobytes() == want.itl.tobytes()


def test_an_early_stop_ends_the_run_with_the_full_runs_finishes():
    """`run(stop=...)`: the kernel returns every `check_every` finishes; what finished matches the full run."""
    traces = traces_with(10, 4, 0.6, False)
    wl = workload(traces, 40, rate=60.0, seed=4)
    full = build(traces=traces, wl=wl).simulate()
    sim = build(traces=traces, wl=wl)
    asked: list[int] = []
    end = sim.server.compiled.run(stop=lambda done: asked.append(done) or done >= 9, check_every=4)
    st = sim.server.state
    assert asked[0] >= 4 and asked[-1] >= 9 and st.n_finished == asked[-1] < len(wl)
    fin = ~np.isnan(st.finish)
    assert fin.sum() == st.n_finished
    np.testing.assert_array_equal(st.finish[fin], full.requests.finish_time.to_numpy()[fin])
    assert end == st.finish[fin].max()


def test_a_step_hook_is_called_once_at_the_end_of_a_compiled_run(monkeypatch):
    """Mid-run the SimPy clock stands still, so a step hook (the plan's early stop) would see a
    stale time: it is told once, when every request has finished, and the run completes as a full run."""
    monkeypatch.setattr(compiled_run, "SEGMENT_ROWS", 16)  # many segments, so a per-segment call would show
    traces = traces_with(10, 4, 0.6, False)
    wl = workload(traces, 60, rate=60.0, seed=5)
    sim = build(traces=traces, wl=wl)
    seen: list[tuple[int, float]] = []
    sim.server.on_step = lambda done: seen.append((done, sim.env.now))
    res = sim.simulate()
    assert len(res.steps) > 16
    assert [d for d, _ in seen] == [len(wl)]


def _snapshots(traces, wl, stop_after: int | None, policy=None):
    """Every snapshot a StopMonitor (the plan's early stop hook) takes; it stops at check `stop_after`."""
    from simulator.measure.early_stop import StopMonitor, run_until_decided

    sim = build(traces=traces, wl=wl, **({} if policy is None else {"policy": make_policy(policy, seed=0)}))
    seen = []

    def decide(p):
        seen.append(p)
        return "enough" if stop_after is not None and len(seen) >= stop_after else None

    monitor = StopMonitor(None, sim, len(wl), decide, every=3, check_from=5)
    sim.server.on_step = monitor
    last = run_until_decided(sim, monitor)
    return seen, last, sim


@pytest.mark.parametrize("policy", [None, {"name": "adaptive-k", "drafter": "d", "k_max": 4},
                                    {"name": "ucb", "drafters": ["d"], "k": 3}])
@pytest.mark.parametrize("stop_after", [None, 1, 4])
def test_a_stop_monitor_sees_the_full_runs_state_at_each_check(monkeypatch, stop_after, policy):
    """The plan's early stop, asked after the step that reaches each check's finish count (5, 8, 11, ...): its
    snapshot holds the time that step ended (the kernel's clock, not the SimPy clock), which is when the count's
    last request finished in the full run, and the full run's arrivals, first tokens and finishes up to then (NaN
    after); a stop ends the run there. Also for the learning policies (adaptive-k, UCB), whose state the kernel
    writes in place."""
    monkeypatch.setattr(compiled_run, "SEGMENT_ROWS", 16)  # segments too: a full buffer is no check
    traces = traces_with(10, 4, 0.6, False)
    wl = workload(traces, 50, rate=80.0, seed=6)
    full = build(traces=traces, wl=wl, **({} if policy is None else {"policy": make_policy(policy, seed=0)}))
    full = full.simulate().requests
    comp, last, sim = _snapshots(traces, wl, stop_after, policy)
    finish = np.sort(full.finish_time.to_numpy())
    assert len(comp) == (stop_after or len(comp)) and len(comp) >= (stop_after or 3)
    for j, p in enumerate(comp):
        assert p.finished >= 5 + 3 * j and p.now == finish[p.finished - 1] < finish[p.finished]
        for got, col in ((p.arrival, "arrival_time"), (p.first_token, "first_token_time"), (p.finish, "finish_time")):
            t = full[col].to_numpy()
            want = np.where(t <= p.now, t, np.nan) if col != "arrival_time" else t
            assert got.tobytes() == want.tobytes(), col
    if stop_after is None:
        assert last is None
    else:
        assert last is comp[-1] and sim.server.state.n_finished == comp[-1].finished < len(wl)


def test_an_adaptive_k_exact_tie_is_decided_as_the_policy_decides_it():
    """Prior 0 makes every first estimate 0, where each k expects one token; with steps priced the same at every k
    (no per-token or KV cost, a free drafter) the rates tie exactly: the kernel and the policy asked in Python run
    the one rule (best_k_rule) and take the first k, so the tables are the same."""
    traces = traces_with(6, 1, 0.6, False)
    wl = workload(traces, 12, rate=100.0)
    kw = dict(traces=traces, wl=wl, cost=COSTS["zero"], target=linear(0.0, 0.0, 5e-3))
    spec = {"name": "adaptive-k", "drafter": "d", "k_max": 3, "prior": 0.0}
    assert not compiled_run.python_chooses(build(policy=make_policy(spec, seed=0), **kw).server,
                                           make_policy(spec, seed=0))
    assert_ruled_as_asked(spec, kw)


def without_match_lengths(traces, drafter: str):
    """The traces with `drafter`'s acceptance kept and its n-gram match lengths dropped."""
    for t in traces:
        t.drafters[drafter] = type(t.drafters[drafter])(t.drafters[drafter].acc_len)
    return traces


def test_combine_match_without_ngram_lengths_is_refused_before_any_step():
    traces2 = without_match_lengths(traces_with(6, 1, 0.6, True), "g")
    with pytest.raises(ValueError, match=r"'combine-match' needs the n-gram match length \(proposal_len of drafter"
                                         r"\(s\) \['g'\]\)"):
        build(traces=traces2, wl=workload(traces2, 12, rate=100.0), drafters=("d", "g"),
              policy=make_policy({"name": "combine-match", "ngram": "g", "eagle": "d"}, seed=0))


def test_adaptive_k_estimates_are_left_in_the_policy_as_the_policy_itself_leaves_them():
    """The shared estimate after a full run is the one the same policy asked in Python at each step holds; after an
    early stop the policy holds per-request estimates for the requests still decoding, and no others."""
    traces = traces_with(10, 4, 0.6, False)
    wl = workload(traces, 40, rate=60.0, seed=4)
    spec = {"name": "adaptive-k", "drafter": "d", "k_max": 4, "scope": "shared", "decay": 0.9}
    fast_pol, slow_pol = make_policy(spec, seed=0), make_policy(spec, seed=0)
    simulate(traces=traces, wl=wl, policy=fast_pol)
    simulate(traces=traces, wl=wl, policy=asked_in_python(slow_pol))
    assert fast_pol._est and fast_pol._est == slow_pol._est
    spec = {**spec, "scope": "request"}
    pol = make_policy(spec, seed=0)
    sim = build(traces=traces, wl=wl, policy=pol)
    sim.server.compiled.run(stop=lambda done: done >= 9, check_every=4)
    st = sim.server.state
    running = [wl.request_ids[i] for i in st.run[:st.n_run] if not np.isnan(st.first_token[i])]
    assert running and sorted(pol._est) == sorted(running)


@pytest.mark.parametrize("lengths", [True, False])
def test_combine_adaptive_stopped_midway_leaves_the_estimates_the_policy_itself_keeps(lengths):
    """Stopped after a few finishes, combine-adaptive run by the kernel's rule leaves each decoding request's two
    estimates as the same policy asked in Python at each step (the same kernel) holds them (the kernel writes a
    fresh estimate, 0 successes and 0 failures, for a request started in the last step, which the policy makes at
    its first choice: the same state); over the whole run both drafters drafted (the rule chose between them) and
    the tables are equal."""
    traces = traces_with(10, 4, 0.6, True)
    if not lengths:
        traces = without_match_lengths(traces, "g")
    wl = workload(traces, 30, rate=200.0, seed=4)
    spec = {"name": "combine-adaptive", "ngram": "g", "eagle": "d", "k_ngram": 4, "k_eagle": 3, "decay": 0.8}
    kw = dict(traces=traces, wl=wl, drafters=("d", "g"), max_num_seqs=6)
    left = []
    for wrap in (lambda policy: policy, asked_in_python):
        pol = wrap(make_policy(spec, seed=0))
        stopped_midway(policy=pol, **kw)
        held = {rid: {d: (e.successes, e.failures) for d, e in est.items()} for rid, est in pol._est.items()}
        left.append({rid: e for rid, e in held.items() if any(v != (0.0, 0.0) for v in e.values())})
    assert left[0] and left[0] == left[1]
    ruled = assert_ruled_as_asked(spec, kw)
    assert min(ruled.extras["drafter_usage"][d] for d in ("d", "g")) > 0


@pytest.mark.parametrize("switch", [0.0, 3e-3])
def test_the_greedy_oracle_stopped_midway_leaves_the_last_drafters_the_oracle_itself_keeps(switch):
    greedy_oracle_midway(switch)


def test_the_greedy_oracles_switching_cost_changes_its_choices():
    assert greedy_oracle_midway(0.0) != greedy_oracle_midway(3e-3)  # drafter usage over the whole run


def greedy_oracle_midway(switch: float) -> dict:
    """Stopped after a few finishes, oracle-combine `honest` run by the kernel's rule leaves as each decoding
    request's last chosen drafter (what its switching cost compares with) what the same oracle asked in Python at
    each step (the same kernel) holds; over the whole run it drafted with both drafters and the tables are equal."""
    traces = traces_with(10, 4, 0.6, True)
    wl = workload(traces, 30, rate=200.0, seed=4)
    spec = {"name": "oracle-combine", "ngram": "g", "eagle": "d", "costs": "honest", "k_max": 5,
            "switch_cost_s": switch}
    kw = dict(traces=traces, wl=wl, drafters=("d", "g"), max_num_seqs=6, cost=COSTS["fraction"])
    left = []
    for wrap in (lambda policy: policy, asked_in_python):
        pol = wrap(make_policy(spec, seed=0))
        st = stopped_midway(policy=pol, **kw).server.state
        decoding = {wl.request_ids[i] for i in st.run[:st.n_run] if np.isnan(st.finish[i])}
        left.append({rid: d for rid, d in pol._last.items() if rid in decoding})
    assert left[0] and left[0] == left[1]
    ruled = assert_ruled_as_asked(spec, kw)
    assert min(ruled.extras["drafter_usage"][d] for d in ("d", "g")) > 0
    return ruled.extras["drafter_usage"]


@pytest.mark.parametrize("reward", ["be", "bd"])
@pytest.mark.parametrize("scope", ["request", "shared"])
def test_longer_ucb_runs_over_two_drafters_choose_as_ucb_itself(scope, reward):
    """UCB's index decides between two arms over many plays (per request: up to ~60; shared: thousands), so a change
    to the index or the reward (block efficiency, or MetaSD's block divergence over the traces' tv) shows in the
    tables, the kernel's rule against UCB asked in Python."""
    traces = with_tv(traces_with(40, 11, 0.55, True), 11)
    wl = workload(traces, 160, rate=120.0, seed=11)
    for beta in (0.2, 1.0, 3.0):
        spec = {"name": "ucb", "drafters": ["g", "d"], "k": 4, "beta": beta, "scope": scope, "reward": reward}
        kw = dict(traces=traces, wl=wl, drafters=("d", "g"), max_num_seqs=12, max_num_batched_tokens=256,
                  chunked_prefill=True, step_overhead_s=1e-4)
        fast = assert_ruled_as_asked(spec, kw)
        assert min(fast.extras["drafter_usage"][d] for d in ("d", "g")) > 0  # both arms played


def stopped_midway(**kw):
    """The run of `kw`, stopped by the plan's early-stop monitor at its second check (every 4 finishes, from the
    4th), before the last request finished."""
    from simulator.measure.early_stop import StopMonitor, run_until_decided

    sim = build(**kw)
    checks = []
    monitor = StopMonitor(None, sim, len(kw["wl"]), lambda p: checks.append(p) or ("enough" if len(checks) >= 2
                                                                                    else None),
                          every=4, check_from=4)
    sim.server.on_step = monitor
    run_until_decided(sim, monitor)
    assert len(checks) == 2 and sim.server.state.n_finished < len(kw["wl"])  # stopped midway
    return sim


@pytest.mark.parametrize("scope", ["request", "shared"])
@pytest.mark.parametrize("spec", [{"name": "thompson", "prior_alpha": 2.0}, {"name": "exp3", "gamma": 0.3},
                                  {"name": "epsilon-greedy", "epsilon": 0.4}, {"name": "random-drafter"},
                                  {"name": "sliding-window-ucb", "window": 3, "reward": "bd"},
                                  {"name": "discounted-ucb", "gamma": 0.8}])
def test_a_bandit_stopped_midway_leaves_the_state_the_bandit_itself_keeps(spec, scope):
    """Stopped after a few finishes, a bandit run by the kernel's rule leaves in the policy what the same bandit asked
    in Python at each step (asked_in_python, the same kernel) holds then: the shared statistics, or each decoding
    request's (its ring of rounds for the sliding window). After a whole run both generators are at the same state
    (the same draws made, none more)."""
    traces = with_tv(traces_with(10, 4, 0.6, True), 4)
    wl = workload(traces, 30, rate=200.0, seed=4)
    spec = {"drafters": ["g", "d"], "k": 3, "scope": scope} | spec
    left = []
    for wrap in (lambda policy: policy, asked_in_python):
        pol = wrap(make_policy(spec, seed=3))
        sim = stopped_midway(traces=traces, wl=wl, drafters=("d", "g"), policy=pol, max_num_seqs=6)
        states = {k: (None if v is None else [np.asarray(getattr(v, f)).copy() for f in sorted(vars(v))
                                              if f != "row"]) for k, v in pol._states.items()}
        whole = wrap(make_policy(spec, seed=3))
        simulate(traces=traces, wl=wl, drafters=("d", "g"), policy=whole, max_num_seqs=6)
        left.append((int(sim.server.state.n_finished), sorted(states), states, whole.rng.bit_generator.state))
    (n_a, keys_a, a, rng_a), (n_b, keys_b, b, rng_b) = left
    assert n_a == n_b and keys_a == keys_b and rng_a == rng_b
    for key in keys_a:
        if a[key] is not None:
            assert all(np.array_equal(x, y) for x, y in zip(a[key], b[key])), key


@pytest.mark.parametrize("spec", [{"name": "thompson", "drafters": ["g", "d"], "k": 3},
                                  {"name": "combine-match", "ngram": "g", "eagle": "d"}])
def test_a_drafter_switching_cost_is_charged_in_whole_switches(spec):
    """A request that changes drafter pays run.switch_cost_s once per drafter and step (rules/pricing.group_switches):
    the draft rows grow by a whole number of switching costs over the same run without one (every request arrives at
    0, so the steps do not depend on their times, nor the choices on the cost)."""
    traces = traces_with(20, 6, 0.6, True)
    wl = workload(traces, 40, rate=None, seed=6)
    kw = dict(traces=traces, wl=wl, drafters=("d", "g"), max_num_seqs=8, cost=COSTS["constant"])
    fast = simulate(policy=make_policy(spec, seed=0), switch_cost_s=0.004, **kw)
    free = simulate(policy=make_policy(spec, seed=0), **kw)
    draft = [r.steps[r.steps.phase == "draft"] for r in (fast, free)]
    extra = (draft[0].end - draft[0].start).to_numpy() - (draft[1].end - draft[1].start).to_numpy()
    charged = np.round(extra / 0.004)
    assert np.allclose(extra, charged * 0.004, rtol=0, atol=1e-12) and charged.min() >= 0 and charged.sum() >= 10


@pytest.mark.parametrize("spec", [None, {"name": "adaptive-k", "drafter": "d", "k_max": 4},
                                  {"name": "thompson", "drafters": ["d", "g"], "k": 3},
                                  {"name": "combine-match", "ngram": "g", "eagle": "d"}])
def test_a_run_that_preempts_keeps_the_invariants_and_preempts_more_with_less_kv(spec):
    """KV for 1, 2 and 4 of the largest requests with 8 running at most: the run preempts the newest requests by
    recompute (they wait at the queue's front, prefill prompt and output again, and the steps that preempt admit
    nobody; the hand-worked cases are test_rules_prefill_kv.py's), keeps the engine's invariants, and preempts more
    often the smaller the KV."""
    traces = traces_with(20, 3, 0.6, True)
    wl = workload(traces, 60, rate=300.0, seed=3)
    largest = int((wl.prompt_len + wl.output_len).max()) + 16
    counts = []
    for kv_tokens in (largest, 2 * largest, 4 * largest):
        kw = dict(traces=traces, wl=wl, drafters=("d", "g"), kv_tokens=kv_tokens, max_num_seqs=8)
        fast = simulate(policy=None if spec is None else make_policy(spec, seed=0), **kw)
        check_invariants(fast, wl.output_len.tolist(), None)
        counts.append(int(fast.requests.preemptions.sum()))
    assert counts[0] > counts[1] > counts[2] > 0


def test_ucb_over_more_than_two_drafters_names_each_slot_apart_from_the_prompt_pass():
    """UCB over four drafters: the steps' drafters column carries a bit per drafter slot, so slot 2 drafting alone
    (code 4) must not read as the drafters' prompt-pass row (the kernel's code for that sat at 4 once: any policy of
    three or more drafters broke the step table)."""
    traces = traces_with(30, 5, 0.6, True)
    rng = np.random.default_rng(5)
    for t in traces:  # two more drafters: 'h' and 'i', each with its own acceptance
        o = len(t.drafters["d"].acc_len)
        t.drafters["h"] = DrafterTrace(rng.geometric(0.3, o).astype(np.int32))
        t.drafters["i"] = DrafterTrace(rng.geometric(0.7, o).astype(np.int32))
    wl = workload(traces, 120, rate=100.0, seed=5)
    spec = {"name": "ucb", "drafters": ["d", "g", "h", "i"], "k": 3, "beta": 0.5, "scope": "shared"}
    cost = DraftCost("whole_proposal", profile=linear(1e-8, 3e-6, 2e-4))  # a prompt pass: draft_prefill rows
    kw = dict(traces=traces, wl=wl, drafters=("d", "g", "h", "i"), cost=cost, max_num_seqs=8,
              max_num_batched_tokens=256, chunked_prefill=True)
    fast = assert_ruled_as_asked(spec, kw)
    named = set(fast.steps.drafters)
    assert {"h", "d+g+h+i"} <= named  # a slot alone, and the prompt pass of all four


def test_a_fraction_or_constant_drafter_with_a_profile_is_charged_its_prompt_pass():
    """DraftCost.prefill_time prices a drafter's own prompt pass whenever it has a profile, whatever its kind; the
    kernel once charged it only for profile kinds (whole_proposal, autoregressive)."""
    traces = traces_with(20, 5, 0.6, False)
    wl = workload(traces, 60, rate=80.0, seed=5)
    for cost in (DraftCost("fraction_of_verify", fraction=0.1, profile=linear(1e-8, 2e-6, 1e-4)),
                 DraftCost("constant", seconds=1e-3, profile=linear(1e-8, 2e-6, 1e-4))):
        kw = dict(traces=traces, wl=wl, k=3, cost=cost, max_num_seqs=8, max_num_batched_tokens=64,
                  chunked_prefill=True)
        res = simulate(**kw)
        assert "draft_prefill" in set(res.steps.phase)


def test_the_kernel_cache_follows_both_kernel_sources_even_when_numba_was_imported_first(tmp_path):
    """numba keys a cached kernel on its own file: the PSD kernel inlines helpers of compiled_kernel.py (and
    accept_tree inlines traces/tree.tree_accepted, the cluster loop the router's rules), so a change there would
    leave a stale kernel; the default cache
    folder is one per digest of those sources, and it holds
    even when numba was imported (and read its cache setting) before the kernels."""
    import hashlib
    import os
    import subprocess
    import sys
    from pathlib import Path

    import simulator

    root = Path(simulator.__file__).parent.parent
    digest = hashlib.sha256(b"".join((root / f).read_bytes() for f in (
        "simulator/engine/compiled_kernel.py", "simulator/engine/compiled_psd_kernel.py",
        "simulator/engine/kernel_records.py", "policies/adaptive_k.py",
        "policies/acceptance_estimate.py", "policies/bandit_rules.py", "policies/combine.py", "policies/exact_plan.py", "policies/base.py", "traces/acceptance.py",
        "simulator/costs/latency.py", "simulator/costs/roofline.py",
        "simulator/costs/step_model.py", "traces/tree.py", "traces/sampled_acceptance.py", "traces/expected_tokens.py",
        "simulator/cluster/compiled_cluster_kernel.py", "simulator/cluster/router.py")) + b"".join(
        p.read_bytes() for p in sorted((root / "simulator/engine/rules").glob("*.py"))))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"} | {"HOME": str(tmp_path)}
    code = ("import numba, simulator.engine.compiled_kernel\nfrom numba.core import config\nprint(config.CACHE_DIR)")
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=root).stdout.strip()
    assert got == str(tmp_path / ".cache" / "draftsim" / "numba" / digest.hexdigest()[:16])


def test_the_kernel_is_plain_python_numba_off_gives_the_same_tables(tmp_path):
    """The compiled path's rules are readable Python over arrays: with numba's JIT switched off
    (NUMBA_DISABLE_JIT=1, the kernel run as plain Python) the requests, steps and ITL tables of fixed-k SD,
    adaptive-k, UCB, Thompson, EXP3, sliding-window UCB, PSD and preempting runs are bit for bit the compiled ones
    (the same IEEE operations in the same order; tolerance zero)."""
    code = f"""
import pickle
from policies.registry import make_policy
from tests.simulator.engine.test_compiled_run import build, traces_with, workload, PSDConfig
t = traces_with(8, 3, 0.6, True)
wl = workload(t, 14, rate=90.0, seed=3)
specs = [None, {{"name": "adaptive-k", "drafter": "d", "k_max": 4}},
         {{"name": "ucb", "drafters": ["g", "d"], "k": 3}}, {{"name": "thompson", "drafters": ["g", "d"], "k": 3}},
         {{"name": "exp3", "drafters": ["d", "g"], "k": 2}},
         {{"name": "sliding-window-ucb", "drafters": ["d", "g"], "k": 3, "window": 4, "reward": "be"}}]
out = []
for spec in specs:
    pol = None if spec is None else make_policy(spec, seed=0)
    res = build(traces=t, wl=wl, drafters=("d", "g"), policy=pol).simulate()
    out.append((res.requests, res.steps, res.itl.tobytes()))
res = build(traces=t, wl=wl, mode="psd", psd=PSDConfig()).simulate()
out.append((res.requests, res.steps, res.itl.tobytes()))
res = build(traces=t, wl=wl, drafters=("d", "g"), kv_tokens=int((wl.prompt_len + wl.output_len).max()) + 16,
            policy=make_policy({{"name": "adaptive-k", "drafter": "d", "k_max": 3}}, seed=0)).simulate()
assert res.requests.preemptions.sum() > 0
out.append((res.requests, res.steps, res.itl.tobytes()))
pickle.dump(out, open(OUT, "wb"))
"""
    for a, b in tables_jit_on_and_off(code, tmp_path):
        assert_same_run_tables(a, b)


def test_vllm_v1_lookahead_slots_and_async_scheduling():
    """`scheduler: vllm-v1` with an EAGLE drafter (k = 4 lookahead slots per running request) and async scheduling,
    60 requests arriving at once, KV just large enough for the no-preemption check with the slots: the slots show in
    the peak KV (above the same run's with an n-gram drafter), and each step starts max(its predecessor's forward,
    the 7 ms host gap) after that one started."""
    traces = traces_with(20, 5, 0.7, False)
    wl = workload(traces, 60, rate=None, seed=5)
    gap = 7e-3
    kw = dict(traces=traces, wl=wl, mode="sd", k=4, cost=COSTS["fraction"], max_num_seqs=6, scheduler="vllm-v1",
              async_scheduling=True, max_num_batched_tokens=64, step_overhead_s=gap, block_size=4,
              kv_tokens=tight_kv(wl, 4, 4, 6, 0, lookahead=4))
    fast, ngram = simulate(kinds={"d": "eagle"}, **kw), simulate(kinds={"d": "ngram"}, **kw)
    assert fast.extras["kv_peak_blocks"] > ngram.extras["kv_peak_blocks"]
    steps = fast.steps.groupby("step").agg(start=("start", "min"), end=("end", "max"))
    start, end = steps.start.to_numpy(), steps.end.to_numpy()
    forward, period = end[:-1] - start[:-1], start[1:] - start[:-1]
    assert (forward < gap).any() and (forward > gap).any()  # both sides of the max occur
    assert np.allclose(period, np.maximum(forward, gap), rtol=0, atol=1e-12)


def test_a_server_refuses_an_arrival_source_it_cannot_be_pushed_by():
    class Mine:
        def attach(self, arrival):
            pass

    traces = traces_with(4, 2, 0.5, False)
    wl = workload(traces, 8)
    env = simpy.Environment()
    with pytest.raises(TypeError, match="arrivals=Mine: expected a PushedArrivals"):
        Server(env, build(traces=traces, wl=wl).server.scenario, inputs(traces, wl), arrivals=Mine())
