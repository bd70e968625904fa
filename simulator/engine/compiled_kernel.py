"""The compiled step loop (numba): one server's AR or SD run (open or closed loop), a step at a time by the rules.

One SD step loop for every compiled policy: each decoding request gets a drafter slot (or none) and a k per step,
fixed (FixedPolicy), by the adaptive-k argmax, by combine-match's match-length rule, by combine-adaptive's expected
tokens per estimated second, by a bandit over drafter arms
(UCB's family, epsilon-greedy, random, Thompson, EXP3: the policies' own rules, drawing from the policy's generator)
or from a table (k-by-batch, position oracles);
each slot is priced once for its own sub-batch (rules/pricing.draft_group). Under `scheduler: vllm-v1` the decodes take
their tokens from the step budget (rules/decode_budget.py; under `draftsim` the same rule over an unbounded decode
budget) and the engine loop's gap follows each busy step (rules/engine_loop.py).
The step rules of simulator/engine/rules/ (prefill plan, decode budget, engine-loop gap, emission, prefill progress,
finish, KV growth, pricing, PSD's side) and the built-in policies' rules are compiled here once. What the kernel
still restates lives in small @njit functions below, each naming what it computes; the tests of
tests/simulator/engine/ check them (rule tests by hand, invariants, policies against themselves asked in Python).

Imported when a server's run starts, so commands that never simulate do not import numba. Step prices are the
profiles' own rules, compiled:
latency.linear_step_time and table_step_time, roofline.roofline_step_time and weight_bytes_read (an MoE's expert
reads: libm's pow, as Python's), step_model.structured_time (a target step priced by its whole shape,
rules/pricing.target_time) and simulator/engine/rules/pricing.py (draft and prompt-pass costs, a step's sum, the
step estimate), over the profile and drafter records compiled_run builds
(rules.pricing.ProfileTerms, DraftTerms). A step's end is `now + duration`, as SimPy adds a delay, so a cluster
replica's SimPy events land on the kernel's times. Accepted drafts
per trace position come precomputed from traces/acceptance.py (the replay rule is not restated here); the
end-of-output cut is rules/emission.emit_decoded's.

The kernel runs until every request finished, a row or ITL buffer is full, `stop_finished` requests have
finished, or, having taken a step, the next step would start (after vLLM V1's engine-loop gap, not yet taken) at or
after `until` (the caller's next external event: a cluster replica passes its router's next arrival, so it runs the
steps up to it in one call; simulator/engine/compiled_replica.py), or, for a replica (`Settings.routed`), it is idle
with no arrival known, and returns a code (`DONE`, `FULL`, `STOPPED`, `PAUSED`; negative: a broken invariant). It
takes a few named records (simulator/engine/kernel_records.py: the workload, the acceptance replay, the costs, the
settings, the run's state record, the per-request arrays, the policy state, the output buffers) and all state lives
in them, so the caller empties the buffers, adds the arrivals pushed since (the state's `submitted`: how many of
`arrival` are known) and calls it again.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

# the kernels (the cluster loop's too), the records they take and the rules they compile (numba keys a cached
# kernel on its own file only; a record's fields are compiled in by name)
_ROOT = Path(__file__).resolve().parents[2]
KERNEL_SOURCES = tuple(_ROOT / p for p in (
    "simulator/engine/compiled_kernel.py", "simulator/engine/compiled_psd_kernel.py",
    "simulator/engine/kernel_records.py", "policies/adaptive_k.py", "policies/acceptance_estimate.py",
    "policies/bandit_rules.py", "policies/combine.py", "policies/exact_plan.py", "policies/base.py",
    "traces/acceptance.py", "simulator/costs/latency.py", "simulator/costs/roofline.py", "simulator/costs/step_model.py",
    "traces/tree.py", "traces/sampled_acceptance.py", "traces/expected_tokens.py",
    "simulator/cluster/compiled_cluster_kernel.py", "simulator/cluster/router.py")) + tuple(
    sorted((_ROOT / "simulator/engine/rules").glob("*.py")))  # every rule module (simulator/engine/rules/)


def kernel_cache_dir() -> Path:
    """The default cache folder of the compiled kernels: under the user's cache (works when the package is
    read-only), one per digest of the kernel sources, since numba's cache keys a kernel on its own file only and
    would keep a PSD kernel that inlined an older helper of this file."""
    digest = hashlib.sha256()
    for path in KERNEL_SOURCES:
        digest.update(path.read_bytes())
    return Path.home() / ".cache" / "draftsim" / "numba" / digest.hexdigest()[:16]


os.environ.setdefault("NUMBA_CACHE_DIR", str(kernel_cache_dir()))  # a folder the user set is used as it is

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402
from numba.core import config as _numba_config  # noqa: E402
from numba.extending import overload, register_jitable  # noqa: E402

from policies.acceptance_estimate import estimate_update, estimate_value  # noqa: E402
from policies.adaptive_k import adaptive_ks, best_k_rule, top_k_rule  # noqa: E402
from policies import bandit_rules  # noqa: E402
from policies.base import tokens_per_time  # noqa: E402
from policies.combine import combine_adaptive_rule, combine_match_rule  # noqa: E402
from policies.exact_plan import cost_ceiling, drafted_costs_ok, least_cost_actions, positive_cost  # noqa: E402
from simulator.costs import roofline, step_model  # noqa: E402
from simulator.costs.latency import linear_step_time, table_step_time  # noqa: E402
from simulator.engine.rules import arrivals as arrival_rules  # noqa: E402
from simulator.engine.rules import emission as emission_rules, finish as finish_rules, kv as kv_rules  # noqa: E402
from simulator.engine.rules import pricing, psd_sides, psd_timing  # noqa: E402
from simulator.engine.rules import sampled as sampled_rules  # noqa: E402
from simulator.engine.rules import decode_budget as budget_rules  # noqa: E402
from simulator.engine.rules.kv import decode_hold  # noqa: E402
from simulator.engine.rules.engine_loop import engine_loop_gap, overlapped_gap  # noqa: E402
from simulator.engine.rules.prefill_plan import (PrefillLimits, plan_prefills,  # noqa: E402
                                                 take_prefill_plan as take_prefill_plan_rule)
from simulator.engine.rules import queue as queue_rules  # noqa: E402
from simulator.engine.rules import tree as tree_rules  # noqa: E402
from traces import sampled_acceptance, tree as tree_shape  # noqa: E402
from traces.expected_tokens import leviathan_tokens  # noqa: E402

_numba_config.reload_config()  # numba read NUMBA_CACHE_DIR when first imported, which may have been before this

# the step rules of simulator/engine/rules/, compiled once here for the kernels below (and the rule tests, which call
# each build beside the plain rule). A rule that other rules call (blocks_for) is registered first and compiles in
# place.
register_jitable(kv_rules.blocks_for)
register_jitable(kv_rules.decode_hold)
emit_decoded = njit(cache=True)(emission_rules.emit_decoded)
advance_prefills = njit(cache=True)(emission_rules.advance_prefills)
release_finished = njit(cache=True)(finish_rules.release_finished)
register_jitable(inline="always")(arrival_rules.pull_due)  # inlined in each step's turn
register_jitable(arrival_rules.submit_next)
pull_due = njit(cache=True)(arrival_rules.pull_due)  # the arrivals due (the rule tests')
submit_next = njit(cache=True)(arrival_rules.submit_next)  # a closed loop's next request (the rule tests')
kv_growth = njit(cache=True)(kv_rules.kv_growth)
add_blocks = njit(cache=True)(kv_rules.add_blocks)
preempt_keep = njit(cache=True)(kv_rules.preempt_keep)  # how many running requests keep running
preempt_suffix = njit(cache=True)(kv_rules.preempt_suffix)  # the newest ones preempted by recompute
register_jitable(plan_prefills)
register_jitable(queue_rules.queue_window)
_plan_prefills = njit(cache=True)(plan_prefills)
take_prefill_plan = njit(cache=True)(take_prefill_plan_rule)  # a prefill plan committed
# the queues: the waiting queue's window, a step's prefill plan over the queues, admission, preemption
# back to the queue's front, finish
_queue_window = njit(cache=True)(queue_rules.queue_window)
plan_step_prefills = njit(cache=True)(queue_rules.plan_step_prefills)
admit_planned = njit(cache=True)(queue_rules.admit_planned)
requeue_preempted = njit(cache=True)(queue_rules.requeue_preempted)
drop_finished = njit(cache=True)(queue_rules.drop_finished)
register_jitable(budget_rules.fit_decodes)
register_jitable(budget_rules.cut_accepted)
fit_decodes = njit(cache=True)(budget_rules.fit_decodes)  # the budget cut alone (fit_proposals calls it)
# vLLM V1's decode budget over verified chains, each cut one keeping its accepted part (SD and PSD kernels)
_fit_proposals = njit(cache=True)(budget_rules.fit_proposals)
_engine_loop_gap = njit(cache=True)(engine_loop_gap)
register_jitable(psd_sides.join_side)
join_side = njit(cache=True)(psd_sides.join_side)  # PSD: the side a new request joins
assign_sides = njit(cache=True)(psd_sides.assign_sides)  # PSD: the sides the admitted requests join
leave_sides = njit(cache=True)(psd_sides.leave_sides)  # PSD: a preempted request's side and proposal go
split_sides = njit(cache=True)(psd_sides.split_sides)  # PSD: a step's verified and drafted sides
next_verify_side = njit(cache=True)(psd_sides.next_verify_side)  # PSD: the roles flip when both sides ran
carry_proposals = njit(cache=True)(psd_sides.carry_proposals)  # PSD: the drafted side's proposals kept
psd_step_time = njit(cache=True)(psd_timing.psd_step_time)  # PSD: both devices' ends, the step's duration
_overlapped_gap = njit(cache=True)(overlapped_gap)
register_jitable(tree_shape.tree_accepted)  # traces/tree.py: the accepted drafts of one rank row
accept_tree = njit(cache=True)(tree_rules.accept_tree)  # a tree's acceptance

DONE, FULL, STOPPED, PAUSED, ERR_STALL = 0, 1, 2, 3, -1
ERR_PLAN_COSTS, ERR_PLAN_ROWS = -2, -3  # POL_PLAN: step-time estimates the plan refuses; no plan row free (a bug)
STEP = 4  # _turn: take a step (never returned by a kernel)
STEP_ROWS = 3  # the most step-table rows one step writes (draft, verify or mixed, the drafters' prompt pass)
# phases, in simulator/engine/compiled_run.PHASES order
P_PREFILL, P_DECODE, P_DRAFT, P_VERIFY, P_MIXED, P_DRAFT_PREFILL = range(6)
# policies: fixed (drafter slot 0 and k, or none), adaptive-k (slot 0, k per request), combine-match (two slots)
POL_FIXED, POL_ADAPTIVE, POL_COMBINE, POL_BANDIT = range(4)  # POL_BANDIT: a bandit over drafter arms, fixed k
# (Settings.bandit: its rule, policies/bandit_rules.B_UCB ... B_EXP3, and Settings.beta to exp3_gamma its
# settings, BanditRule's; BE or BD reward)
POL_TABLE = 4  # a policy that chooses by output position alone (oracles): its table, Replay.choice_slot / choice_k
POL_BATCH = 5  # k by the step's count of decoding requests (k-by-batch, slot 0): Replay.batch_k
POL_RATE = 6  # combine-adaptive: per request, n-gram or EAGLE by expected tokens per estimated second
POL_GREEDY_ORACLE = 7  # oracle-best-drafter / oracle-combine `honest`, greedy: each drafter at its oracle k
# (Replay.slot_k) by tokens per estimated second, plus the oracle's switching cost
POL_PLAN = 8  # an oracle's plan min-time: each request's exact plan, made at its first decode (PolicyState.plan_*)
POL_GIVEN = 9  # a policy in Python (a plug-in): the kernel pauses (CHOOSE) for its choices, PolicyState.chosen(_k)
# run_steps under POL_GIVEN, its turn taken (taken again on the next call, it changes nothing): CHOOSE, a step with
# decodes waits for the policy's choices; HEAR, the last step's outcome (RUN_STATE `pending`) is still to be told,
# and the step about to be planned would overwrite it (no decodes to choose for, or a separate prefill plan)
CHOOSE, HEAR = 5, 6
# the step table's drafters column (StepRows.drafters), over a run's nslot slots: a bit per slot that drafted (slots
# in ascending drafter index, joined by "+"); bit nslot (drf_pass): every drafter of the policy in drafters_used
# order (the draft_prefill row of a decode step); bit nslot + 1 + g: slot g's vLLM V1 proposer ran (Settings.proposers)
# though no request drafted with it, named after the slots that did (Pricing's order: draft groups, then proposers)


@njit(cache=True)
def _row(rows, r, step, phase, start, end, ns, pt, bt, kv, used, prop, acc, emit, drf):
    """Row `r` of the step table (kernel_records.StepRows)."""
    rows.step[r] = step
    rows.phase[r] = phase
    rows.num_seqs[r] = ns
    rows.prefill_tokens[r] = pt
    rows.batched_tokens[r] = bt
    rows.kv_tokens[r] = kv
    rows.kv_blocks_used[r] = used
    rows.proposed_tokens[r] = prop
    rows.accepted_tokens[r] = acc
    rows.emitted_tokens[r] = emit
    rows.drafters[r] = drf
    rows.start[r] = start
    rows.end[r] = end



# the pricing rules, written once as plain Python (simulator/costs/latency.py, roofline.py, step_model.py,
# simulator/engine/rules/pricing.py) and compiled here (a table profile's: a call, its loop over the simplices out
# of the inlined price); the rules they call are compiled into them, and
# `profile_price`, `prices_shape` and `shape_price` read the kernel's ProfileTerms records (a profile in Python asks its
# profile objects)
for _rule in (linear_step_time, table_step_time, roofline.attention_pairs, roofline.roofline_compute_s,
              roofline.roofline_memory_s, roofline.roofline_per_op_s, roofline.roofline_allreduce_s,
              roofline.roofline_step_time, roofline.weight_bytes_read, step_model.shape_features,
              step_model.structured_time,
              step_model.uniform_batch, step_model.structured_batch_time,
              pricing.draft_time, pricing.drafters_prefill_time):
    register_jitable(_rule)
# the loop-free rules over the typed records are inlined where called (numba IR): a call would pass the drafter and
# profile records by value and count a reference to each record's array (the step estimate: once per k, per step)
for _rule in (pricing.terms_step_time, pricing.target_time, pricing.prefill_time, pricing.sd_step_time,
              pricing.decode_tokens):
    register_jitable(inline="always")(_rule)
register_jitable(pricing.terms_shape_time)  # a call: the structured model's terms stay out of the hot loops


@overload(pricing.holds_rows, inline="always")
def _holds_rows_by_type(structured):
    rows = structured.ndim == 2  # known when compiling: a run without a table compiles no table code
    return lambda structured: rows


@overload(pricing.record_row, inline="always")
def _record_row_by_type(structured):
    if structured.ndim == 2:
        return lambda structured: structured[0]
    return lambda structured: structured


@overload(pricing.profile_price, inline="always")
def _profile_price_of_terms(profile, num_seqs, batched_tokens, kv_tokens):
    return pricing.terms_step_time


@overload(pricing.prices_shape, inline="always")
def _prices_shape_of_terms(profile):
    return lambda profile: profile.kind == pricing.PROFILE_STRUCTURED


@overload(pricing.shape_price)
def _shape_price_of_terms(profile, decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_attn):
    return pricing.terms_shape_time


_price = njit(cache=True, inline="always")(pricing.terms_step_time)  # a ProfileTerms record's step time
_target_time = njit(cache=True, inline="always")(pricing.target_time)  # a target step's price by its shape
_draft_time = njit(cache=True)(pricing.draft_time)
_tree_draft_time = njit(cache=True)(tree_rules.tree_draft_time)  # a static tree's drafting, one pass per depth
draft_group = njit(cache=True)(pricing.draft_group)  # the sub-batch each drafter is charged for
group_switches = njit(cache=True)(pricing.group_switches)  # whether a drafter pays the switching cost
_drafters_prefill_time = njit(cache=True)(pricing.drafters_prefill_time)
_sd_step_time = njit(cache=True, inline="always")(pricing.sd_step_time)
_engine_step_time = njit(cache=True, inline="always")(pricing.engine_step_time)  # vLLM V1's proposer per step
_sampling_seqs = njit(cache=True)(emission_rules.sampling_seqs)  # the requests that sample a token in a step
_step_estimate = njit(cache=True, inline="always")(pricing.step_estimate)
_decode_tokens = njit(cache=True, inline="always")(pricing.decode_tokens)  # a step estimate's decode tokens at k


@njit(cache=True)
def _take_plan(plan, n_pre, now, run, n_run, requeued, nq, admit, used, peak, prompt, gen, blocks, prefill_left,
               prefill_done, first_sched):
    """plan[:n_pre] taken (rules/prefill_plan.take_prefill_plan), its new requests running
    (rules/queue.admit_planned) and its blocks counted in the kernel's used blocks and their peak. Returns (n_run, nq,
    admit, used, peak)."""
    used += take_prefill_plan(plan, n_pre, prompt, gen, blocks, prefill_left, prefill_done, first_sched, now)
    if used > peak:
        peak = used
    n_run, nq, admit = admit_planned(plan, n_pre, run, n_run, requeued, nq, admit)
    return n_run, nq, admit, used, peak


@njit(cache=True)
def _growth_of_running(run, n_run, dec, n_dec, newb, run_extra):
    """Each running request's KV growth (admission order): a decode's newb[j], nothing for one that prefills or
    whose decode the budget cut (dec[:n_dec] runs in `run`'s order)."""
    j = 0
    for q in range(n_run):
        if j < n_dec and run[q] == dec[j]:
            run_extra[q] = newb[j]
            j += 1
        else:
            run_extra[q] = 0


@njit(cache=True)
def _kept_decodes(run, keep, dec, n_dec):
    """How many of the step's decodes (a prefix: they run in `run`'s order) are among run[:keep]."""
    j = 0
    for q in range(keep):
        if j < n_dec and run[q] == dec[j]:
            j += 1
    return j


@njit(cache=True)
def _step_times(times, k_lo, k_hi, n, kv, separate, lim, plan, waitq, free, n_run, run, requeued, nq, admit, ptr,
                prompt, gen, blocks, prefill_left, prefill_done, target, cost, profile, pass_costs, pass_profiles,
                overhead, pf_order, proposers, pipelined=False):
    """The step-time estimate a policy reads (drafter, k) for k = k_lo..k_hi into
    times[k]: the target's price of a step in which all `n` decoding sequences verify k drafts of the drafter (cost,
    profile), with the prompt chunks a plan would add after their tokens (rules/queue.queue_window's window of the
    waiting queue copied once, not per k),
    then the step-estimate rule with the prompt passes (pass_costs, pass_profiles, pf_order) and vLLM V1's proposer
    over the step's tokens and its sampling sequences: the slots of those records in the mask `proposers` (the
    slots' records, or adaptive-k's one, whose only drafter is slot 0). Adaptive-k asks
    k = 0..k_max of slot 0, whose one record is its only prompt pass (not the padded tuples, which a call would copy
    and reference-count); combine-adaptive one k at a time."""
    preview = separate == 0 and (n_run > n or nq > 0 or admit < ptr)  # no prompt left, nobody waiting: nothing
    m = 0
    if preview:
        m = _queue_window(lim.max_num_seqs, waitq, n_run, requeued, nq, None, admit, ptr)  # arrivals in index order
    for k in range(k_lo, k_hi + 1):
        decoding = _decode_tokens(n, k)
        n_pre, pt, pkv, pattn = 0, 0, 0, 0
        if preview:  # the prompt chunks a mixed step would add after the decodes' tokens
            n_pre, pt, pkv, pattn = _plan_prefills(lim, run, n_run, waitq, m, n_run, decoding, free, prompt, gen,
                                                   prefill_left, prefill_done, blocks, plan)
        verify = _target_time(target, n, decoding - n, kv, n_pre, pt, pkv, pattn)
        proposer = 0.0
        if proposers:  # vLLM V1's proposers over the decodes and the chunks that end their prompt
            ending = 0
            for j in range(n_pre):
                if plan.last[j]:
                    ending += 1
            for g in range(len(pass_costs)):
                if proposers >> g & 1:
                    t = _engine_step_time(pass_costs[g], pass_profiles[g], n + ending, decoding + pt, kv + pkv)
                    if t > 0:
                        proposer += t
        times[k] = _step_estimate(verify, cost, profile, pass_costs, pass_profiles, pf_order, overhead, proposer,
                                  pipelined, n, kv, k, n_pre, pt, pkv)


register_jitable(sampled_acceptance.tv_window_rows)
register_jitable(sampled_acceptance.leading_successes)
sample_group = njit(cache=True)(sampled_rules.sample_group)  # sampled verification of one drafter's proposals
_block_divergence = njit(cache=True)(sampled_acceptance.block_divergence)  # MetaSD's BD reward of one proposal


# the built-in policies' rules, written once in policies/ as plain Python and compiled here
_estimate_value = njit(cache=True)(estimate_value)
_estimate_update = njit(cache=True)(estimate_update)
for _rule in (best_k_rule, top_k_rule, estimate_value):
    register_jitable(_rule)
_adaptive_ks = njit(cache=True)(adaptive_ks)  # adaptive-k's k per request (AdaptiveKPolicy.ks)
for _rule in (bandit_rules.sliding_update, bandit_rules.epsilon_greedy_arm, bandit_rules.random_arm,
              bandit_rules.thompson_arm, bandit_rules.thompson_update, bandit_rules.exp3_probabilities,
              bandit_rules.exp3_arm, bandit_rules.exp3_update, bandit_rules.bandit_draws):
    register_jitable(_rule)
for _rule in (bandit_rules.ucb_arm_rule, bandit_rules.ucb_update):  # inlined in the step's loops
    register_jitable(inline="always")(_rule)
bandit_draws = njit(cache=True)(bandit_rules.bandit_draws)
_bandit_choices = njit(cache=True)(bandit_rules.bandit_choices)  # a step's choices (BanditPolicy.choose_batch)
_bandit_updates = njit(cache=True)(bandit_rules.bandit_updates)  # a step's updates (BanditPolicy.observe_batch)
_combine_match = njit(cache=True)(combine_match_rule)
register_jitable(leviathan_tokens)
_combine_adaptive = njit(cache=True)(combine_adaptive_rule)
_tokens_per_time = njit(cache=True)(tokens_per_time)
register_jitable(positive_cost)
_drafted_costs_ok = njit(cache=True)(drafted_costs_ok)
_least_cost_actions = njit(cache=True)(least_cost_actions)
_cost_ceiling = njit(cache=True)(cost_ceiling)


@njit(cache=True)
def _make_plan(i, lo, n_i, arms, t_plain, price, reach, plan_row, plan_free, plan_d, plan_k, plan_value):
    """PlanFollower.plan_of at request i's first decode (min-time): its exact plan (least_cost_actions) over its
    trace's positions lo..lo + n_i - 1 at this step's costs (`t_plain`; price[a, m], a in the policy's drafter order),
    into a free row. Returns 0, ERR_PLAN_COSTS where the costs fail StepCosts' check, or ERR_PLAN_ROWS."""
    if not positive_cost(t_plain):
        return ERR_PLAN_COSTS
    for a in range(arms):
        top = 0
        for p in range(lo, lo + n_i):
            top = max(top, reach[a, p])
        if not _drafted_costs_ok(price[a], top):
            return ERR_PLAN_COSTS
    if plan_free[0] == 0:
        return ERR_PLAN_ROWS
    row = plan_free[plan_free[0]]
    plan_free[0] -= 1
    _least_cost_actions(reach[:arms, lo:lo + n_i], price, t_plain, n_i, plan_d[row], plan_k[row], plan_value[row])
    plan_row[i] = row
    return 0


@njit(cache=True)
def _free_plans(done, n_done, plan_row, plan_free):
    """The plan rows of the requests finished (done[:n_done]) are free again (PlanFollower.forget)."""
    for j in range(n_done):
        i = done[j]
        row = plan_row[i]
        if row >= 0:
            plan_free[0] += 1
            plan_free[plan_free[0]] = row
            plan_row[i] = -1


@njit(cache=True)
def _arm_of_slot(arm_slot, arms, g):
    """The bandit arm whose drafter is slot g."""
    for a in range(arms):
        if arm_slot[a] == g:
            return a
    return -1


@njit(cache=True)
def _bd_rewards(idx, n, slot, proposed, tv, first, gen, last, reward):
    """The BD reward (MetaSD's block divergence) of each drafting request idx[j] of idx[:n], over the
    positions it drafted (before its tokens move them), into reward[j]. Both kernels call it."""
    for j in range(n):
        g = slot[j]
        if g >= 0 and proposed[j] > 0:
            i = idx[j]
            reward[j] = _block_divergence(tv[g], first[i], gen[i], last[i] + 1, proposed[j])


@njit(cache=True)
def _finish_requests(done, n_done, now, finish, used, blocks, run, n_run, n_fin, closed, n_sub, arrival, client_of,
                     think):
    """The step's finished requests: the finish rules (rules/finish.release_finished, rules/queue.drop_finished) and,
    closed loop, each client's next request (rules/arrivals.submit_next). Returns (used, n_run, n_fin, n_sub)."""
    used -= release_finished(done, n_done, now, finish, blocks)
    n_fin += n_done
    if closed:
        for j in range(n_done):
            n_sub = arrival_rules.submit_next(arrival, client_of, n_sub, now + think, client_of[done[j]])
    return used, drop_finished(run, n_run, finish), n_fin, n_sub


@njit(cache=True)
def _turn(now, busy, forward, ptr, stepped, gap, async_sched, n_run, nq, admit, n_sub, arrival, until, room, n_fin,
          stop_finished, routed):
    """Both kernels' engine-loop turn before a step (a server's turn between steps, as SimPy events): the rules'
    engine-loop gap after a busy step (hidden behind the last forward under async scheduling), the arrivals due
    pulled (rules/arrivals.pull_due: submissions in index order, their times in order), an
    idle wait for the next one (Server._idle). Returns (code, now, ptr, busy): STEP to take a step at `now`; PAUSED
    once this call took a step (`stepped`) and the next would start at or after `until` (the gap not yet taken; a
    replica's caller takes the gap before a call, so a call never starts busy), or a replica (`routed`) is idle with no arrival known; FULL without `room` in the
    buffers; STOPPED at `stop_finished` finishes; ERR_STALL idle with nothing to come. `nq`: preempted requests
    waiting ahead of the arrivals."""
    while True:
        wait = _engine_loop_gap(busy == 1, gap, n_run, nq + ptr - admit)
        if wait > 0.0 and async_sched:
            wait = _overlapped_gap(wait, forward)
        if now + wait >= until and stepped:
            return PAUSED, now, ptr, busy
        if not room:
            return FULL, now, ptr, busy
        if n_fin >= stop_finished:
            return STOPPED, now, ptr, busy
        if wait > 0.0:
            now = now + wait
        busy = 0
        ptr = arrival_rules.pull_due(arrival, ptr, n_sub, now)
        if n_run > 0 or nq > 0 or admit < ptr:
            return STEP, now, ptr, busy
        if ptr >= n_sub:
            return (PAUSED if routed else ERR_STALL), now, ptr, busy
        if arrival[ptr] > now:  # idle until the next arrival, landing on its time exactly (now + (next - now)
            now = arrival[ptr]  # may round off it, where a replica woken by its routing starts at it)


@njit(cache=True)
def _save_state(st, ptr, nq, admit, n_run, n_fin, step_no, used, peak, r, ni, n_sub, now, busy, forward):
    """The loop's scalars back into the run's state record (kernel_records.RUN_STATE), so the caller can empty the
    buffers and continue."""
    st.ptr = ptr
    st.requeued = nq
    st.admit = admit
    st.n_run = n_run
    st.finished = n_fin
    st.step = step_no
    st.used = used
    st.peak = peak
    st.rows = r
    st.itl = ni
    st.submitted = n_sub
    st.now = now
    st.busy = busy
    st.forward = forward


@njit(cache=True)
def run_steps(wl, replay, costs, settings, state, req, pol, bufs, scratch, stop_finished, until):
    """Steps until done, a buffer is full, `stop_finished` requests finished or (after a step) the next step would
    start at or after `until`; returns the code. The records are simulator/engine/kernel_records.py's: the
    Workload, Replay, Costs, the SETTINGS record array `settings` (settings_record), the RUN_STATE record array
    `state`, Requests, PolicyState, StepBuffers and Scratch (working arrays for max_seqs sequences and k_max at least).

    Drafter slots g = 0..nslot-1 (ascending drafter index): draft cost `drafts[g]` (rules.pricing.DraftTerms), latency
    profile `dprofiles[g]` (the target's: `target`; rules.pricing.ProfileTerms; both tuples padded to a multiple of
    compiled_run.SLOT_PAD), prompt passes in the policy's order `pf_order`;
    `tab[rowof[g, k], 0 / 1, f]` the proposed / accepted drafts when slot g is asked for k at flat trace position f
    (traces/acceptance.py); `cap[f]` the n-gram match length the policy reads."""
    arrival, client_of, prompt, out, first, last = wl.arrival, wl.client_of, wl.prompt, wl.out, wl.first, wl.last
    tab, rowof, cap = replay.tab, replay.rowof, replay.cap
    choice_slot, choice_k = replay.choice_slot, replay.choice_k
    target, drafts, dprofiles, pf_order = costs.target, costs.drafts, costs.dprofiles, costs.pf_order
    est_s, est_f, arm_counts, arm_sums = pol.est_s, pol.est_f, pol.arm_counts, pol.arm_sums
    arm_slot, usage, chosen_k = pol.arm_slot, pol.usage, pol.chosen_k
    plan_row, plan_free, plan_d, plan_k, plan_value = pol.plan_row, pol.plan_free, pol.plan_d, pol.plan_k, pol.plan_value
    run, gen, prefill_left, prefill_done, blocks = req.run, req.gen, req.prefill_left, req.prefill_done, req.blocks
    last_emit, first_sched, first_token, finish = req.last_emit, req.first_sched, req.first_token, req.finish
    dsteps, dprop, dacc, last_slot = req.dsteps, req.dprop, req.dacc, req.last_slot
    requeued, preempted = req.requeued, req.preempted
    arrived = None  # the arrivals in index order (rules/queue.py)
    rows, itl = bufs.rows, bufs.itl
    n = len(arrival)
    cfg = settings[0]
    sd, policy, k_fixed, nslot, k_max = cfg.sd, cfg.policy, cfg.k, cfg.nslot, cfg.k_max
    max_seqs, B = cfg.max_seqs, cfg.budget
    chunked, separate, bs, total_blocks = cfg.chunked, cfg.separate, cfg.block_size, cfg.total_blocks
    decode_budget = cfg.decode_budget  # the decode side's budget (rules/decode_budget.decode_side_budget)
    shared, has_cap, min_match = cfg.shared, cfg.has_cap, cfg.min_match
    k_ngram, k_eagle, ngram_slot = cfg.k_ngram, cfg.k_eagle, cfg.ngram_slot
    overhead, switch_cost = cfg.overhead, cfg.switch_cost
    prior, prior_eagle, weight, decay = cfg.prior, cfg.prior_eagle, cfg.prior_weight, cfg.decay
    arms, bandit, discount, exp3_gamma = cfg.arms, cfg.bandit, cfg.discount, cfg.exp3_gamma
    policy_rng = replay.policy_rng
    closed, think = cfg.closed, cfg.think
    gap = cfg.gap
    lookahead, async_sched, sampled, bd, tree = cfg.lookahead, cfg.async_sched, cfg.sampled, cfg.bd, cfg.tree
    # vLLM V1's proposers priced per engine step (`engine_step` costs): a mask of their slots (0: the run has none)
    proposers = cfg.proposers
    st = state[0]
    busy = st.busy
    forward = st.forward
    n_sub = st.submitted  # arrivals known so far (open loop: all; closed loop: those its clients sent)
    ptr, nq, admit, n_run, n_fin = st.ptr, st.requeued, st.admit, st.n_run, st.finished
    step_no, used, peak, r, ni = st.step, st.used, st.peak, st.rows, st.itl
    now = st.now
    step0 = step_no
    cap_rows, cap_itl = len(rows.step), len(itl)
    dec, ctx, flat, slot, kk = scratch.dec, scratch.ctx, scratch.flat, scratch.slot, scratch.kk
    prop, acc, cut, waitq, done = scratch.prop, scratch.acc, scratch.cut, scratch.waitq, scratch.done
    newb, hold, slot_times, reward = scratch.newb, scratch.hold, scratch.times, scratch.reward
    played = scratch.played  # a bandit's arm per decode this step (-1: it learns nothing)
    price = scratch.price  # the exact plans' costs (POL_PLAN)
    times = slot_times[0]  # one drafter's estimates (adaptive-k, combine-adaptive)
    slot_k, chosen, oracle_switch = replay.slot_k, pol.chosen, cfg.oracle_switch
    run_extra = scratch.run_extra
    lim = PrefillLimits(max_seqs, B, chunked, bs, lookahead)
    plan = scratch.plan  # the step's prefill plan (and a policy's preview of it)
    pre, chunk = plan.request, plan.tokens
    code = DONE
    routed = cfg.routed
    while n_fin < n:
        code, now, ptr, busy = _turn(now, busy, forward, ptr, step_no > step0, gap, async_sched, n_run, nq, admit,
                                     n_sub, arrival, until, r + STEP_ROWS <= cap_rows and ni + max_seqs <= cap_itl,
                                     n_fin, stop_finished, routed)
        if code != STEP:
            break
        code = DONE
        # ---- plan
        n_dec = 0
        n_pre = 0
        kv_est = 0
        prop_sum = 0
        acc_sum = 0
        pre_tokens = 0
        pre_kv = 0
        pre_attn = 0
        only_prefill = False
        if policy == POL_GIVEN and separate and st.pending == 1:
            code = HEAR
            break
        if separate and (nq > 0 or admit < ptr) and n_run < max_seqs:  # a prefill-only step: admit first
            # the plan's chunks and their sums (PlanSums)
            n_pre, pre_tokens, pre_kv, pre_attn = plan_step_prefills(lim, plan, waitq, 0, True, run, n_run, requeued,
                                                                     nq, arrived, admit, ptr, total_blocks - used,
                                                                     prompt, gen, prefill_left, prefill_done, blocks)
            n_run, nq, admit, used, peak = _take_plan(plan, n_pre, now, run, n_run, requeued, nq, admit, used, peak,
                                                      prompt, gen, blocks, prefill_left, prefill_done, first_sched)
            only_prefill = n_pre > 0
        if only_prefill:  # the target prefills, then the drafters' own pass on its devices
            tokens = pre_tokens
            kv = pre_kv
            target_t = _target_time(target, 0, 0, 0, n_pre, pre_tokens, pre_kv, pre_attn)
            dpt = 0.0
            if nslot > 0:
                dpt = _drafters_prefill_time(drafts, dprofiles, pf_order, n_pre, tokens, kv)
            target_end = target_t + overhead
            start = now
            forward = target_end + dpt
            now = now + forward
            first_tokens, n_done = advance_prefills(pre, chunk, n_pre, prefill_left, prefill_done, gen, last_emit,
                                                    first_token, now, out, done, 0)
            _row(rows, r, step_no, P_PREFILL, start, start + target_end, n_pre, pre_tokens, tokens, kv,
                 used, 0, 0, first_tokens, 0)
            r += 1
            if dpt > 0:
                _row(rows, r, step_no, P_DRAFT_PREFILL, start + target_end, start + target_end + dpt,
                     n_pre, pre_tokens, pre_tokens, kv, used, 0, 0, 0, 0)
                r += 1
        else:
            for j in range(n_run):  # decoding: running with no prompt left, admission order
                i = run[j]
                if prefill_left[i] == 0:
                    dec[n_dec] = i
                    cx = prompt[i] + gen[i]
                    ctx[n_dec] = cx
                    kv_est += cx
                    flat[n_dec] = min(first[i] + gen[i], last[i])  # its trace position, clipped
                    n_dec += 1
            # ---- the policy's (drafter slot, k) per decoding request
            if nslot == 0:
                for j in range(n_dec):
                    slot[j] = -1
                    kk[j] = 0
            elif policy == POL_FIXED:
                for j in range(n_dec):
                    slot[j] = 0
                    kk[j] = k_fixed
            elif policy == POL_ADAPTIVE:  # AdaptiveKPolicy.step_times, then best_k per request
                if n_dec > 0:
                    _step_times(times, 0, k_max, n_dec, kv_est, separate, lim, plan, waitq, total_blocks - used, n_run,
                                run, requeued, nq, admit, ptr, prompt, gen, blocks, prefill_left, prefill_done,
                                target, drafts[0], dprofiles[0], (drafts[0],), (dprofiles[0],), overhead, pf_order,
                                proposers)
                _adaptive_ks(dec, n_dec, est_s, est_f, shared, prior, weight, times, k_max, has_cap, cap, flat, kk)
                for j in range(n_dec):
                    slot[j] = 0 if kk[j] > 0 else -1
            elif policy == POL_RATE:  # CombineAdaptivePolicy.choose: each request's two estimates (2 i + slot)
                eagle = 1 - ngram_slot
                t_eagle = 0.0
                if n_dec > 0:  # the step's estimates, each priced once (times[k]: the n-gram at k; -1: not yet)
                    _step_times(times, k_eagle, k_eagle, n_dec, kv_est, separate, lim, plan, waitq, total_blocks - used,
                                n_run, run, requeued, nq, admit, ptr, prompt, gen, blocks, prefill_left,
                                prefill_done, target, drafts[eagle], dprofiles[eagle], drafts, dprofiles, overhead,
                                pf_order, proposers)
                    t_eagle = times[k_eagle]
                    times[:] = -1.0
                for j in range(n_dec):
                    kn = k_ngram
                    if has_cap:
                        kn = min(k_ngram, np.int64(cap[flat[j]]))
                    t_ngram = 1.0
                    if kn > 0:
                        if times[kn] < 0.0:
                            _step_times(times, kn, kn, n_dec, kv_est, separate, lim, plan, waitq, total_blocks - used,
                                        n_run, run, requeued, nq, admit, ptr, prompt, gen, blocks,
                                        prefill_left, prefill_done, target, drafts[ngram_slot], dprofiles[ngram_slot],
                                        drafts, dprofiles, overhead, pf_order, proposers)
                        t_ngram = times[kn]
                    x = 2 * dec[j]
                    use_ngram, kk[j] = _combine_adaptive(
                        _estimate_value(est_s[x + eagle], est_f[x + eagle], prior_eagle, weight), k_eagle, t_eagle,
                        _estimate_value(est_s[x + ngram_slot], est_f[x + ngram_slot], prior, weight), kn, t_ngram)
                    slot[j] = ngram_slot if use_ngram else eagle
            elif policy == POL_GREEDY_ORACLE:  # OracleBestDrafterPolicy.pick per request (its drafters' order)
                t_plain = 0.0
                if n_dec > 0:  # the step's estimates, each priced once (slot_times[g, k]; -1: not yet)
                    slot_times[:nslot] = -1.0
                    _step_times(slot_times[0], 0, 0, n_dec, kv_est, separate, lim, plan, waitq, total_blocks - used,
                                n_run, run, requeued, nq, admit, ptr, prompt, gen, blocks, prefill_left,
                                prefill_done, target, drafts[0], dprofiles[0], drafts, dprofiles, overhead, pf_order,
                                proposers)
                    t_plain = slot_times[0, 0]
                for j in range(n_dec):
                    i = dec[j]
                    best, best_k = -1, 0
                    best_rate = _tokens_per_time(0, t_plain, 0.0)
                    for a in range(arms):
                        g = arm_slot[a]
                        kg = slot_k[g, flat[j]]
                        if kg <= 0:
                            continue
                        if slot_times[g, kg] < 0.0:
                            _step_times(slot_times[g], kg, kg, n_dec, kv_est, separate, lim, plan, waitq,
                                        total_blocks - used, n_run, run, requeued, nq, admit, ptr, prompt, gen,
                                        blocks, prefill_left, prefill_done, target, drafts[g], dprofiles[g], drafts,
                                        dprofiles, overhead, pf_order, proposers)
                        switch = 0.0
                        if chosen[i] >= 0 and chosen[i] != g:
                            switch = oracle_switch
                        rate = _tokens_per_time(kg, slot_times[g, kg], switch)
                        if rate > best_rate:
                            best, best_k, best_rate = g, kg, rate
                    slot[j] = best
                    kk[j] = best_k
                    if best >= 0:
                        chosen[i] = best
            elif policy == POL_PLAN:  # PlanFollower.choice: the plan made at the request's first decode
                t_plain = -1.0
                for j in range(n_dec):
                    i = dec[j]
                    if plan_row[i] < 0:
                        if t_plain < 0.0:  # the step's estimates, priced once: plain, then m = 1..k_max per drafter
                            _step_times(slot_times[0], 0, 0, n_dec, kv_est, separate, lim, plan, waitq,
                                        total_blocks - used, n_run, run, requeued, nq, admit, ptr, prompt, gen,
                                        blocks, prefill_left, prefill_done, target, drafts[0], dprofiles[0], drafts,
                                        dprofiles, overhead, pf_order, proposers)
                            t_plain = slot_times[0, 0]
                            for a in range(arms):
                                g = arm_slot[a]
                                _step_times(slot_times[g], 1, k_max, n_dec, kv_est, separate, lim, plan, waitq,
                                            total_blocks - used, n_run, run, requeued, nq, admit, ptr, prompt,
                                            gen, blocks, prefill_left, prefill_done, target, drafts[g], dprofiles[g],
                                            drafts, dprofiles, overhead, pf_order, proposers)
                                price[a, 1:] = slot_times[g, 1:]
                                _cost_ceiling(price[a], k_max)  # every request's prefix of it is its own ceiling
                        code = _make_plan(i, first[i], last[i] - first[i] + 1, arms, t_plain, price, slot_k,
                                          plan_row, plan_free, plan_d, plan_k, plan_value)
                        if code != 0:
                            break
                    row, p = plan_row[i], flat[j] - first[i]  # the position the replay reads (trace_position)
                    a = plan_d[row, p]
                    slot[j] = arm_slot[a] if a >= 0 else -1
                    kk[j] = plan_k[row, p]
                if code != 0:
                    break
                code = DONE
            elif policy == POL_BANDIT:  # BanditPolicy.choose_batch; shared and drawing nothing: one choice per step
                _bandit_choices(dec, n_dec, arm_counts, arm_sums, arm_slot, arms, shared, bandit, cfg.beta, cfg.epsilon,
                                exp3_gamma, policy_rng, slot)
                for j in range(n_dec):
                    kk[j] = k_fixed
            elif policy == POL_BATCH:  # KByBatchPolicy.k_for(batch size), tabulated by its own rule
                kb = replay.batch_k[n_dec]
                for j in range(n_dec):
                    slot[j] = 0 if kb > 0 else -1
                    kk[j] = kb
            elif policy == POL_TABLE:  # Policy.choose reads the same table (GroundTruthPolicy.tabulated)
                for j in range(n_dec):
                    slot[j] = choice_slot[flat[j]]
                    kk[j] = choice_k[flat[j]]
            elif policy == POL_GIVEN:  # a Python policy's choices (compiled_run.CompiledRun._choose), asked for here
                if n_dec > 0 and st.given == 0:
                    code = CHOOSE
                    break
                if st.pending == 1:  # no decodes: the prompt chunks' plan would overwrite the last step's outcome
                    code = HEAR
                    break
                st.given = 0
                for j in range(n_dec):
                    slot[j] = chosen[dec[j]]
                    kk[j] = chosen_k[dec[j]]
            else:
                for j in range(n_dec):
                    use_ngram, kk[j] = _combine_match(np.int64(cap[flat[j]]), min_match, k_ngram, k_eagle)
                    slot[j] = ngram_slot if use_ngram else 1 - ngram_slot
            for j in range(n_dec):  # proposals capped (traces/acceptance.proposed_tokens) and their replay
                g = slot[j]
                if g >= 0:
                    row = rowof[g, kk[j]]
                    prop[j] = np.int64(tab[row, 0, flat[j]])
                    acc[j] = np.int64(tab[row, 1, flat[j]])
                else:
                    prop[j] = 0
                    acc[j] = 0
            n_dec = _fit_proposals(prop, acc, n_dec, decode_budget, cut)  # the decode budget
            for j in range(n_dec):  # KV for the context, its drafts and the lookahead slots
                hold[j] = decode_hold(ctx[j], prop[j], lookahead)
            grow = kv_growth(dec, n_dec, hold, blocks, bs, newb)
            allow_new = True
            if grow > total_blocks - used:  # preempt the newest running requests until the rest grows
                _growth_of_running(run, n_run, dec, n_dec, newb, run_extra)
                keep = preempt_keep(run, n_run, run_extra, blocks, total_blocks - used)
                used -= preempt_suffix(run, keep, n_run, blocks, prefill_left, prefill_done, preempted)
                nq = requeue_preempted(run, keep, n_run, requeued, nq)
                n_dec = _kept_decodes(run, keep, dec, n_dec)
                n_run = keep
                grow = 0
                for j in range(n_dec):
                    grow += newb[j]
                allow_new = False  # a step that preempted admits nobody
            if grow > 0:
                used += grow
                if used > peak:
                    peak = used
                add_blocks(dec, n_dec, newb, blocks)
            if tree:  # each kept tree (its leading nodes) against its rank row
                accept_tree(replay.tree_parent, replay.tree_rank, replay.tree_ranks, slot, flat, prop, n_dec, acc)
            if sampled:  # each slot's kept drafts checked against the generator's draws
                for g in range(nslot):
                    sample_group(g, slot, prop, acc, dec, n_dec, gen, first, last, replay.tv[g], replay.rng)
            kv_est = 0
            for j in range(n_dec):
                prop_sum += prop[j]
                acc_sum += acc[j]
                kv_est += ctx[j]
            if not separate:  # the prompt chunks after the decodes' tokens (none new if it preempted)
                tokens_used = prop_sum + n_dec
                if n_run > n_dec or (allow_new and (nq > 0 or admit < ptr) and n_run < max_seqs):
                    n_pre, pre_tokens, pre_kv, pre_attn = plan_step_prefills(lim, plan, waitq, tokens_used, allow_new,
                                                                             run, n_run, requeued, nq, arrived, admit,
                                                                             ptr, total_blocks - used, prompt, gen,
                                                                             prefill_left, prefill_done, blocks)
                    n_run, nq, admit, used, peak = _take_plan(plan, n_pre, now, run, n_run, requeued, nq, admit, used,
                                                              peak, prompt, gen, blocks, prefill_left, prefill_done,
                                                              first_sched)
            nseq = n_dec + n_pre
            if nseq == 0:
                code = ERR_STALL
                break
            tokens = prop_sum + n_dec + pre_tokens
            kv = kv_est + pre_kv
            verify_t = _target_time(target, n_dec, prop_sum, kv_est, n_pre, pre_tokens, pre_kv, pre_attn)
            # drafting: each slot (ascending drafter index) once for its members that propose
            draft_t = 0.0
            drf = 0
            n_act = 0
            for g in range(nslot):
                n_g, p_g, k_g, kv_g = draft_group(g, slot, prop, kk, ctx, n_dec)
                if n_g > 0 and tree:  # a static tree: one drafter pass per depth
                    draft_t += _tree_draft_time(drafts[g], dprofiles[g], n_g, p_g, replay.tree_passes, kv_g,
                                                verify_t)
                    drf |= 1 << g
                    n_act += n_g
                elif n_g > 0:
                    draft_t += _draft_time(drafts[g], dprofiles[g], n_g, p_g, k_g, kv_g, verify_t)
                    drf |= 1 << g
                    n_act += n_g
                if n_g > 0 and switch_cost > 0.0 and group_switches(g, slot, prop, dec, n_dec, last_slot):
                    draft_t += switch_cost
            if proposers:  # vLLM V1's proposers: each once over the step's tokens (its sampling ones)
                n_samp = _sampling_seqs(n_dec, pre, chunk, n_pre, prefill_left)
                t_es = 0.0
                for g in range(nslot):
                    if proposers >> g & 1:
                        t_g = _engine_step_time(drafts[g], dprofiles[g], n_samp, tokens, kv)
                        if t_g > 0:
                            t_es += t_g
                            if not drf >> g & 1:
                                drf |= 1 << (nslot + 1 + g)
                draft_t += t_es
            dpt = 0.0  # the drafters' own prompt pass
            if nslot > 0 and n_pre > 0:
                dpt = _drafters_prefill_time(drafts, dprofiles, pf_order, n_pre, pre_tokens, pre_kv)
            duration = _sd_step_time(draft_t, verify_t, overhead, dpt)
            start = now
            forward = duration
            now = now + duration
            # ---- the step's outcome
            if bd:  # MetaSD's reward over the drafted positions, before the tokens move them
                _bd_rewards(dec, n_dec, slot, prop, replay.tv, first, gen, last, reward)
            emitted_sum, ni, n_done = emit_decoded(dec, n_dec, acc, prop, now, out, gen, last_emit, itl, ni, dsteps,
                                                   dprop, dacc, done, 0)
            for j in range(n_dec):
                i = dec[j]
                g = slot[j]
                if g >= 0:
                    usage[g] += 1
                    if switch_cost > 0.0:  # the drafter it drafted with (the switching cost reads it)
                        last_slot[i] = g
                    if policy == POL_ADAPTIVE or policy == POL_RATE:  # feedback, admission order (Policy.observe)
                        x = 0 if shared else i
                        if policy == POL_RATE:  # CombineAdaptivePolicy.observe: the drafter's own estimate
                            x = 2 * i + g
                        est_s[x], est_f[x] = _estimate_update(est_s[x], est_f[x], acc[j], prop[j], decay)
                else:
                    usage[nslot] += 1
                if policy == POL_BANDIT:  # BanditPolicy.observe_batch: each drafting request's arm and reward (BD, or
                    played[j] = _arm_of_slot(arm_slot, arms, g) if g >= 0 and prop[j] > 0 else -1  # BE accepted / N)
                    if played[j] >= 0 and not bd:
                        reward[j] = np.float64(acc[j]) / np.float64(prop[j])
            if policy == POL_BANDIT:
                _bandit_updates(dec, n_dec, arm_counts, arm_sums, arms, shared, bandit, played, reward, pol.ring_arm,
                                pol.ring_reward, pol.seen, discount, exp3_gamma)
            first_tokens, n_done = advance_prefills(pre, chunk, n_pre, prefill_left, prefill_done, gen, last_emit,
                                                    first_token, now, out, done, n_done)
            t0 = start
            if draft_t > 0:
                _row(rows, r, step_no, P_DRAFT, start, start + draft_t, n_act, 0, prop_sum, kv, used,
                     prop_sum, 0, 0, drf)
                r += 1
                t0 = start + draft_t
            phase = P_VERIFY if sd else P_DECODE
            if n_pre > 0 and n_dec > 0:
                phase = P_MIXED
            elif n_pre > 0:
                phase = P_PREFILL
            end = start + duration - dpt
            _row(rows, r, step_no, phase, t0, end, nseq, pre_tokens, tokens, kv, used, prop_sum, acc_sum,
                 emitted_sum + first_tokens, drf)
            r += 1
            if dpt > 0:
                _row(rows, r, step_no, P_DRAFT_PREFILL, end, start + duration, n_pre, pre_tokens,
                     pre_tokens, kv, used, 0, 0, 0, 1 << nslot)
                r += 1
        if n_done > 0:
            used, n_run, n_fin, n_sub = _finish_requests(done, n_done, now, finish, used, blocks, run, n_run, n_fin,
                                                         closed, n_sub, arrival, client_of, think)
            if policy == POL_PLAN:
                _free_plans(done, n_done, plan_row, plan_free)
        if policy == POL_GIVEN:  # what the Python policy hears of next (compiled_run.CompiledRun._heard)
            st.decoded, st.prefilled, st.ended, st.pending = n_dec, n_pre, n_done, 1
            scratch.heard[:n_dec] = dec[:n_dec]  # the next step's decodes take `dec` before the policy hears
        step_no += 1
        busy = 1
    _save_state(st, ptr, nq, admit, n_run, n_fin, step_no, used, peak, r, ni, n_sub, now, busy, forward)
    return code


@njit(cache=True)
def step_time_estimate(wl, costs, settings, state, req, scratch, n_dec, kv, g, k, pipelined):
    """The step-time estimate (drafter, k) at a Python policy's choice (POL_GIVEN, paused at CHOOSE): the step
    of the `n_dec` decoding requests over `kv` KV tokens, each verifying k drafts of slot g (k = 0: plain decoding),
    with the prompt chunks its plan would add: `_step_times`, as adaptive-k asks it (PSD: `pipelined`)."""
    cfg, st = settings[0], state[0]
    lim = PrefillLimits(cfg.max_seqs, cfg.budget, cfg.chunked, cfg.block_size, cfg.lookahead)
    times = scratch.times[0]
    _step_times(times, k, k, n_dec, kv, cfg.separate, lim, scratch.plan, scratch.waitq, cfg.total_blocks - st.used,
                st.n_run, req.run, req.requeued, st.requeued, st.admit, st.ptr, wl.prompt, req.gen, req.blocks,
                req.prefill_left, req.prefill_done, costs.target, costs.drafts[g], costs.dprofiles[g], costs.drafts,
                costs.dprofiles, cfg.overhead, costs.pf_order, cfg.proposers, pipelined)
    return times[k]
