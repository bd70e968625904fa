"""Two-batch PSD steps (MineDraft): while the target verifies sub-batch V with the proposals drafted
last step, the dedicated draft device drafts sub-batch D; both finish, a sync (rejection sampling on the
driver) follows, and the roles flip. One empty side (or a batch under `split_min_batch`) makes the step
plain SD. Prefills: mixed into the verify pass, or (separate mode) prefill-only steps after which the
draft device runs the drafter's own prefill. New requests' drafter prefill is always priced on the
draft device. Under `scheduler: vllm-v1` the verify side takes its tokens from the step budget
(Scheduler.fit_decodes); a request the budget leaves out keeps its proposal for a later verify."""
from __future__ import annotations

import numpy as np

from policies.base import NO_DRAFT
from simulator.engine.drafting import Drafting
from simulator.engine.pricing import Pricing
from simulator.engine.request_state import RequestState
from simulator.engine.rules.psd_sides import next_verify_side
from simulator.engine.rules.psd_timing import psd_step_time
from simulator.engine.scheduler import EMPTY, Scheduler
from simulator.server_config import PSDConfig
from simulator.engine.step import Step, StepSlice, plan_prefill_only


class PSDExecutor:
    """Plans one PSD step and carries the drafted side's proposals to the next one."""

    def __init__(self, psd: PSDConfig, state: RequestState, sched: Scheduler, drafting: Drafting, pricing: Pricing,
                 drafter_names: tuple[str, ...]):
        self.psd, self.state, self.sched, self.drafting, self.pricing = psd, state, sched, drafting, pricing
        self.drafter_names = drafter_names  # drafters whose own prefill runs on the draft device
        self.fallback_steps = 0
        from simulator.engine.compiled_kernel import carry_proposals, split_sides  # the side rules, compiled

        self._split, self._carry = split_sides, carry_proposals

    def plan(self, now: float) -> Step:
        st, sched, pricing, drafting, psd = self.state, self.sched, self.pricing, self.drafting, self.psd
        vs = sched.verify_side
        prefill = plan_prefill_only(now, sched, pricing, self.drafter_names, colocated=False, sub_batch=vs)
        if prefill is not None:
            return prefill
        run = st.running_array()
        dec_mask = st.prefill_left[run] == 0
        dec_all = run[dec_mask]
        kv_est = int(pricing.context(dec_all).sum())
        # the verified and drafted sides (rules/psd_sides.split_sides); a fallback step (one side empty, or fewer
        # than split_min_batch decoding) is plain SD for everyone (draft, then verify)
        V, D = np.empty(len(dec_all), np.int64), np.empty(len(dec_all), np.int64)
        nv, nd, fallback = self._split(dec_all, len(dec_all), st.sub_batch, vs, psd.split_min_batch, V, D)
        V, D = V[:nv], D[:nd]
        if fallback and len(dec_all):
            self.fallback_steps += 1
        has_prop = st.pending_d[V] != NO_DRAFT
        # Without a proposal from the previous step a verify-side request is drafted first, in sequence,
        # only in a fallback step (plain SD); otherwise it decodes one plain token in the verify pass
        # (a request that just joined), so the pipeline never stalls for it.
        V_new = V[~has_prop] if fallback else V[:0]
        d_c, k_c, p_c, _ = drafting.choose(np.concatenate([V_new, D]), now,
                                           pricing.estimator(len(dec_all), kv_est, True, sched.preview_prefills,
                                                             prefill_drafters=self.drafter_names))
        nv = len(V_new)
        d_v, k_v, p_v = st.pending_d[V].copy(), st.pending_k[V].copy(), st.pending_prop[V].copy()
        no_prop = ~has_prop
        k_v[no_prop], p_v[no_prop] = 0, 0
        if fallback:
            d_v[no_prop], k_v[no_prop], p_v[no_prop] = d_c[:nv], k_c[:nv], p_c[:nv]
        d_d, k_d, p_d = d_c[nv:], k_c[nv:], p_c[nv:]
        # vLLM V1 (scheduler: vllm-v1): the verify side's 1 + drafts tokens come from the step's one budget, in
        # admission order (Scheduler.fit_decodes); one left out keeps its proposal and side (the drafted side
        # takes no target tokens: it is drafted on its own device)
        drafted_v = p_v  # before the budget cut: the chain acceptance replays (Drafting.accept)
        n_fit, p_v = sched.fit_decodes(p_v)
        if n_fit < len(V):
            V, d_v, k_v, has_prop, drafted_v = V[:n_fit], d_v[:n_fit], k_v[:n_fit], has_prop[:n_fit], drafted_v[:n_fit]

        # KV: with defer_kv (MineDraft) the drafted side reserves its lookahead slots now and the verify side
        # appends none (it holds them since it was drafted); without, slots are reserved only when verified.
        idx_all = np.concatenate([V, D])
        lookahead = np.concatenate([p_v, p_d if psd.defer_kv else np.zeros(len(D), np.int64)])
        hold = np.zeros(len(st.gen), dtype=np.int64)
        hold[idx_all] = pricing.context(idx_all) + lookahead
        keep, preempted = sched.reserve(run, hold[run])
        if preempted:
            alive = np.zeros(len(st.gen), dtype=bool)
            alive[run[:keep]] = True
            mv, md = alive[V], alive[D]
            V, d_v, k_v, p_v, has_prop, drafted_v = V[mv], d_v[mv], k_v[mv], p_v[mv], has_prop[mv], drafted_v[mv]
            D, d_d, k_d, p_d = D[md], d_d[md], k_d[md], p_d[md]
        if sched.separate:
            pre, chunk = EMPTY, EMPTY
        else:
            pre, chunk = sched.prefills(int(p_v.sum()) + len(V), not preempted, now)
        verify_t, nseq, tokens, kv = pricing.target_time(V, p_v, pre, chunk)
        newv = ~has_prop & (d_v != NO_DRAFT)
        g_new = drafting.groups_of(d_v[newv])
        pre_draft_t, used_pre = pricing.draft_time(g_new, V[newv], d_v[newv], k_v[newv], p_v[newv], verify_t)
        draft_t, used_d = pricing.draft_time(drafting.groups_of(d_d), D, d_d, k_d, p_d, verify_t)
        drafter_prefill_t = pricing.drafter_prefill_time(pre, chunk, self.drafter_names)
        accepted = drafting.accept(V, d_v, p_v, drafted=drafted_v)
        target_end, drafter_end, both_done, duration = psd_step_time(
            pre_draft_t, verify_t, draft_t, drafter_prefill_t, pricing.overhead, psd.sync_s,
            bool(len(V) or len(pre)), bool(len(V) or len(D)))
        t_slices, d_slices = [], []
        if pre_draft_t > 0:
            p_new = int(p_v[newv].sum())
            d_slices.append(StepSlice("draft", now, now + pre_draft_t, num_seqs=int(newv.sum()), batched_tokens=p_new,
                                      kv_tokens=kv, proposed_tokens=p_new, drafters="+".join(used_pre), sub_batch=vs))
        if draft_t > 0:
            kv_d = int(pricing.context(D).sum())
            p_draft = int(p_d.sum())
            d_slices.append(StepSlice("draft", now + pre_draft_t, now + pre_draft_t + draft_t, num_seqs=len(D),
                                      batched_tokens=p_draft, kv_tokens=kv_d, proposed_tokens=p_draft,
                                      drafters="+".join(used_d), sub_batch=1 - vs))
        if drafter_prefill_t > 0:
            pre_tokens = int(chunk.sum())
            d_slices.append(StepSlice("prefill", now + pre_draft_t + draft_t, now + drafter_end, num_seqs=len(pre),
                                      prefill_tokens=pre_tokens, batched_tokens=pre_tokens,
                                      kv_tokens=int((st.prefill_done[pre] + chunk).sum())))
        if len(V) or len(pre):
            phase = "mixed" if (len(pre) and len(V)) else ("prefill" if len(pre) else "verify")
            t_slices.append(StepSlice(
                phase, now + pre_draft_t, now + target_end, num_seqs=nseq, prefill_tokens=int(chunk.sum()),
                batched_tokens=tokens, kv_tokens=kv, proposed_tokens=int(p_v.sum()),
                accepted_tokens=int(accepted.sum()),
                drafters="+".join(drafting.drafters[i] for i in np.unique(d_v) if i != NO_DRAFT),
                sub_batch=vs))
        if (len(V) or len(D)) and psd.sync_s > 0:  # the sync's slice, when the step time has one
            t_slices.append(StepSlice("sync", now + both_done, now + duration, num_seqs=len(V) + len(D), sub_batch=vs))
        step = Step(V, d_v, k_v, p_v, accepted, pre, chunk, duration, t_slices, d_slices)
        step.drafted, step.drafted_drafter_idx, step.drafted_k, step.drafted_proposed = D, d_d, k_d, p_d
        return step

    def after(self, s: Step) -> None:
        """The verified side's proposals are used up; the drafted side keeps its own; roles flip."""
        st, D = self.state, s.drafted
        self._carry(s.decoding, len(s.decoding), D, len(D), s.drafted_drafter_idx, s.drafted_k, s.drafted_proposed,
                    st.pending_d, st.pending_k, st.pending_prop, NO_DRAFT)  # rules/psd_sides.carry_proposals
        self.sched.verify_side = next_verify_side(self.sched.verify_side, len(s.decoding), len(D))
