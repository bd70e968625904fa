"""The compiled step loop (numba): one server's AR or fixed-k SD run (open or closed loop), step for step as the step path.

Imported only by simulator/compiled_run.py when an eligible run starts, so commands that never simulate do not
import numba. Every float is formed with the step path's operations in its order (simulator/step_sd.py,
pricing.py, latency.LinearProfile.step_time, draft_cost.py, step_outcome.py; SimPy's `now + delay`), so the tables
agree bit for bit. Accepted drafts per trace position come precomputed from traces/acceptance.py (the replay rule
is not restated here); the end-of-output cut is step_outcome's `min(1 + accepted, left)`.

The kernel runs until every request finished, a row or ITL buffer is full, or `stop_finished` requests have
finished, and returns a code (`DONE`, `FULL`, `STOPPED`; negative: a broken invariant). All state lives in the
arrays it is given, so the caller empties the buffers and calls it again to continue.
"""
from __future__ import annotations

import os
from pathlib import Path

# numba reads its cache folder at import: one under the user's cache works when the package is read-only
os.environ.setdefault("NUMBA_CACHE_DIR", str(Path.home() / ".cache" / "draftsim" / "numba"))

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

DONE, FULL, STOPPED, ERR_STALL, ERR_PREEMPT = 0, 1, 2, -1, -2
# row int columns
R_STEP, R_PHASE, R_NS, R_PT, R_BT, R_KV, R_USED, R_PROP, R_ACC, R_EMIT, R_DRF = range(11)
ROW_INTS = 11
# phases, in simulator/compiled_run.PHASES order
P_PREFILL, P_DECODE, P_DRAFT, P_VERIFY, P_MIXED, P_DRAFT_PREFILL = range(6)
# draft cost kinds
K_NONE, K_CONSTANT, K_FRACTION, K_WHOLE, K_AUTOREGRESSIVE = range(5)
# iparams
I_SD, I_DRAFTER, I_K, I_KIND, I_PREFILL_PROFILE, I_MAX_SEQS, I_BUDGET, I_CHUNKED, I_SEPARATE, I_BLOCK, I_BLOCKS, \
    I_CLOSED = range(12)
# fparams: target a, b, s, d; overhead; draft seconds, fraction; draft profile a, b, s, d; closed-loop think time
F_TA, F_TB, F_TS, F_TD, F_OVERHEAD, F_SECONDS, F_FRACTION, F_DA, F_DB, F_DS, F_DD, F_THINK = range(12)
# istate
S_PTR, S_ADMIT, S_NRUN, S_FINISHED, S_STEP, S_USED, S_PEAK, S_ROWS, S_ITL, S_USAGE_D, S_USAGE_NONE, S_SUBMITTED = \
    range(12)


@njit(cache=True)
def _admit_waiting(admit, ptr, n_run, max_seqs, budget, tokens_used, chunked, bs, total_blocks, used, peak, prompt,
                   gen, blocks, run, prefill_left, prefill_done, first_sched, now, pre, chunk, n_pre):
    """Scheduler.prefills' admission of waiting requests in FIFO order (budget, sequence and KV limits); a
    request that does not fit whole stops admission unless it is the step's first token (`tokens_used`, `n_pre`)."""
    while admit < ptr and n_run < max_seqs and budget > 0:
        i = admit
        total = prompt[i] + gen[i]
        c = min(total, budget) if chunked == 1 else total
        if c > budget and (n_pre > 0 or tokens_used > 0):
            break
        need = (c + (1 if c == total else 0) + bs - 1) // bs
        if need > total_blocks - used:
            break
        admit += 1
        used += need
        if used > peak:
            peak = used
        blocks[i] = need
        run[n_run] = i
        n_run += 1
        prefill_left[i] = total
        prefill_done[i] = 0
        if np.isnan(first_sched[i]):
            first_sched[i] = now
        budget -= c
        pre[n_pre] = i
        chunk[n_pre] = c
        n_pre += 1
    return admit, n_run, n_pre, used, peak


@njit(cache=True)
def _apply_prefills(pre, chunk, n_pre, prefill_left, prefill_done, gen, last_emit, first_token, now):
    """StepOutcome.apply's prefill progress: each chunk advances its request; a finished prompt emits its first
    token at `now`. Returns how many first tokens the step emitted."""
    first_tokens = 0
    for j in range(n_pre):
        i = pre[j]
        prefill_left[i] -= chunk[j]
        prefill_done[i] += chunk[j]
        if prefill_left[i] == 0:
            first_tokens += 1
            gen[i] += 1
            last_emit[i] = now
            if np.isnan(first_token[i]):
                first_token[i] = now
    return first_tokens


