"""The compiled two-batch PSD step loop (numba): a PSD run with one drafter at a fixed k, adaptive-k's rule over one
drafter, a bandit's rule over its drafters, or each request's drafter and k a policy in Python chose (POL_GIVEN:
compiled_run asks it at CHOOSE, over any of its drafters), greedy or sampled verification, a step at a time by the
rules (MineDraft: while the target verifies one side, the draft device drafts the other).

It reuses compiled_kernel's compiled rules (pricing, the prefill plan, emission, prefill progress, finish, KV growth,
and under `scheduler: vllm-v1` the decode budget over the verify side and the engine-loop gap after a busy step:
simulator/engine/rules/), PSD's side rules (rules/psd_sides.py: the side a new request joins, a step's split into
verified and drafted sides, the carry of the drafted side's proposals with the role flip; rules/psd_timing.py: the
step duration) and its row helpers; the rest that only PSD has are small @njit functions below, each naming what it
computes. tests/simulator/engine/test_rules_psd.py works PSD's steps by hand; test_compiled_psd.py checks its
policies against themselves asked in Python and random runs against the invariants.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from simulator.engine.compiled_kernel import (CHOOSE, DONE, ERR_STALL, HEAR, P_DRAFT, P_MIXED, P_PREFILL, P_VERIFY,
                                              POL_ADAPTIVE, POL_BANDIT, POL_GIVEN, STEP,
                                              _adaptive_ks, _arm_of_slot, _bandit_choices, _bandit_updates,
                                              _bd_rewards, _estimate_update, _step_times,
                                              _draft_time, _drafters_prefill_time, _finish_requests, _turn,
                                              _fit_proposals, _row, _save_state, _take_plan, _target_time,
                                              add_blocks, advance_prefills, assign_sides, emit_decoded, kv_growth,
                                              leave_sides, plan_step_prefills, preempt_keep, preempt_suffix,
                                              requeue_preempted, sample_group)
from simulator.engine.compiled_kernel import psd_step_time  # rules/psd_timing.psd_step_time, compiled
from simulator.engine.compiled_kernel import split_sides  # rules/psd_sides.split_sides, compiled
from simulator.engine.compiled_kernel import next_verify_side  # rules/psd_sides.next_verify_side, compiled
from simulator.engine.compiled_kernel import carry_proposals  # rules/psd_sides.carry_proposals, compiled
from simulator.engine.compiled_kernel import draft_group  # rules/pricing.draft_group, compiled
from simulator.engine.compiled_kernel import group_switches  # rules/pricing.group_switches, compiled
from simulator.engine.rules.prefill_plan import PrefillLimits

P_SYNC = 6  # compiled_run.PHASES[6]
STEP_ROWS = 5  # the most step-table rows one step writes (target; sync; pre-draft, draft, prompt pass)
NONE = -1  # PSDCarry.pend: no proposal pending (else the drafter slot that drafted it)


@njit(cache=True)
def _contexts(idx, n, prompt, gen, ctx):
    """The context of requests idx[:n] (prompt + output so far), written to `ctx`; returns their sum."""
    total = 0
    for j in range(n):
        ctx[j] = prompt[idx[j]] + gen[idx[j]]
        total += ctx[j]
    return total


@njit(cache=True, inline="always")  # per request or step: no call in the loop
def _side_draft_time(n, slot, props, ks, idx, ctx, nslot, drafts, dprofiles, switch_cost, last_slot, verify_t):
    """One side's drafting time: each drafter slot (ascending) priced once for its members
    (slot[j] == g) that propose (rules/pricing.draft_group over their contexts `ctx`), plus the switching cost where
    one of them last drafted with another (rules/pricing.group_switches). Returns (seconds, drafter bits)."""
    t = 0.0
    bits = 0
    for g in range(nslot):
        n_g, p_g, k_g, kv_g = draft_group(g, slot, props, ks, ctx, n)
        if n_g == 0:
            continue
        t += _draft_time(drafts[g], dprofiles[g], n_g, p_g, k_g, kv_g, verify_t)
        bits |= 1 << g
        if switch_cost > 0.0 and group_switches(g, slot, props, idx, n, last_slot):
            t += switch_cost
    return t, bits


@njit(cache=True)
def _position(run, n, i):
    """Where request i runs in run[:n] (admission order), or n when it does not."""
    for q in range(n):
        if run[q] == i:
            return q
    return n


@njit(cache=True, inline="always")  # per request or step: no call in the loop
def _asked(V, nv, D, nd, fallback, pend, ask):
    """The requests the policy is asked about, into `ask` in this order: in a fallback step the verify
    side's (V[:nv]) without a proposal, then the drafted side's D[:nd]. Returns how many."""
    m = 0
    if fallback:
        for j in range(nv):
            if pend[V[j]] == NONE:
                ask[m] = V[j]
                m += 1
    for j in range(nd):
        ask[m] = D[j]
        m += 1
    return m


@njit(cache=True)
def _adaptive_choices(ask, m, dec, n_dec, prompt, gen, first, last, cfg, est_s, est_f, cap, times, chosen, chosen_k,
                      ask_pos, ask_k, lim, plan, waitq, free, n_run, run, requeued, nq, admit, ptr, blocks,
                      prefill_left, prefill_done, target, cost, profile, overhead, pf_order):
    """Adaptive-k's choices for the requests asked, ask[:m] (_asked): the step-time estimates of all `n_dec` decoding
    requests at k = 0..k_max, pipelined, then each asked request's k at its next output position (the policy's own
    rule, adaptive_ks), into chosen (slot 0, or -1 at k 0) and chosen_k."""
    kv = 0
    for j in range(n_dec):
        kv += prompt[dec[j]] + gen[dec[j]]
    _step_times(times, 0, cfg.k_max, n_dec, kv, cfg.separate, lim, plan, waitq, free, n_run, run, requeued, nq,
                admit, ptr, prompt, gen, blocks, prefill_left, prefill_done, target, cost, profile, (cost,),
                (profile,), overhead, pf_order, -1, True)
    for j in range(m):
        i = ask[j]
        ask_pos[j] = min(first[i] + gen[i], last[i])
    _adaptive_ks(ask, m, est_s, est_f, cfg.shared, cfg.prior, cfg.prior_weight, times, cfg.k_max, cfg.has_cap, cap,
                 ask_pos, ask_k)
    for j in range(m):
        chosen[ask[j]] = 0 if ask_k[j] > 0 else -1
        chosen_k[ask[j]] = ask_k[j]


@njit(cache=True)
def _set_dev(rows, r, dev, sub):
    """Row `r`'s device (0 target, 1 drafter) and sub-batch."""
    rows.device[r] = dev
    rows.sub_batch[r] = sub


