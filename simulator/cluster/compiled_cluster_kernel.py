"""The compiled cluster loop (numba): every replica of a cluster and its router advance in one call.

The loop replays the SimPy events the replicas' and the router's processes schedule (simulator/cluster/simulation.py,
simulator/engine/compiled_replica.py), in SimPy's order (time, priority, then the order they were scheduled in), for
N + 1 processes: each replica (its start, the engine-loop gap's end, an idle wait's end or the push that ends it, a
step's end) and the router (a timeout to the next arrival or, in a closed loop, the wake event a finish fires, then the
condition event that resumes it). A closed loop's finishes submit their clients' next requests at the step's end, in the
kernel's order of them. A replica's step is planned and applied by ONE call of compiled_kernel.run_steps at the step's
start; until its end event the replica shows what a replica's own process shows while it is in flight (KV after the
step's plan, its finishes not yet), so a routing reads the same outstanding requests and KV load. A routing calls the
functions the router process calls (router.route_request, router.replica_kv_load, kernel_records.submit_request),
compiled. All state lives in the records passed in: the cluster's own (Routing, ClusterSettings, the CLUSTER_STATE
record, Processes, ReplicaViews) and the replicas' kernel records (simulator/engine/kernel_records.py), stacked along a
first axis of replicas, from which each replica's own records are taken for its run_steps call. So the caller may empty
a replica's full row buffers (`FULL`) or ask the early-stop hook (`HOOK`, once the cluster's finished requests reach
`next_check`) and call again; the loop resumes where it returned.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numba.extending import register_jitable

import simulator.engine.compiled_kernel as ker
import simulator.engine.compiled_psd_kernel as pker
from simulator.cluster.router import (LKV, affinity_rule, least_kv_rule, least_outstanding_rule, replica_kv_load,
                                      round_robin_rule, route_request, route_rule)
from simulator.engine.kernel_records import (PolicyState, PSDCarry, PSDScratch, PSDSettings, Requests, StepBuffers,
                                             StepRows, Workload, submit_request)
from simulator.engine.rules import arrivals as arrival_rules
from simulator.engine.rules.engine_loop import engine_loop_gap, overlapped_gap

for _rule in (round_robin_rule, least_outstanding_rule, least_kv_rule, affinity_rule, route_rule):
    register_jitable(_rule)  # route_request calls them: compiled in place
_route_request = njit(cache=True)(route_request)
_kv_load = njit(cache=True)(replica_kv_load)
_submit = njit(cache=True)(submit_request)
_gap = njit(cache=True)(engine_loop_gap)
_overlapped = njit(cache=True)(overlapped_gap)

# return codes (negative: compiled_kernel's error codes)
DONE, FULL, HOOK, STALLED = 0, 1, 2, -3
# event kinds of a process's one pending event
K_NONE, K_TOP, K_STEP_END, K_R_TIMEOUT, K_R_BODY, K_R_WAKE = range(6)
URGENT, NORMAL = 0, 1  # SimPy's priorities (a process's start is URGENT)
# the router's wait (ClusterState.rmode): on its timeout or wake (the condition), on its wake alone, resumed (the
# condition fired), returned (every request routed)
R_RUNNING, R_WAIT_COND, R_WAIT_WAKE, R_PENDING, R_DONE = range(5)
# a resumed replica's phase: after a step's end (the engine-loop gap decision), or at the top of its loop
PH_AFTER_STEP, PH_TOP = 0, 1


class Routing(NamedTuple):
    """The cluster's requests as the router sees them: a Workload in the cluster's numbering (a closed loop appends
    its next submissions' arrival times and clients), each replica's prompt blocks per request (`pblocks[j, i]`),
    each request's affinity key and the replicas' outstanding limits (affinity). The router's bookkeeping is the
    cluster's router.RouterState, passed beside it."""
    requests: Workload
    pblocks: np.ndarray  # int64 (replicas, requests)
    key_id: np.ndarray
    limit: np.ndarray


class ClusterSettings(NamedTuple):
    """The loop's fixed settings."""
    router: int  # router.ROUTER_CODES
    closed: bool  # a closed loop: a finish submits its client's next request after `think` and wakes the router
    think: float
    psd: bool  # the replicas are PSD servers (compiled_psd_kernel.run_psd_steps steps them)


class Processes(NamedTuple):
    """Each process's one pending event: 0..N-1 the replicas, N the router's timeout (then its condition), N + 1 its
    wake; its time, SimPy priority, event id and kind (K_*)."""
    time: np.ndarray  # float64
    prio: np.ndarray  # int64
    eid: np.ndarray
    kind: np.ndarray


class ReplicaViews(NamedTuple):
    """What the loop keeps per replica beside its kernel records: whether it waits for a push, the time it went idle
    (NaN: not idle), the cluster index of its k-th routed request, the prompt blocks of its first k routed
    (CompiledReplica's gidx and cum, stacked), the step in flight (on, KV after its plan, its finishes) and those
    finishes in the kernel's order (Scratch.done)."""
    push_wait: np.ndarray  # int64 (replicas,)
    idle_since: np.ndarray  # float64 (replicas,)
    gidx: np.ndarray  # (replicas, requests)
    cum: np.ndarray  # (replicas, requests + 1)
    flight_on: np.ndarray
    flight_used: np.ndarray
    flight_fin: np.ndarray
    fin_list: np.ndarray  # (replicas, max_num_seqs)


class PSDRecords(NamedTuple):
    """PSD replicas' own kernel records: the PSDSettings they share, their PSD_STATE records (one per replica),
    PSDCarry (stacked along a first axis of replicas) and one PSDScratch for every replica's steps."""
    cfg: PSDSettings
    state: np.ndarray
    carry: PSDCarry
    scratch: PSDScratch


# the loop's scalars (a one-record array, written in place)
CLUSTER_STATE = np.dtype([
    ("eid", np.int64),  # the next event id
    ("src", np.int64),  # arrivals routed (pulled from the source)
    ("next", np.int64),  # arrivals submitted (open loop: all)
    ("rmode", np.int64),  # the router's wait (R_*)
    ("wake_armed", np.int64),  # its wake event exists and has not fired
    ("resume_rep", np.int64),  # a replica's turn that returned to the caller midway (-1: none), and its phase
    ("resume_phase", np.int64),
    ("full_rep", np.int64),  # the replica whose buffers are full (or whose kernel failed)
    ("now", np.float64),  # the time a return happened at
], align=True)


@njit(cache=True)
def _schedule(ev, cs, p, t, prio, kind):
    """Process `p`'s next event at `t` (SimPy's schedule: the next event id)."""
    ev.time[p] = t
    ev.prio[p] = prio
    ev.eid[p] = cs.eid
    ev.kind[p] = kind
    cs.eid += 1


@njit(cache=True)
def _next_process(ev):
    """The process whose event SimPy processes next: the least (time, priority, event id)."""
    time, prio, eid = ev.time, ev.prio, ev.eid
    best = 0
    for p in range(1, len(time)):
        if time[p] < time[best] or (time[p] == time[best] and (
                prio[p] < prio[best] or (prio[p] == prio[best] and eid[p] < eid[best]))):
            best = p
    return best


@njit(cache=True)
def _shown_finished(views, state, j):
    """Replica j's finished requests as its process shows them (not those of a step in flight)."""
    return state[j].finished - (views.flight_fin[j] if views.flight_on[j] == 1 else 0)


@njit(cache=True)
def _route_due(now, rt, router, cset, cs, ev, views, settings, state, work, req, outstanding, kv_load):
    """Every arrival by `now` not routed yet, in order: router.route_request picks its replica from what each
    replica shows now (the router process's read: outstanding requests, KV load as router.replica_kv_load), and
    submit_request hands it to that replica's records, which wakes the replica if it waits for a push."""
    N = len(views.push_wait)
    src = rt.requests
    due = arrival_rules.pull_due(src.arrival, cs.src, cs.next, now)
    while cs.src < due:
        i = cs.src
        cs.src += 1
        for j in range(N):
            outstanding[j] = router.routed_to[j] - _shown_finished(views, state, j)
        if cset.router == LKV:
            for j in range(N):
                used = views.flight_used[j] if views.flight_on[j] == 1 else state[j].used
                kv_load[j] = _kv_load(used, views.cum[j], state[j].submitted, state[j].admit, req.requeued[j],
                                      state[j].requeued, settings[j].total_blocks)
        r = _route_request(cset.router, router, i, rt.key_id[i], outstanding, kv_load, rt.limit)
        dst = Workload(work.arrival[r], work.client_of, work.prompt[r], work.out[r], work.first[r], work.last[r])
        _submit(dst, views.gidx[r], views.cum[r], state[r], src, i, rt.pblocks[r, i])
        if views.push_wait[r] == 1:
            views.push_wait[r] = 0
            _schedule(ev, cs, r, now, NORMAL, K_TOP)


@njit(cache=True)
def _router_body(now, N, ev, cs, routed, arrival):
    """After ClusterSimulation._router_loop's route_due: return once every request is routed, else wait (a new wake
    event) for the next arrival's timeout or the wake, or, with no arrival known (a closed loop whose clients are
    all waiting), for the wake alone. Stale events of its last wait (a timeout or wake that lost) do nothing: gone."""
    for p in (N, N + 1):
        ev.time[p] = math.inf
        ev.kind[p] = K_NONE
    if routed == len(arrival):
        cs.rmode = R_DONE
        return
    cs.wake_armed = 1
    if cs.src < cs.next:
        delay = arrival[cs.src] - now
        _schedule(ev, cs, N, now + (delay if delay > 0.0 else 0.0), NORMAL, K_R_TIMEOUT)
        cs.rmode = R_WAIT_COND
    else:
        cs.rmode = R_WAIT_WAKE


@njit(cache=True)
def _replica_records(work, req, pol, bufs, j):
    """Replica j's own kernel records (views of its rows of the stacked ones)."""
    w = Workload(work.arrival[j], work.client_of, work.prompt[j], work.out[j], work.first[j], work.last[j])
    q = Requests(req.run[j], req.gen[j], req.prefill_left[j], req.prefill_done[j], req.blocks[j], req.last_emit[j],
                 req.first_sched[j], req.first_token[j], req.finish[j], req.dsteps[j], req.dprop[j], req.dacc[j],
                 req.last_slot[j], req.preempted[j], req.requeued[j])
    p = PolicyState(pol.est_s[j], pol.est_f[j], pol.arm_counts[j], pol.arm_sums[j], pol.ring_arm[j], pol.ring_reward[j],
                    pol.seen[j], pol.arm_slot, pol.usage[j], pol.chosen[j], pol.chosen_k[j], pol.plan_row[j],
                    pol.plan_free[j], pol.plan_d[j], pol.plan_k[j], pol.plan_value[j])
    r = bufs.rows
    rows = StepRows(r.step[j], r.phase[j], r.num_seqs[j], r.prefill_tokens[j], r.batched_tokens[j], r.kv_tokens[j],
                    r.kv_blocks_used[j], r.proposed_tokens[j], r.accepted_tokens[j], r.emitted_tokens[j],
                    r.drafters[j], r.start[j], r.end[j], r.device[j], r.sub_batch[j])
    return w, q, p, StepBuffers(rows, bufs.itl[j])


@njit(cache=True)
def run_cluster(rt, router, cset, cstate, ev, views, next_check, replay, costs, settings, work, state, req, pol, bufs,
                scratch, psd):
    """Process the cluster's events until every request finished (`DONE`), replica `full_rep`'s row buffers cannot take
    its next step (`FULL`), or a step's end brings the cluster's finished requests to `next_check` (`HOOK`, at time
    cstate `now`; -1: no hook); returns the code (negative: a replica's kernel error, or `STALLED`). `rt`, `cset`,
    `cstate`, `ev`, `views`: this module's records; `router`: the cluster's router.RouterState; `replay`, `costs`: the
    replicas' shared kernel records; `settings`, `work`, `state`, `req`, `pol`, `bufs`: theirs stacked along a first
    axis of replicas (the SETTINGS and RUN_STATE records one per replica; the Workload's client_of and PolicyState's
    arm_slot shared); `scratch`: one kernel_records.Scratch for every replica's steps (sized for the largest); `psd`:
    PSDRecords (PSD replicas' settings, and their PSD_STATE records and PSDCarry stacked; placeholders otherwise)."""
    cs = cstate[0]
    n = len(rt.requests.arrival)
    N = len(views.push_wait)
    outstanding = np.zeros(N, np.int64)
    kv_load = np.zeros(N, np.float64)
    while True:
        j = cs.resume_rep
        if j >= 0:  # a replica's turn that returned to the caller midway
            now = cs.now
            phase = cs.resume_phase
            cs.resume_rep = -1
        else:
            p = _next_process(ev)
            now = ev.time[p]
            if now == math.inf:  # nothing scheduled: every process waits for what cannot come
                fin = 0
                for q in range(N):
                    fin += state[q].finished
                return DONE if fin == n and router.totals[0] == n else STALLED
            kind = ev.kind[p]
            ev.time[p] = math.inf
            ev.kind[p] = K_NONE
            if p >= N:  # the router
                body = kind == K_R_BODY
                if kind == K_R_TIMEOUT and cs.rmode == R_WAIT_COND:  # fires the condition (timeout | wake)
                    cs.rmode = R_PENDING
                    _schedule(ev, cs, N, now, NORMAL, K_R_BODY)
                elif kind == K_R_WAKE and cs.rmode == R_WAIT_COND:
                    cs.rmode = R_PENDING
                    _schedule(ev, cs, N + 1, now, NORMAL, K_R_BODY)
                elif kind == K_R_WAKE and cs.rmode == R_WAIT_WAKE:  # it waited on the wake itself
                    body = True
                if body:
                    cs.rmode = R_RUNNING
                    _route_due(now, rt, router, cset, cs, ev, views, settings, state, work, req, outstanding,
                               kv_load)
                    _router_body(now, N, ev, cs, router.totals[0], rt.requests.arrival)
                continue
            j = p
            if kind == K_STEP_END:  # the step applied: its finishes and freed KV show; the step hook is told
                views.flight_on[j] = 0
                phase = PH_AFTER_STEP
                if cset.closed:  # ClusterSimulation.on_finish, in the kernel's order: the client's next request
                    for t in range(views.flight_fin[j]):
                        i = views.fin_list[j, t]
                        cs.next = arrival_rules.submit_next(rt.requests.arrival, rt.requests.client_of, cs.next,
                                                            now + cset.think, rt.requests.client_of[i])
                        if cs.wake_armed == 1:  # the router's wake fires
                            cs.wake_armed = 0
                            _schedule(ev, cs, N + 1, now, NORMAL, K_R_WAKE)
                if next_check >= 0:
                    fin = 0
                    for q in range(N):
                        fin += _shown_finished(views, state, q)
                    if fin >= next_check:
                        cs.resume_rep = j
                        cs.resume_phase = PH_AFTER_STEP
                        cs.now = now
                        return HOOK
            else:
                phase = PH_TOP
        st = state[j]
        if phase == PH_AFTER_STEP:  # a server's turn: vLLM V1's engine-loop gap after a busy step
            wait = _gap(True, settings[j].gap, st.n_run, st.requeued + st.ptr - st.admit)
            if wait > 0.0 and settings[j].async_sched:
                wait = _overlapped(wait, st.forward)
            if wait > 0.0:
                _schedule(ev, cs, j, now + wait, NORMAL, K_TOP)
                continue
        # a server's turn: pull (routing what is due first), then idle or one step
        step_rows = pker.STEP_ROWS if cset.psd else ker.STEP_ROWS
        if st.rows + step_rows > bufs.rows.step.shape[1] or st.itl + settings[j].max_seqs > bufs.itl.shape[1]:
            cs.resume_rep = j
            cs.resume_phase = PH_TOP
            cs.full_rep = j
            cs.now = now
            return FULL
        _route_due(now, rt, router, cset, cs, ev, views, settings, state, work, req, outstanding, kv_load)
        if st.n_run == 0 and st.requeued == 0 and st.admit == st.submitted:  # Server._idle
            if math.isnan(views.idle_since[j]):
                views.idle_since[j] = now
            if cs.src < cs.next:  # until the next arrival
                delay = rt.requests.arrival[cs.src] - now
                _schedule(ev, cs, j, now + (delay if delay > 0.0 else 0.0), NORMAL, K_TOP)
            else:  # none known: until a push
                views.push_wait[j] = 1
            continue
        st.busy = 0
        # an idle replica's step starts from the time it went idle: at its request's arrival itself
        # (CompiledReplica.loop)
        st.now = now if math.isnan(views.idle_since[j]) else views.idle_since[j]
        views.idle_since[j] = math.nan
        fin0 = st.finished
        step0 = st.step
        w_j, req_j, pol_j, bufs_j = _replica_records(work, req, pol, bufs, j)
        if cset.psd:  # one step of replica j: run_psd_steps or run_steps, asked to pause after one step
            c = psd.carry
            code = pker.run_psd_steps(w_j, replay, costs, settings[j:j + 1], psd.cfg, state[j:j + 1],
                                      psd.state[j:j + 1], PSDCarry(c.side[j], c.pend[j], c.pend_k[j], c.pend_p[j],
                                                                   c.pend_a[j]), req_j, pol_j, bufs_j, scratch,
                                      psd.scratch, n + 1, -math.inf)
        else:
            code = ker.run_steps(w_j, replay, costs, settings[j:j + 1], state[j:j + 1], req_j, pol_j, bufs_j,
                                 scratch, n + 1, -math.inf)
        if code < 0 or st.step != step0 + 1:
            cs.now = now
            cs.full_rep = j
            return code if code < 0 else STALLED
        views.flight_on[j] = 1
        views.flight_used[j] = bufs.rows.kv_blocks_used[j, st.rows - 1]
        views.flight_fin[j] = st.finished - fin0
        end = st.now
        if cset.closed:  # the step's finishes in the kernel's own order of them (Scratch.done)
            for t in range(views.flight_fin[j]):
                views.fin_list[j, t] = views.gidx[j, scratch.done[t]]
        _schedule(ev, cs, j, end, NORMAL, K_STEP_END)
