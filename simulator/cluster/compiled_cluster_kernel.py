"""The compiled cluster loop (numba): every replica of a cluster and its router advance in one call.

The loop replays the SimPy events the step path schedules (simulator/cluster/simulation.py, Server.loop), in SimPy's
order (time, priority, then the order they were scheduled in), for N + 1 processes: each replica (its start, the
engine-loop gap's end, an idle wait's end or the push that ends it, a step's end) and the router (a timeout to the
next arrival or, in a closed loop, the wake event a finish fires, then the condition event that resumes it). A
closed loop's finishes submit their clients' next requests at the step's end, in StepOutcome's order. A replica's
step is planned and applied by ONE call of compiled_kernel.run_steps at the step's start; until its end event the
replica shows what the step path shows while it is in flight (KV after the step's plan, its finishes not yet), so a
routing reads the same outstanding requests and KV load. Routings use the router rules of
simulator/cluster/router.py, compiled. All state lives in the arrays passed in (per replica stacked along the first
axis), so the caller may empty a replica's full row buffers (`FULL`) or ask the early-stop hook (`HOOK`, once the
cluster's finished requests reach `next_check`) and call again; the loop resumes where it returned.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from numba.extending import register_jitable

import simulator.engine.compiled_kernel as ker
from simulator.cluster.router import (affinity_rule, kv_load_fraction, least_kv_rule, least_outstanding_rule,
                                      round_robin_rule)
from simulator.engine.rules.engine_loop import engine_loop_gap

register_jitable(least_outstanding_rule)  # affinity_rule calls it: compiled in place
_round_robin = njit(cache=True)(round_robin_rule)
_least_outstanding = njit(cache=True)(least_outstanding_rule)
_least_kv = njit(cache=True)(least_kv_rule)
_affinity = njit(cache=True)(affinity_rule)
_kv_load = njit(cache=True)(kv_load_fraction)
_gap = njit(cache=True)(engine_loop_gap)

# return codes (negative: compiled_kernel's error codes)
DONE, FULL, HOOK, STALLED = 0, 1, 2, -3
# router codes: simulator/cluster/router.py ROUTER_CODES
RR, LO, LKV, AFF = 0, 1, 2, 3
# event kinds of a process's one pending event
K_NONE, K_TOP, K_STEP_END, K_R_TIMEOUT, K_R_BODY, K_R_WAKE = range(6)
URGENT, NORMAL = 0, 1  # SimPy's priorities (a process's start is URGENT)
# cst: the loop's integer state
C_EID, C_SRC, C_ROUTED, C_OVERFLOWS, C_RESUME_REP, C_RESUME_PHASE, C_FULL_REP, C_HOOK_REP, C_NEXT, C_RMODE, \
    C_WAKE_ARMED, C_CLOSED = range(12)
N_CST = 12  # C_SRC: arrivals routed (pulled from the source); C_NEXT: submitted (open loop: all); C_CLOSED: 1 in a
# closed loop (a finish submits the client's next request and wakes the router)
# the router's wait (C_RMODE): on its timeout or wake (the condition), on its wake alone, resumed (the condition
# fired), returned (every request routed); C_WAKE_ARMED: its wake event exists and has not fired
R_RUNNING, R_WAIT_COND, R_WAIT_WAKE, R_PENDING, R_DONE = range(5)
# a resumed replica's phase: after a step's end (the engine-loop gap decision), or at the top of its loop
PH_AFTER_STEP, PH_TOP = 0, 1
# inflight columns: a step in flight (0/1), the KV after its plan, the requests it finishes
IF_ON, IF_USED, IF_FIN = range(3)
# cft: the time a return happened at; the closed loop's think time
CF_NOW, CF_THINK = range(2)


@njit(cache=True)
def _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, p, t, prio, kind):
    """Process `p`'s next event at `t` (SimPy's schedule: the next event id)."""
    ev_time[p] = t
    ev_prio[p] = prio
    ev_eid[p] = cst[C_EID]
    ev_kind[p] = kind
    cst[C_EID] += 1


@njit(cache=True)
def _next_process(ev_time, ev_prio, ev_eid):
    """The process whose event SimPy processes next: the least (time, priority, event id)."""
    best = 0
    for p in range(1, len(ev_time)):
        if ev_time[p] < ev_time[best] or (ev_time[p] == ev_time[best] and (
                ev_prio[p] < ev_prio[best] or (ev_prio[p] == ev_prio[best] and ev_eid[p] < ev_eid[best]))):
            best = p
    return best


@njit(cache=True)
def _route_due(now, c_arrival, prompt_all, out_all, first_all, last_all, pblocks, key_id, homes, limit, router,
               assigned, routed, cst, inflight, istate, iparams, cum, gidx, arrival, prompt, out, first, last,
               outstanding, kv_load, push_wait, ev_time, ev_prio, ev_eid, ev_kind):
    """ClusterSimulation.route_due: every arrival by `now` not routed yet, in order, to the replica the router's rule
    picks from what each replica shows now; pushed to that replica's requests (CompiledReplica._take's numbering),
    which wakes it if it waits for a push (ReplicaArrivals.push)."""
    N = len(routed)
    while cst[C_SRC] < cst[C_NEXT] and c_arrival[cst[C_SRC]] <= now:
        i = cst[C_SRC]
        cst[C_SRC] += 1
        for j in range(N):
            shown_fin = istate[j, ker.S_FINISHED] - (inflight[j, IF_FIN] if inflight[j, IF_ON] == 1 else 0)
            outstanding[j] = routed[j] - shown_fin
        if router == RR:
            r = _round_robin(cst[C_ROUTED], N)
        elif router == LO:
            r = _least_outstanding(outstanding)
        elif router == LKV:
            for j in range(N):
                used = inflight[j, IF_USED] if inflight[j, IF_ON] == 1 else istate[j, ker.S_USED]
                need = cum[j, istate[j, ker.S_SUBMITTED]] - cum[j, istate[j, ker.S_ADMIT]]
                kv_load[j] = _kv_load(used, need, iparams[j, ker.I_BLOCKS])
            r = _least_kv(kv_load, outstanding)
        else:
            key = key_id[i]
            r, home, over = _affinity(homes[key], outstanding, limit)
            homes[key] = home
            cst[C_OVERFLOWS] += over
        assigned[i] = r
        routed[r] += 1
        cst[C_ROUTED] += 1
        k = istate[r, ker.S_SUBMITTED]
        gidx[r, k] = i
        arrival[r, k] = c_arrival[i]
        prompt[r, k] = prompt_all[i]
        out[r, k] = out_all[i]
        first[r, k] = first_all[i]
        last[r, k] = last_all[i]
        cum[r, k + 1] = cum[r, k] + pblocks[r, i]
        istate[r, ker.S_SUBMITTED] = k + 1
        if push_wait[r] == 1:
            push_wait[r] = 0
            _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, r, now, NORMAL, K_TOP)


@njit(cache=True)
def _router_body(now, N, ev_time, ev_prio, ev_eid, ev_kind, cst, c_arrival):
    """After ClusterSimulation._router_loop's route_due: return once every request is routed, else wait (a new wake
    event) for the next arrival's timeout or the wake, or, with no arrival known (a closed loop whose clients are
    all waiting), for the wake alone. Stale events of its last wait (a timeout or wake that lost) do nothing: gone."""
    for p in (N, N + 1):
        ev_time[p] = math.inf
        ev_kind[p] = K_NONE
    if cst[C_ROUTED] == len(c_arrival):
        cst[C_RMODE] = R_DONE
        return
    cst[C_WAKE_ARMED] = 1
    if cst[C_SRC] < cst[C_NEXT]:
        delay = c_arrival[cst[C_SRC]] - now
        _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, N, now + (delay if delay > 0.0 else 0.0), NORMAL,
                  K_R_TIMEOUT)
        cst[C_RMODE] = R_WAIT_COND
    else:
        cst[C_RMODE] = R_WAIT_WAKE


@njit(cache=True)
def _finishes_in_order(j, before, n_before, admit0, admit, end, finish, out, gidx, fin_list):
    """The requests replica j's step finished (at `end`), as cluster indices in StepOutcome's order (decoding
    requests in admission order, then those their prefill finished), into fin_list; returns how many."""
    m = 0
    for by_prefill in range(2):
        for t in range(n_before + admit - admit0):
            k = before[t] if t < n_before else admit0 + t - n_before
            if finish[j, k] == end and (out[j, k] <= 1) == (by_prefill == 1):
                fin_list[j, m] = gidx[j, k]
                m += 1
    return m


@njit(cache=True)
def run_cluster(c_arrival, c_client, prompt_all, out_all, first_all, last_all, pblocks, key_id, key_client, homes,
                limit, router, assigned, routed, ev_time, ev_prio, ev_eid, ev_kind, push_wait, cst, cft, inflight,
                fin_list, next_check, client_of, tab, rowof, cap, target, drafts, dprofiles, pf_order, arm_slot,
                gidx, cum, arrival, prompt, out, first, last, est_s, est_f, arm_counts, arm_sums, usage, iparams,
                fparams, istate, fstate, run, gen, prefill_left, prefill_done, blocks, last_emit, first_sched,
                first_token, finish, dsteps, dprop, dacc, rows_i, rows_f, itl):
    """Process the cluster's events until every request finished (`DONE`), replica cst[C_FULL_REP]'s row buffers
    cannot take its next step (`FULL`), or a step's end brings the cluster's finished requests to `next_check`
    (`HOOK`, at time cft[CF_NOW]; -1: no hook); returns the code (negative: a replica's kernel error, or `STALLED`).
    Processes 0..N-1 are the replicas; N holds the router's timeout (then its condition), N + 1 its wake."""
    n = len(c_arrival)
    N = len(routed)
    closed = cst[C_CLOSED] == 1
    outstanding = np.zeros(N, np.int64)
    kv_load = np.zeros(N, np.float64)
    before = np.empty(run.shape[1], np.int64)
    while True:
        j = cst[C_RESUME_REP]
        if j >= 0:  # a replica's turn that returned to the caller midway
            now = cft[CF_NOW]
            phase = cst[C_RESUME_PHASE]
            cst[C_RESUME_REP] = -1
        else:
            p = _next_process(ev_time, ev_prio, ev_eid)
            now = ev_time[p]
            if now == math.inf:  # nothing scheduled: every process waits for what cannot come
                fin = 0
                for q in range(N):
                    fin += istate[q, ker.S_FINISHED]
                return DONE if fin == n and cst[C_ROUTED] == n else STALLED
            kind = ev_kind[p]
            ev_time[p] = math.inf
            ev_kind[p] = K_NONE
            if p >= N:  # the router
                body = kind == K_R_BODY
                if kind == K_R_TIMEOUT and cst[C_RMODE] == R_WAIT_COND:  # fires the condition (timeout | wake)
                    cst[C_RMODE] = R_PENDING
                    _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, N, now, NORMAL, K_R_BODY)
                elif kind == K_R_WAKE and cst[C_RMODE] == R_WAIT_COND:
                    cst[C_RMODE] = R_PENDING
                    _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, N + 1, now, NORMAL, K_R_BODY)
                elif kind == K_R_WAKE and cst[C_RMODE] == R_WAIT_WAKE:  # it waited on the wake itself
                    body = True
                if body:
                    cst[C_RMODE] = R_RUNNING
                    _route_due(now, c_arrival, prompt_all, out_all, first_all, last_all, pblocks, key_id, homes,
                               limit, router, assigned, routed, cst, inflight, istate, iparams, cum, gidx, arrival,
                               prompt, out, first, last, outstanding, kv_load, push_wait, ev_time, ev_prio, ev_eid,
                               ev_kind)
                    _router_body(now, N, ev_time, ev_prio, ev_eid, ev_kind, cst, c_arrival)
                continue
            j = p
            if kind == K_STEP_END:  # the step applied: its finishes and freed KV show; the step hook is told
                inflight[j, IF_ON] = 0
                phase = PH_AFTER_STEP
                if closed:  # ClusterSimulation.on_finish, in StepOutcome's order: the client's next request
                    for t in range(inflight[j, IF_FIN]):
                        i = fin_list[j, t]
                        if cst[C_NEXT] < n:  # ClosedLoopArrivals._submit
                            x = cst[C_NEXT]
                            c_arrival[x] = now + cft[CF_THINK]
                            c_client[x] = c_client[i]
                            if key_client == 1:
                                key_id[x] = c_client[i]
                            cst[C_NEXT] = x + 1
                        if cst[C_WAKE_ARMED] == 1:  # the router's wake fires
                            cst[C_WAKE_ARMED] = 0
                            _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, N + 1, now, NORMAL, K_R_WAKE)
                if next_check >= 0:
                    fin = 0
                    for q in range(N):
                        fin += istate[q, ker.S_FINISHED] - (inflight[q, IF_FIN] if inflight[q, IF_ON] == 1 else 0)
                    if fin >= next_check:
                        cst[C_RESUME_REP] = j
                        cst[C_RESUME_PHASE] = PH_AFTER_STEP
                        cst[C_HOOK_REP] = j
                        cft[CF_NOW] = now
                        return HOOK
            else:
                phase = PH_TOP
        if phase == PH_AFTER_STEP:  # Server.loop: vLLM V1's engine-loop gap after a busy step
            wait = _gap(True, fparams[j, ker.F_GAP], istate[j, ker.S_NRUN],
                        istate[j, ker.S_PTR] - istate[j, ker.S_ADMIT])
            if wait > 0.0:
                _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, j, now + wait, NORMAL, K_TOP)
                continue
        # the top of Server.loop: pull (routing what is due first), then idle or one step
        rj = rows_i[j]
        if istate[j, ker.S_ROWS] + 3 > rj.shape[1] or istate[j, ker.S_ITL] + iparams[j, ker.I_MAX_SEQS] > itl.shape[1]:
            cst[C_RESUME_REP] = j
            cst[C_RESUME_PHASE] = PH_TOP
            cst[C_FULL_REP] = j
            cft[CF_NOW] = now
            return FULL
        _route_due(now, c_arrival, prompt_all, out_all, first_all, last_all, pblocks, key_id, homes, limit, router,
                   assigned, routed, cst, inflight, istate, iparams, cum, gidx, arrival, prompt, out, first, last,
                   outstanding, kv_load, push_wait, ev_time, ev_prio, ev_eid, ev_kind)
        if istate[j, ker.S_NRUN] == 0 and istate[j, ker.S_ADMIT] == istate[j, ker.S_SUBMITTED]:  # Server._idle
            if cst[C_SRC] < cst[C_NEXT]:  # until the next arrival
                delay = c_arrival[cst[C_SRC]] - now
                _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, j, now + (delay if delay > 0.0 else 0.0), NORMAL,
                          K_TOP)
            else:  # none known: until a push
                push_wait[j] = 1
            continue
        istate[j, ker.S_BUSY] = 0
        fstate[j, ker.FS_NOW] = now
        fin0 = istate[j, ker.S_FINISHED]
        step0 = istate[j, ker.S_STEP]
        n_before = istate[j, ker.S_NRUN]
        admit0 = istate[j, ker.S_ADMIT]
        for t in range(n_before):
            before[t] = run[j, t]
        code = ker.run_steps(arrival[j], client_of, prompt[j], out[j], first[j], last[j], tab, rowof, cap, target,
                             drafts, dprofiles, pf_order, est_s[j], est_f[j], arm_counts[j], arm_sums[j], arm_slot,
                             usage[j], iparams[j], fparams[j], istate[j], fstate[j], run[j], gen[j],
                             prefill_left[j], prefill_done[j], blocks[j], last_emit[j], first_sched[j],
                             first_token[j], finish[j], dsteps[j], dprop[j], dacc[j], rj, rows_f[j], itl[j],
                             n + 1, -math.inf)
        if code < 0 or istate[j, ker.S_STEP] != step0 + 1:
            cft[CF_NOW] = now
            cst[C_FULL_REP] = j
            return code if code < 0 else STALLED
        inflight[j, IF_ON] = 1
        inflight[j, IF_USED] = rj[ker.R_USED, istate[j, ker.S_ROWS] - 1]
        inflight[j, IF_FIN] = istate[j, ker.S_FINISHED] - fin0
        end = fstate[j, ker.FS_NOW]
        if closed and inflight[j, IF_FIN] > 0:
            _finishes_in_order(j, before, n_before, admit0, istate[j, ker.S_ADMIT], end, finish, out, gidx, fin_list)
        _schedule(ev_time, ev_prio, ev_eid, ev_kind, cst, j, end, NORMAL, K_STEP_END)
