"""AR and sequential SD steps: draft (drafter cost), then the target verifies k+1 tokens per sequence
(or decodes one), with prefills mixed in or, in separate mode, run as prefill-only steps."""
from __future__ import annotations

import numpy as np

from simulator.engine.drafting import Drafting
from simulator.engine.pricing import Pricing
from simulator.engine.request_state import RequestState
from simulator.engine.rules.emission import sampling_seqs
from simulator.engine.rules.kv import decode_hold
from simulator.engine.rules.pricing import sd_step_time
from simulator.engine.scheduler import EMPTY, Scheduler
from simulator.engine.step import Step, StepSlice, plan_prefill_only


class SDExecutor:
    """Plans one AR or SD step over the running batch."""

    def __init__(self, mode: str, state: RequestState, sched: Scheduler, drafting: Drafting, pricing: Pricing,
                 drafter_names: tuple[str, ...] = ()):
        self.mode, self.state, self.sched, self.drafting, self.pricing = mode, state, sched, drafting, pricing
        self.drafter_names = drafter_names  # drafters whose own prefill of each prompt runs on the target's devices
        self.fallback_steps = 0

    def plan(self, now: float) -> Step:
        st, sched, pricing, drafting = self.state, self.sched, self.pricing, self.drafting
        prefill = plan_prefill_only(now, sched, pricing, self.drafter_names, colocated=True)
        if prefill is not None:
            return prefill
        run = st.running_array()
        dec_mask = st.prefill_left[run] == 0
        if dec_mask.all():  # the common case: everyone running decodes
            dec_mask, dec = None, run
        else:
            dec = run[dec_mask]
        ctx = pricing.context(dec)
        kv_est = int(ctx.sum())
        d_idx, k, proposed, flat = drafting.choose(dec, now, pricing.estimator(
            len(dec), kv_est, False, sched.preview_prefills, self.mode != "ar", self.drafter_names))
        drafted = proposed  # before the budget cut: the chain acceptance replays (Drafting.accept)
        n_fit, proposed = sched.fit_decodes(proposed)
        if n_fit < len(dec):  # vllm-v1: the token budget ran out before the last decodes
            if dec_mask is None:
                dec_mask = np.zeros(len(run), dtype=bool)
                dec_mask[:n_fit] = True
            else:
                dec_mask[np.flatnonzero(dec_mask)[n_fit:]] = False
            dec, d_idx, k, ctx, drafted = dec[:n_fit], d_idx[:n_fit], k[:n_fit], ctx[:n_fit], drafted[:n_fit]
            flat = None if flat is None else flat[:n_fit]
            kv_est = int(ctx.sum())
        # KV to hold: the context, its drafts and the lookahead slots; nothing new for a request that prefills
        if dec_mask is None:
            hold = decode_hold(ctx, proposed, sched.lookahead)
        else:
            hold = np.zeros(len(run), dtype=np.int64)
            hold[dec_mask] = decode_hold(ctx, proposed, sched.lookahead)
        keep, preempted = sched.reserve(run, hold)
        if preempted:
            kept = np.isin(dec, run[:keep])
            dec, d_idx, k, proposed, ctx = dec[kept], d_idx[kept], k[kept], proposed[kept], ctx[kept]
            drafted = drafted[kept]
            flat = None if flat is None else flat[kept]
            kv_est = int(ctx.sum())
        prop_sum = int(proposed.sum())
        if sched.separate:
            pre, chunk = EMPTY, EMPTY
        else:
            pre, chunk = sched.prefills(prop_sum + len(dec), not preempted, now)
        verify_t, nseq, tokens, kv = pricing.target_time(dec, proposed, pre, chunk, kv_est, prop_sum)
        grp = drafting.groups_of(d_idx)
        draft_t, used = pricing.draft_time(grp, dec, d_idx, k, proposed, verify_t, ctx)
        if self.mode != "ar":  # vLLM V1's proposer (engine_step costs): every request that samples this step
            sampling = sampling_seqs(len(dec), pre, chunk, len(pre), st.prefill_left)
            step_t, step_used = pricing.engine_step_draft_time(sampling, tokens, kv)
            draft_t += step_t
            used += [u for u in step_used if u not in used]
        accepted = drafting.accept(dec, d_idx, proposed, flat, drafted)
        drafter_prefill_t = pricing.drafter_prefill_time(pre, chunk, self.drafter_names) if len(pre) else 0.0
        duration = sd_step_time(draft_t, verify_t, pricing.overhead, drafter_prefill_t)
        slices = []
        t = now
        drafters = "+".join(used)
        if draft_t > 0:
            slices.append(StepSlice("draft", t, t + draft_t, num_seqs=int(np.count_nonzero(proposed)),
                                    batched_tokens=prop_sum, kv_tokens=kv, proposed_tokens=prop_sum,
                                    drafters=drafters))
            t += draft_t
        phase = "decode" if self.mode == "ar" else "verify"
        if len(pre) and len(dec):
            phase = "mixed"
        elif len(pre):
            phase = "prefill"
        end = now + duration - drafter_prefill_t
        slices.append(StepSlice(phase, t, end, num_seqs=nseq, prefill_tokens=int(chunk.sum()), batched_tokens=tokens,
                                kv_tokens=kv, proposed_tokens=prop_sum, accepted_tokens=int(accepted.sum()),
                                drafters=drafters))
        if drafter_prefill_t > 0:  # the drafters' own pass over the new prompts, after the target's
            pre_tokens = int(chunk.sum())
            slices.append(StepSlice("draft_prefill", end, now + duration, num_seqs=len(pre), prefill_tokens=pre_tokens,
                                    batched_tokens=pre_tokens, kv_tokens=kv, drafters="+".join(self.drafter_names)))
        return Step(dec, d_idx, k, proposed, accepted, pre, chunk, duration, slices, [])

    def after(self, step: Step) -> None:
        """Nothing carries over between SD steps."""