@njit(cache=True)
def _row(rows_i, rows_f, r, step, phase, start, end, ns, pt, bt, kv, used, prop, acc, emit, drf):
    """Row `r` of the step table: one column per line of `rows_i` (ints) and `rows_f` (start, end)."""
    rows_i[R_STEP, r] = step
    rows_i[R_PHASE, r] = phase
    rows_i[R_NS, r] = ns
    rows_i[R_PT, r] = pt
    rows_i[R_BT, r] = bt
    rows_i[R_KV, r] = kv
    rows_i[R_USED, r] = used
    rows_i[R_PROP, r] = prop
    rows_i[R_ACC, r] = acc
    rows_i[R_EMIT, r] = emit
    rows_i[R_DRF, r] = drf
    rows_f[0, r] = start
    rows_f[1, r] = end


@njit(cache=True)
def run_steps(arrival, client_of, prompt, out, first, last, step_prop, step_acc, iparams, fparams, istate, fstate, run,
              gen, prefill_left, prefill_done, blocks, last_emit, first_sched, first_token, finish,
              dsteps, dprop, dacc, rows_i, rows_f, itl, stop_finished):
    """Steps until done, a buffer is full or `stop_finished` requests finished; returns the code."""
    n = len(arrival)
    sd, has_drafter, k, kind = iparams[I_SD], iparams[I_DRAFTER], iparams[I_K], iparams[I_KIND]
    prefill_profile, max_seqs, B = iparams[I_PREFILL_PROFILE], iparams[I_MAX_SEQS], iparams[I_BUDGET]
    chunked, separate, bs, total_blocks = iparams[I_CHUNKED], iparams[I_SEPARATE], iparams[I_BLOCK], iparams[I_BLOCKS]
    ta, tb, ts, td, overhead = fparams[F_TA], fparams[F_TB], fparams[F_TS], fparams[F_TD], fparams[F_OVERHEAD]
    seconds, fraction = fparams[F_SECONDS], fparams[F_FRACTION]
    da, db, ds, dd = fparams[F_DA], fparams[F_DB], fparams[F_DS], fparams[F_DD]
    closed, think = iparams[I_CLOSED], fparams[F_THINK]
    n_sub = istate[S_SUBMITTED]  # arrivals known so far (open loop: all; closed loop: ClosedLoopArrivals._next)
    ptr, admit, n_run, n_fin = istate[S_PTR], istate[S_ADMIT], istate[S_NRUN], istate[S_FINISHED]
    step_no, used, peak, r, ni = istate[S_STEP], istate[S_USED], istate[S_PEAK], istate[S_ROWS], istate[S_ITL]
    usage_d, usage_none = istate[S_USAGE_D], istate[S_USAGE_NONE]
    now = fstate[0]
    cap_rows, cap_itl = rows_i.shape[1], len(itl)
    dec = np.empty(max_seqs, np.int64)
    ctx = np.empty(max_seqs, np.int64)
    prop = np.empty(max_seqs, np.int64)
    acc = np.empty(max_seqs, np.int64)
    pre = np.empty(max_seqs, np.int64)
    chunk = np.empty(max_seqs, np.int64)
    done = np.empty(max_seqs, np.int64)
    newb = np.empty(max_seqs, np.int64)
    code = DONE
    while n_fin < n:
        if r + 3 > cap_rows or ni + max_seqs > cap_itl:
            code = FULL
            break
        if n_fin >= stop_finished:
            code = STOPPED
            break
        # OpenLoopArrivals.pull / ClosedLoopArrivals.pull: submissions come in index order, their times in order
        while ptr < n_sub and arrival[ptr] <= now:
            ptr += 1
        if n_run == 0 and admit == ptr:  # Server._idle: timeout(max(0.0, next - now))
            if ptr >= n_sub:
                code = ERR_STALL
                break
            delay = arrival[ptr] - now
            now = now + (delay if delay > 0.0 else 0.0)
            continue
        # ---- plan (SDExecutor.plan)
        n_dec = 0
        n_pre = 0
        kv_est = 0
        prop_sum = 0
        acc_sum = 0
        n_act = 0
        kv_act = 0
        pre_tokens = 0
        pre_kv = 0
        only_prefill = False
        if separate == 1 and admit < ptr and n_run < max_seqs:  # Scheduler.prefill_only: prefills(0, True, now)
            admit, n_run, n_pre, used, peak = _admit_waiting(
                admit, ptr, n_run, max_seqs, B, 0, chunked, bs, total_blocks, used, peak, prompt, gen, blocks,
                run, prefill_left, prefill_done, first_sched, now, pre, chunk, n_pre)
            only_prefill = n_pre > 0
        if only_prefill:  # step.plan_prefill_only / prefill_step
            for j in range(n_pre):
                pre_tokens += chunk[j]
                pre_kv += prefill_done[pre[j]] + chunk[j]
            tokens = pre_tokens
            kv = pre_kv
            target_t = ta * kv + tb * tokens + ts * n_pre + td
            dpt = 0.0
            if has_drafter == 1 and prefill_profile == 1 and tokens > 0:
                dpt = 0.0 + (da * kv + db * tokens + ds * n_pre + dd)
            target_end = target_t + overhead
            start = now
            now = now + (target_end + dpt)
            first_tokens = _apply_prefills(pre, chunk, n_pre, prefill_left, prefill_done, gen, last_emit, first_token,
                                           now)  # StepOutcome.apply: prefill progress
            n_done = 0
            for j in range(n_pre):
                i = pre[j]
                if gen[i] >= out[i] and prefill_left[i] == 0:
                    done[n_done] = i
                    n_done += 1
            _row(rows_i, rows_f, r, step_no, P_PREFILL, start, start + target_end, n_pre, pre_tokens, tokens, kv,
                 used, 0, 0, first_tokens, 0)
            r += 1
            if dpt > 0:
                _row(rows_i, rows_f, r, step_no, P_DRAFT_PREFILL, start + target_end, start + target_end + dpt,
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
                    if has_drafter == 1:
                        f = min(first[i] + gen[i], last[i])
                        p = np.int64(step_prop[f])
                        a = np.int64(step_acc[f])
                        prop[n_dec] = p
                        acc[n_dec] = a
                        prop_sum += p
                        acc_sum += a
                        if p > 0:
                            n_act += 1
                            kv_act += cx
                    else:
                        prop[n_dec] = 0
                        acc[n_dec] = 0
                    n_dec += 1
            grow = 0  # Scheduler.reserve: no preemption (the eligibility check bounds KV)
            for j in range(n_dec):
                i = dec[j]
                want = ctx[j] + prop[j]
                if want > blocks[i] * bs:  # past its blocks: ceil(want / bs) > blocks[i], without a division
                    need = (want + bs - 1) // bs
                    grow += need - blocks[i]
                    newb[j] = need
                else:
                    newb[j] = 0
            if grow > total_blocks - used:
                code = ERR_PREEMPT
                break
            if grow > 0:
                used += grow
                if used > peak:
                    peak = used
                for j in range(n_dec):
                    if newb[j] > 0:
                        blocks[dec[j]] = newb[j]
            if separate == 0:  # Scheduler.prefills(prop_sum + n_dec, True, now)
                tokens_used = prop_sum + n_dec
                budget = B - tokens_used
                n_run0 = n_run
                if n_run0 > n_dec or (admit < ptr and n_run < max_seqs):
                    for j in range(n_run0):
                        i = run[j]
                        left = prefill_left[i]
                        if left == 0:
                            continue
                        c = min(left, budget) if chunked == 1 else left
                        if c <= 0:
                            continue
                        need = (prefill_done[i] + c + (1 if c == left else 0) + bs - 1) // bs - blocks[i]
                        if need > total_blocks - used:
                            continue
                        if need > 0:
                            used += need
                            if used > peak:
                                peak = used
                            blocks[i] += need
                        budget -= c
                        pre[n_pre] = i
                        chunk[n_pre] = c
                        n_pre += 1
                    admit, n_run, n_pre, used, peak = _admit_waiting(
                        admit, ptr, n_run, max_seqs, budget, tokens_used, chunked, bs, total_blocks, used, peak,
                        prompt, gen, blocks, run, prefill_left, prefill_done, first_sched, now, pre, chunk, n_pre)
            nseq = n_dec + n_pre
            if nseq == 0:
                code = ERR_STALL
                break
            for j in range(n_pre):  # Pricing.target_time
                pre_tokens += chunk[j]
                pre_kv += prefill_done[pre[j]] + chunk[j]
            tokens = prop_sum + n_dec + pre_tokens
            kv = kv_est + pre_kv
            verify_t = ta * kv + tb * tokens + ts * nseq + td
            draft_t = 0.0  # Pricing.draft_time / DraftCost.draft_time
            if has_drafter == 1 and n_act > 0:
                if kind == K_CONSTANT:
                    t = seconds
                elif kind == K_FRACTION:
                    t = fraction * verify_t
                elif kind == K_WHOLE:
                    t = da * kv_act + db * prop_sum + ds * n_act + dd
                else:
                    t = 0.0
                    for m in range(k):
                        t += da * (kv_act + m * n_act) + db * n_act + ds * n_act + dd
                draft_t = 0.0 + t
            dpt = 0.0  # Pricing.drafter_prefill_time
            if has_drafter == 1 and n_pre > 0 and prefill_profile == 1 and pre_tokens > 0:
                dpt = 0.0 + (da * pre_kv + db * pre_tokens + ds * n_pre + dd)
            duration = draft_t + verify_t + overhead + dpt
            start = now
            now = now + duration
            # ---- StepOutcome.apply
            emitted_sum = 0
            n_done = 0
            for j in range(n_dec):
                i = dec[j]
                lft = out[i] - gen[i]
                e = min(1 + acc[j], lft) if has_drafter == 1 else min(1, lft)
                itl[ni] = now - last_emit[i]
                ni += 1
                last_emit[i] = now
                gen[i] += e
                emitted_sum += e
                dsteps[i] += 1
                if has_drafter == 1:
                    dprop[i] += prop[j]
                    dacc[i] += acc[j]
                if gen[i] >= out[i]:
                    done[n_done] = i
                    n_done += 1
            if has_drafter == 1:
                usage_d += n_dec
            else:
                usage_none += n_dec
            first_tokens = _apply_prefills(pre, chunk, n_pre, prefill_left, prefill_done, gen, last_emit, first_token,
                                           now)
            for j in range(n_pre):
                i = pre[j]
                if gen[i] >= out[i] and prefill_left[i] == 0:
                    done[n_done] = i
                    n_done += 1
            drf = 1 if (has_drafter == 1 and n_act > 0) else 0
            t0 = start
            if draft_t > 0:
                _row(rows_i, rows_f, r, step_no, P_DRAFT, start, start + draft_t, n_act, 0, prop_sum, kv, used,
                     prop_sum, 0, 0, drf)
                r += 1
                t0 = start + draft_t
            phase = P_VERIFY if sd == 1 else P_DECODE
            if n_pre > 0 and n_dec > 0:
                phase = P_MIXED
            elif n_pre > 0:
                phase = P_PREFILL
            end = start + duration - dpt
            _row(rows_i, rows_f, r, step_no, phase, t0, end, nseq, pre_tokens, tokens, kv, used, prop_sum, acc_sum,
                 emitted_sum + first_tokens, drf)
            r += 1
            if dpt > 0:
                _row(rows_i, rows_f, r, step_no, P_DRAFT_PREFILL, end, start + duration, n_pre, pre_tokens,
                     pre_tokens, kv, used, 0, 0, 0, 1)
                r += 1
        # ---- finishes (StepOutcome.finish / Scheduler.finish)
        if n_done > 0:
            for j in range(n_done):
                i = done[j]
                finish[i] = now
                used -= blocks[i]
                blocks[i] = 0
                prefill_left[i] = -1  # marks it for removal below
                n_fin += 1
                if closed == 1 and n_sub < n:  # ClosedLoopArrivals.on_finish: its client's next request
                    arrival[n_sub] = now + think
                    client_of[n_sub] = client_of[i]
                    n_sub += 1
            w = 0
            for j in range(n_run):
                i = run[j]
                if prefill_left[i] != -1:
                    run[w] = i
                    w += 1
            for j in range(n_done):
                prefill_left[done[j]] = 0
            n_run = w
        step_no += 1
    istate[S_PTR] = ptr
    istate[S_ADMIT] = admit
    istate[S_NRUN] = n_run
    istate[S_FINISHED] = n_fin
    istate[S_STEP] = step_no
    istate[S_USED] = used
    istate[S_PEAK] = peak
    istate[S_ROWS] = r
    istate[S_ITL] = ni
    istate[S_USAGE_D] = usage_d
    istate[S_USAGE_NONE] = usage_none
    istate[S_SUBMITTED] = n_sub
    fstate[0] = now
    return code