@njit(cache=True)
def run_psd_steps(wl, replay, costs, settings, psd_cfg, state, psd_state, carry, req, pol, bufs, scratch, psd_scratch,
                  stop_finished, until):
    """Steps a PSD run (the fixed policy's or adaptive-k's drafter slot 0, or the slots a bandit or a Python policy
    chose) until done, a buffer is full, `stop_finished` finished or the next step would start at or after `until`
    (run_steps' rule, compiled_kernel._turn: a cluster replica's next routing), or a replica is idle with no arrival
    known; the engine loop's gap after the last busy step carries over to the next call (the state's `busy`). The
    records are simulator/engine/kernel_records.py's, as run_steps takes them, plus PSDSettings, the PSD_STATE record
    array `psd_state`, PSDCarry and PSDScratch (its working arrays beside Scratch's); of PolicyState it writes `usage`,
    and adaptive-k's and a bandit's choices and learning state. Sampled verification draws for the verify side's kept
    drafts when verified, slot by slot (rules/sampled.sample_group); each verified request's last drafter is written for
    the switching cost (Requests.last_slot), which each side's drafting pays per drafter (rules/pricing.group_switches).
    """
    arrival, client_of, prompt, out, first, last = wl.arrival, wl.client_of, wl.prompt, wl.out, wl.first, wl.last
    tab, rowof = replay.tab, replay.rowof
    target, drafts, dprofiles, pf_order = costs.target, costs.drafts, costs.dprofiles, costs.pf_order
    usage, chosen, chosen_k = pol.usage, pol.chosen, pol.chosen_k
    given = settings[0].policy == POL_GIVEN  # a Python policy's choices (compiled_run: _choose, _heard)
    adaptive = settings[0].policy == POL_ADAPTIVE  # adaptive-k's rule, its choices made here into `chosen`
    bandit = settings[0].policy == POL_BANDIT  # a bandit's rule, its choices made here into `chosen`
    asked = given or adaptive or bandit  # each request's k (and drafter or none) from `chosen`, else the fixed k
    est_s, est_f, cap, times = pol.est_s, pol.est_f, replay.cap, scratch.times[0]
    side, pend, pend_k, pend_p, pend_a = carry.side, carry.pend, carry.pend_k, carry.pend_p, carry.pend_a
    run, gen, prefill_left, prefill_done, blocks = req.run, req.gen, req.prefill_left, req.prefill_done, req.blocks
    last_emit, first_sched, first_token, finish = req.last_emit, req.first_sched, req.first_token, req.finish
    dsteps, dprop, dacc, preempted, last_slot = req.dsteps, req.dprop, req.dacc, req.preempted, req.last_slot
    rows, itl = bufs.rows, bufs.itl
    n = len(arrival)
    cfg = settings[0]
    k_fixed, nslot = cfg.k, cfg.nslot
    max_seqs, B = cfg.max_seqs, cfg.budget
    chunked, separate, bs, total_blocks = cfg.chunked, cfg.separate, cfg.block_size, cfg.total_blocks
    overhead = cfg.overhead
    closed, think = cfg.closed, cfg.think
    st, pst = state[0], psd_state[0]
    decode_budget, gap, busy, forward = cfg.decode_budget, cfg.gap, st.busy, st.forward
    split_min, defer = psd_cfg.split_min, psd_cfg.defer_kv
    sync_s = psd_cfg.sync_s
    vs, fb_steps = pst.side, pst.fallback
    n_sub = st.submitted
    ptr, admit, n_run, n_fin = st.ptr, st.admit, st.n_run, st.finished
    requeued, nq = req.requeued, st.requeued  # preempted requests, at the waiting queue's front
    arrived = None  # the arrivals in index order (rules/queue.py)
    step_no, used, peak, r, ni = st.step, st.used, st.peak, st.rows, st.itl
    now = st.now
    cap_rows, cap_itl = len(rows.step), len(itl)
    row_k = rowof[0, k_fixed]
    dec, side_ctx, waitq, done = scratch.dec, scratch.ctx, scratch.waitq, scratch.done  # side_ctx: _side_draft_time
    newb, hold, cut, run_extra = scratch.newb, scratch.hold, scratch.cut, scratch.run_extra
    V, D, vd = psd_scratch.verified, psd_scratch.drafted, psd_scratch.grow
    vk, vp, va = psd_scratch.v_k, psd_scratch.v_prop, psd_scratch.v_acc
    vslot, vnew = psd_scratch.v_slot, psd_scratch.v_draft  # vnew: the slot that drafts it this step, or -1
    dk, dp, da, dslot = psd_scratch.d_k, psd_scratch.d_prop, psd_scratch.d_acc, psd_scratch.fixed_slot
    if asked:
        dslot = psd_scratch.d_slot
    ask, ask_slot, ask_pos, reward = psd_scratch.ask, psd_scratch.ask_slot, psd_scratch.ask_pos, scratch.reward
    played = scratch.played  # a bandit's arm per verified request this step (-1: it learns nothing)
    lim = PrefillLimits(max_seqs, B, chunked, bs, 0)  # PSD: MineDraft's KV, no lookahead slots
    plan = scratch.plan  # the step's prefill plan
    pre, chunk = plan.request, plan.tokens
    code = DONE
    step0 = step_no
    while n_fin < n:
        room = r + STEP_ROWS <= cap_rows and ni + max_seqs <= cap_itl
        code, now, ptr, busy = _turn(now, busy, forward, ptr, step_no > step0, gap, cfg.async_sched, n_run, nq,
                                     admit, n_sub, arrival, until, room, n_fin, stop_finished, cfg.routed)
        if code != STEP:
            break
        code = DONE
        n_pre = 0
        nv = 0
        pre_tokens = 0
        pre_kv = 0
        pre_attn = 0
        only_prefill = False
        if given and separate and st.pending == 1:
            code = HEAR
            break
        if separate and (nq > 0 or admit < ptr) and n_run < max_seqs:  # a prefill-only step: admit first
            n_old = n_run
            # the plan's chunks and their sums (PlanSums)
            n_pre, pre_tokens, pre_kv, pre_attn = plan_step_prefills(lim, plan, waitq, 0, True, run, n_run, requeued,
                                                                     nq, arrived, admit, ptr, total_blocks - used,
                                                                     prompt, gen, prefill_left, prefill_done, blocks)
            n_run, nq, admit, used, peak = _take_plan(plan, n_pre, now, run, n_run, requeued, nq, admit, used, peak,
                                                      prompt, gen, blocks, prefill_left, prefill_done, first_sched)
            assign_sides(side, run, n_old, n_run, vs)
            only_prefill = n_pre > 0
        if only_prefill:  # the target prefills, then the drafters' pass on the draft device
            target_t = _target_time(target, 0, 0, 0, n_pre, pre_tokens, pre_kv, pre_attn)
            dpt = _drafters_prefill_time(drafts, dprofiles, pf_order, n_pre, pre_tokens, pre_kv)
            target_end = target_t + overhead
            start = now
            forward = target_end + dpt
            now = now + forward
            first_tokens, n_done = advance_prefills(pre, chunk, n_pre, prefill_left, prefill_done, gen, last_emit,
                                                    first_token, now, out, done, 0)
            _row(rows, r, step_no, P_PREFILL, start, start + target_end, n_pre, pre_tokens, pre_tokens,
                 pre_kv, used, 0, 0, first_tokens, 0)
            _set_dev(rows, r, 0, vs)
            r += 1
            if dpt > 0:
                _row(rows, r, step_no, P_PREFILL, start + target_end, start + target_end + dpt, n_pre,
                     pre_tokens, pre_tokens, pre_kv, used, 0, 0, 0, 0)
                _set_dev(rows, r, 1, -1)
                r += 1
        else:
            n_dec = 0
            for j in range(n_run):
                i = run[j]
                if prefill_left[i] == 0:
                    dec[n_dec] = i
                    n_dec += 1
            nv, nd, fallback = split_sides(dec, n_dec, side, vs, split_min, V, D)
            m = 0  # the requests the policy is asked about (_asked), in ask[:m]
            if asked:
                m = _asked(V, nv, D, nd, fallback, pend, ask)
            if given:
                if m > 0 and st.given == 0:
                    pst.asked = m
                    code = CHOOSE
                    break
                if m == 0 and st.pending == 1:  # the plan would overwrite the last step's outcome
                    code = HEAR
                    break
                st.given = 0
            if adaptive and m > 0:  # AdaptiveKPolicy.choose_batch over the requests asked
                _adaptive_choices(ask, m, dec, n_dec, prompt, gen, first, last, cfg, est_s, est_f, cap, times, chosen,
                                  chosen_k, ask_pos, ask_slot, lim, plan, waitq, total_blocks - used, n_run, run,
                                  requeued, nq, admit, ptr, blocks, prefill_left, prefill_done, target, drafts[0],
                                  dprofiles[0], overhead, pf_order)
            if bandit and m > 0:  # BanditPolicy.choose_batch over the requests asked, the policy's k for each
                _bandit_choices(ask, m, pol.arm_counts, pol.arm_sums, pol.arm_slot, cfg.arms, cfg.shared, cfg.bandit,
                                cfg.beta, cfg.epsilon, cfg.exp3_gamma, replay.policy_rng, ask_slot)
                for j in range(m):
                    chosen[ask[j]] = ask_slot[j]
                    chosen_k[ask[j]] = k_fixed
            if fallback and n_dec > 0:
                fb_steps += 1
            for j in range(nv):  # the verify side: last step's proposal, a fresh draft (fallback) or a plain token
                i = V[j]
                vnew[j] = NONE
                if pend[i] != NONE:
                    vslot[j], vk[j], vp[j], va[j] = pend[i], pend_k[i], pend_p[i], pend_a[i]
                elif fallback and (not asked or chosen[i] >= 0):
                    f = min(first[i] + gen[i], last[i])
                    g, kq, row = psd_scratch.fixed_slot[0], k_fixed, row_k
                    if asked:
                        g, kq = chosen[i], chosen_k[i]
                        row = rowof[g, kq]
                    vslot[j], vk[j] = g, kq
                    vp[j], va[j] = np.int64(tab[row, 0, f]), np.int64(tab[row, 1, f])
                    vnew[j] = g
                else:
                    vslot[j], vk[j], vp[j], va[j] = -1, 0, 0, 0
            nv = _fit_proposals(vp, va, nv, decode_budget, cut)  # the decode budget over the verify side
            for j in range(nd):
                i = D[j]
                f = min(first[i] + gen[i], last[i])
                if not asked:
                    dk[j], dp[j], da[j] = k_fixed, np.int64(tab[row_k, 0, f]), np.int64(tab[row_k, 1, f])
                elif chosen[i] >= 0:
                    row = rowof[chosen[i], chosen_k[i]]
                    dslot[j], dk[j] = chosen[i], chosen_k[i]
                    dp[j], da[j] = np.int64(tab[row, 0, f]), np.int64(tab[row, 1, f])
                else:
                    dslot[j], dk[j], dp[j], da[j] = NONE, 0, 0, 0
            for j in range(nv + nd):  # KV: V then D hold their context and drafts (D its drafts
                i = V[j] if j < nv else D[j - nv]  # only with defer_kv)
                vd[j] = i
                hold[j] = prompt[i] + gen[i] + (vp[j] if j < nv else (dp[j - nv] if defer else 0))
            grow = kv_growth(vd, nv + nd, hold, blocks, bs, newb)
            allow_new = True
            if grow > total_blocks - used:  # preempt the newest running requests until the rest grows
                for q in range(n_run):  # each running request's growth, in admission order (none if it prefills)
                    j = _position(vd, nv + nd, run[q])
                    run_extra[q] = newb[j] if j < nv + nd else 0
                keep = preempt_keep(run, n_run, run_extra, blocks, total_blocks - used)
                used -= preempt_suffix(run, keep, n_run, blocks, prefill_left, prefill_done, preempted)
                nq = requeue_preempted(run, keep, n_run, requeued, nq)
                leave_sides(run, keep, n_run, side, pend, NONE)
                n_run = keep
                w = 0  # the sides keep their requests that still run, in order
                for j in range(nv):
                    if _position(run, n_run, V[j]) < n_run:
                        V[w], vslot[w], vk[w], vp[w], va[w], vnew[w] = V[j], vslot[j], vk[j], vp[j], va[j], vnew[j]
                        w += 1
                nv = w
                w = 0
                for j in range(nd):
                    if _position(run, n_run, D[j]) < n_run:
                        D[w], dk[w], dp[w], da[w], dslot[w] = D[j], dk[j], dp[j], da[j], dslot[j]
                        w += 1
                nd = w
                n_dec = 0  # so the plan is asked: the kept requests' partial prefills go on (it admits nobody)
                grow = 0
                for q in range(n_run):
                    grow += run_extra[q]
                add_blocks(run, n_run, run_extra, blocks)
                allow_new = False  # a step that preempted admits nobody
            elif grow > 0:
                add_blocks(vd, nv + nd, newb, blocks)
            used += grow
            if used > peak:
                peak = used
            if cfg.sampled:  # the verify side's kept drafts against the generator's draws
                for g in range(nslot):
                    sample_group(g, vslot, vp, va, V, nv, gen, first, last, replay.tv[g], replay.rng)
            pv_sum = 0
            av_sum = 0
            v_drafted = 0
            for j in range(nv):
                if vslot[j] >= 0:
                    v_drafted |= 1 << vslot[j]
                pv_sum += vp[j]
                av_sum += va[j]
            pd_sum = 0
            for j in range(nd):
                pd_sum += dp[j]
            if not separate:  # the prompt chunks after the verify side's tokens (none new if it preempted)
                tokens_used = pv_sum + nv
                n_run0 = n_run
                if n_run0 > n_dec or (allow_new and (nq > 0 or admit < ptr) and n_run < max_seqs):
                    n_pre, pre_tokens, pre_kv, pre_attn = plan_step_prefills(lim, plan, waitq, tokens_used, allow_new,
                                                                             run, n_run, requeued, nq, arrived, admit,
                                                                             ptr, total_blocks - used, prompt, gen,
                                                                             prefill_left, prefill_done, blocks)
                    n_run, nq, admit, used, peak = _take_plan(plan, n_pre, now, run, n_run, requeued, nq, admit, used,
                                                              peak, prompt, gen, blocks, prefill_left, prefill_done,
                                                              first_sched)
                    assign_sides(side, run, n_run0, n_run, vs)
            nseq = nv + n_pre
            if nseq == 0 and nd == 0:  # (a step that preempted its whole verify side still drafts the other)
                code = ERR_STALL
                break
            kv_v = 0
            for j in range(nv):
                kv_v += prompt[V[j]] + gen[V[j]]
            tokens = pv_sum + nv + pre_tokens
            kv = kv_v + pre_kv
            verify_t = 0.0  # nothing for the target to run costs nothing
            if nseq > 0:
                verify_t = _target_time(target, nv, pv_sum, kv_v, n_pre, pre_tokens, pre_kv, pre_attn)
            # drafting over the newly drafted verify side, then over the drafted side (members proposing)
            n_new, p_new = 0, 0
            for j in range(nv):
                if vnew[j] >= 0:
                    n_new += 1
                    p_new += vp[j]
            _contexts(V, nv, prompt, gen, side_ctx)
            pre_draft_t, drf_pre = _side_draft_time(nv, vnew, vp, vk, V, side_ctx, nslot, drafts, dprofiles,
                                                    cfg.switch_cost, last_slot, verify_t)
            kv_d = _contexts(D, nd, prompt, gen, side_ctx)
            draft_t, drf_d = _side_draft_time(nd, dslot, dp, dk, D, side_ctx, nslot, drafts, dprofiles,
                                              cfg.switch_cost, last_slot, verify_t)
            dpt = 0.0  # the drafters' own prompt pass
            if n_pre > 0:
                dpt = _drafters_prefill_time(drafts, dprofiles, pf_order, n_pre, pre_tokens, pre_kv)
            target_end, drafter_end, both_done, duration = psd_step_time(
                pre_draft_t, verify_t, draft_t, dpt, overhead, sync_s, nv > 0 or n_pre > 0, nv > 0 or nd > 0)
            start = now
            forward = duration
            now = now + duration
            # ---- the step's outcome: the verify side only
            if bandit and cfg.bd:  # MetaSD's reward over the drafted positions, before they move
                _bd_rewards(V, nv, vslot, vp, replay.tv, first, gen, last, reward)
            emitted_sum, ni, n_done = emit_decoded(V, nv, va, vp, now, out, gen, last_emit, itl, ni, dsteps, dprop,
                                                   dacc, done, 0)
            for j in range(nv):
                if vslot[j] >= 0:
                    usage[vslot[j]] += 1
                    if cfg.switch_cost > 0.0:  # the drafter it drafted with (the switching cost reads it)
                        last_slot[V[j]] = vslot[j]
                    if adaptive:  # AdaptiveKPolicy.observe, the verified side in admission order
                        x = 0 if cfg.shared else V[j]
                        est_s[x], est_f[x] = _estimate_update(est_s[x], est_f[x], va[j], vp[j], cfg.decay)
                else:
                    usage[nslot] += 1
                if bandit:  # BanditPolicy.observe_batch: each drafting request's arm and reward (BD or BE)
                    played[j] = _arm_of_slot(pol.arm_slot, cfg.arms, vslot[j]) if vslot[j] >= 0 and vp[j] > 0 else -1
                    if played[j] >= 0 and not cfg.bd:
                        reward[j] = np.float64(va[j]) / np.float64(vp[j])
            if bandit:
                _bandit_updates(V, nv, pol.arm_counts, pol.arm_sums, cfg.arms, cfg.shared, cfg.bandit, played, reward,
                                pol.ring_arm, pol.ring_reward, pol.seen, cfg.discount, cfg.exp3_gamma)
            first_tokens, n_done = advance_prefills(pre, chunk, n_pre, prefill_left, prefill_done, gen, last_emit,
                                                    first_token, now, out, done, n_done)
            # rows: the target's slices, then the draft device's
            if nv > 0 or n_pre > 0:
                phase = P_VERIFY
                if n_pre > 0 and nv > 0:
                    phase = P_MIXED
                elif n_pre > 0:
                    phase = P_PREFILL
                _row(rows, r, step_no, phase, start + pre_draft_t, start + target_end, nseq, pre_tokens,
                     tokens, kv, used, pv_sum, av_sum, emitted_sum + first_tokens, v_drafted)
                _set_dev(rows, r, 0, vs)
                r += 1
            if (nv > 0 or nd > 0) and sync_s > 0:
                _row(rows, r, step_no, P_SYNC, start + both_done, start + duration, nv + nd, 0, 0, 0, used,
                     0, 0, 0, 0)
                _set_dev(rows, r, 0, vs)
                r += 1
            if pre_draft_t > 0:
                _row(rows, r, step_no, P_DRAFT, start, start + pre_draft_t, n_new, 0, p_new, kv, used,
                     p_new, 0, 0, drf_pre)
                _set_dev(rows, r, 1, vs)
                r += 1
            if draft_t > 0:
                _row(rows, r, step_no, P_DRAFT, start + pre_draft_t, start + pre_draft_t + draft_t, nd, 0,
                     pd_sum, kv_d, used, pd_sum, 0, 0, drf_d)
                _set_dev(rows, r, 1, 1 - vs)
                r += 1
            if dpt > 0:
                _row(rows, r, step_no, P_PREFILL, start + pre_draft_t + draft_t, start + drafter_end, n_pre,
                     pre_tokens, pre_tokens, pre_kv, used, 0, 0, 0, 0)
                _set_dev(rows, r, 1, -1)
                r += 1
            # the proposals carried (the accepted count, replayed at drafting, with them)
            carry_proposals(V, nv, D, nd, dslot, dk, dp, pend, pend_k, pend_p, NONE)
            for j in range(nd):
                pend_a[D[j]] = da[j]
            vs = next_verify_side(vs, nv, nd)
        if n_done > 0:
            used, n_run, n_fin, n_sub = _finish_requests(done, n_done, now, finish, used, blocks, run, n_run, n_fin,
                                                         closed, n_sub, arrival, client_of, think)
        if given:  # what the Python policy hears of next: the verified side (compiled_run.CompiledRun._heard)
            st.decoded, st.prefilled, st.ended, st.pending = nv, n_pre, n_done, 1
            scratch.heard[:nv] = V[:nv]  # the next step's split takes V before the policy hears
        step_no += 1
        busy = 1
    _save_state(st, ptr, nq, admit, n_run, n_fin, step_no, used, peak, r, ni, n_sub, now, busy, forward)
    pst.side = vs
    pst.fallback = fb_steps
    return code
