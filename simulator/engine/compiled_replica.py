"""A cluster replica: its SimPy process takes runs of steps in the kernels (compiled_kernel.run_steps, PSD's).

A replica behind a router (simulator/cluster/simulation.py) is read at run time: the router sees its outstanding
requests and KV load when it routes, an early-stop monitor its per-request times after a step that finishes one. So the
replica keeps a server's turns (engine-loop gap, pull, idle or steps, apply, step hook), and each kernel call runs the
steps that start before the next routing (`loop`), then shows the state while the last of them is in flight (KV after
its plan, its finishes not yet) and, at its end, its first tokens, finishes, freed KV and the closed-loop submissions
(`on_finish`, in the kernel's order of that step's finishes). The kernel works on the replica's own requests, numbered
in routing order (routing order is arrival order, so the kernel's FIFO pointers hold); `settle` writes them back into
the server's state and tables, as `CompiledRun._write` does for a single server. A server fed by a bare `PushedArrivals`
(simulator/engine/arrivals.py) runs here too, one step per call: nothing tells when its next push comes.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.engine import compiled_run
from simulator.engine.compiled_run import CompiledRun
from simulator.engine.kernel_records import (Requests, Workload, new_state, rows_head, scratch_buffers,
                                             settings_record, step_buffers, submit_request)
from simulator.engine.rules.engine_loop import engine_loop_gap, overlapped_gap


def exact_delay(now: float, end: float) -> float:
    """A delay `d` with `now + d == end` in floating point (SimPy schedules a timeout at `now + d`), so a replica's
    step ends at the kernel's clock bit for bit."""
    d = end - now
    while now + d < end:
        d = math.nextafter(d, math.inf)
    while now + d > end:
        d = math.nextafter(d, -math.inf)
    if now + d != end:  # possible only where end - now is inexact (end > 2 now) and ties-to-even skips `end`
        raise ArithmeticError(f"no SimPy delay from t={now!r} lands on t={end!r}")
    return d


def exact_delays(now: float, end: float) -> list[float]:
    """Delays whose timeouts, one after another from `now`, land on `end` bit for bit: one (exact_delay) where it
    exists, always so where end <= 2 now (end - now is then exact, Sterbenz's lemma) or the kernel formed `end` as
    now + a step's duration; else first through 2 now, 4 now, ... (each doubling exact)."""
    out = []
    while True:
        try:
            out.append(exact_delay(now, end))
            return out
        except ArithmeticError:
            if not (0.0 < now and 2.0 * now < end):
                raise
            out.append(now)
            now = now + now


CHAIN = 4  # a run's last SimPy events (a step's end, a gap's end) the replica's process waits through (loop)


class CompiledReplica(CompiledRun):
    """The compiled step of one cluster replica and the replica state the router and the step hook read."""

    stepwise = True

    def __init__(self, server):
        super().__init__(server)
        import simulator.engine.compiled_kernel as ker

        srv = self.srv
        n = len(srv.wl)
        self.ker = ker
        self.gidx = np.zeros(n, dtype=np.int64)  # the replica's k-th routed request -> workload index
        self.prompt_all = srv.wl.prompt_len.astype(np.int64)
        self.out_all = srv.wl.output_len.astype(np.int64)
        self.first_all, self.last_all = self.first, self.last
        self.prompt_blocks = srv.sched.pool.blocks_for(srv.wl.prompt_len).astype(np.int64)
        self.cum = np.zeros(n + 1, dtype=np.int64)  # prompt blocks of its first k routed requests (submit_request)

        def z():
            return np.zeros(n, dtype=np.int64)

        # the replica's requests in routing order (the cluster's source submits closed-loop requests: no client_of)
        self.work = Workload(np.full(n, np.nan), np.zeros(1, dtype=np.int64), z(), z(), z(), z())
        self.req = Requests(np.zeros(srv.max_num_seqs, dtype=np.int64), z(), z(), z(), z(),
                            *(np.full(n, np.nan) for _ in range(4)), z(), z(), z(), np.full(n, -1, dtype=np.int64),
                            z(), np.zeros(srv.max_num_seqs, dtype=np.int64))
        self.pol = self.policy_state(n)
        # its requests as pushed, in the workload's numbering (what submit_request copies from)
        self.source = Workload(srv.state.arrival, self.work.client_of, self.prompt_all, self.out_all, self.first_all,
                               self.last_all)
        if self.psd:
            self._psd_records(np.full(n, -1, dtype=np.int64))  # its requests' sides (its numbering), -1 till they join
        self.state = new_state(used=srv.sched.pool.used, peak=srv.sched.pool.used)
        self.rs = self.state[0]  # the kernel's scalars (kernel_records.RUN_STATE), read and written here too
        self.bufs = None  # the StepBuffers, allocated at the first step
        self.settled = np.zeros((3, n), dtype=np.int64)  # dsteps, dprop, dacc already in the server's counters
        self.settled_usage = np.zeros_like(self.pol.usage)
        # idle with nothing routed here: the kernel returns to wait for a push
        self.settings = self.settings._replace(routed=True)
        self.kernel_settings = settings_record(self.settings)
        self.recent: list[tuple[int, float, float, int]] = []  # the last steps taken (_note_steps)
        self.driven = False  # stepped by the compiled cluster loop (simulator/cluster/compiled_cluster.py), not loop

    @property
    def where(self) -> str:
        return f" (cluster replica {getattr(self.srv.arrivals, 'replica', '?')})"

    @property
    def n_known(self) -> int:
        return int(self.rs.submitted)

    def _requeued(self) -> np.ndarray:
        """The replica's preempted requests (its numbering), at the waiting queue's front in order."""
        return self.req.requeued[:int(self.rs.requeued)].copy()

    def take(self, pulled) -> None:
        """Requests pushed to it (workload indices, routing order) become the kernel's next requests."""
        for i in pulled:
            submit_request(self.work, self.gidx, self.cum, self.rs, self.source, int(i), int(self.prompt_blocks[i]))

    def _idle(self) -> bool:
        rs = self.rs
        return rs.n_run == 0 and rs.requeued == 0 and rs.admit == rs.submitted

    def loop(self):
        """The replica's SimPy process: a server's turns (engine-loop gap, pull, idle or steps, apply, step hook),
        each run of steps up to the next external event taken in one kernel call.

        Nothing outside the replica reads it before `quiet_until` (the router's next routing), so the kernel takes every
        step that starts before then. The replica then shows what a server shows while the last of them is in flight:
        everything up to its start (first tokens and finishes, shown at the call; the cluster's progress snapshot hides
        those after its clock, simulator/measure/early_stop.progress_of), KV after its plan, and at its end its first
        tokens, finishes and freed KV. Its process waits through the last CHAIN events a server stepping one step at a
        time would schedule (`_last_events`), each at the time of the one before, so events of other processes at the
        same instant keep their order. A step hook (the plan's early stop) counts finishes, and a closed loop's finish
        submits a request: then a run also ends at the first step that finishes a request, so each finish shows at its
        own step's end and the hook is told there."""
        if self.driven:
            return
        srv = self.srv
        env, st, pool, rs = srv.env, srv.state, srv.sched.pool, self.rs
        arrivals = srv.arrivals
        n = len(srv.wl)
        idle_since = None  # the time it went idle (None: not idle)
        while st.n_finished < n:
            gap = engine_loop_gap(rs.busy == 1, srv.gap_s, int(rs.n_run),
                                  int(rs.requeued + rs.ptr - rs.admit))  # vLLM V1, then inputs
            if gap and srv.async_scheduling:
                gap = overlapped_gap(gap, float(rs.forward))
            if gap:
                yield env.timeout(gap)
            rs.busy = 0
            self.take(arrivals.pull(env.now))
            if self._idle():
                idle_since = float(env.now) if idle_since is None else idle_since
                yield srv._idle()
                continue
            now = float(env.now)
            before = np.concatenate([self.req.run[:int(rs.n_run)], self._requeued()])
            admit0, fin0 = int(rs.admit), int(rs.finished)
            each_finish = srv.on_step is not None or arrivals.submits_on_finish
            stop = int(rs.finished) + 1 if each_finish else n
            step0 = int(rs.step)
            # an idle replica's kernel starts from the time it went idle, so that its step starts at its request's
            # arrival itself (compiled_kernel._turn's idle rule), as a server's does, not at its wait's end, which
            # SimPy's sum (`now + (arrival - now)`) may round past the arrival
            self._steps(now if idle_since is None else idle_since, arrivals.quiet_until(now), stop)
            idle_since = None
            touched = np.concatenate([before, np.arange(admit0, int(rs.admit))])
            end = float(rs.now)
            hops = self._last_events(step0, srv.gap_s > 0.0)
            if len(hops) > 1:  # the steps before the last one: done before its start
                self._show_before(touched, end)
            for t in hops[:-1]:
                for d in exact_delays(float(env.now), t):
                    yield env.timeout(d)
            pool.used = self.recent[-1][3]  # in flight: KV after the last step's plan, its finishes not yet
            yield env.timeout(exact_delay(env.now, end))
            self._apply(touched, int(rs.finished) - fin0)
            if srv.on_step is not None:
                srv.on_step(st.n_finished)

    def _steps(self, now: float, until: float, stop: int) -> int:
        """Kernel steps from `now`: those starting before `until`, up to the one that makes `stop` finishes (the
        kernel checks its buffers before a step, so a full buffer is emptied into the server's tables between two
        steps and the run goes on); returns how many steps it took."""
        if self.bufs is None:
            rows = compiled_run.segment_rows()
            self.bufs = step_buffers(rows, rows * 16 + self.srv.max_num_seqs)
            self.scratch = scratch_buffers(self.srv.max_num_seqs, self.settings.k_max, len(self.slots))
        step0 = int(self.rs.step)
        self.rs.now = now
        while True:
            code = self.call(self.work, self.state, self.req, self.pol, self.bufs, self.scratch, stop, until)
            self._note_steps()
            if code == self.ker.FULL:  # the buffers are emptied and the run goes on
                self._flush()
                continue
            return int(self.rs.step) - step0

    def _note_steps(self) -> None:
        """(number, start, end, KV after its plan) of the last CHAIN steps the kernel took, from the row buffer: a
        step's rows share its number, its earliest row starts it and its latest ends it (a PSD step's two devices'
        rows overlap), each records the KV after its plan (a step's rows never straddle two buffers)."""
        rows = self.bufs.rows
        r = int(self.rs.rows)
        found = []
        while r > 0 and len(found) < CHAIN:
            no = int(rows.step[r - 1])
            if self.recent and no <= self.recent[-1][0]:
                break
            r0 = r - 1
            while r0 > 0 and rows.step[r0 - 1] == no:
                r0 -= 1
            found.append((no, float(rows.start[r0:r].min()), float(rows.end[r0:r].max()),
                          int(rows.kv_blocks_used[r - 1])))
            r = r0
        self.recent = (self.recent + found[::-1])[-CHAIN:]

    def _last_events(self, step0: int, gap: bool) -> list[float]:
        """The times of the last CHAIN SimPy events a server stepping one step at a time schedules over the steps from
        number `step0` (each step's end; under vLLM V1 also each later step's start where an engine-loop gap came
        before it: not one that async scheduling hid wholly, which starts at the end of the step before), the last
        the run's end.
        The replica's process waits through them, so each of its events is scheduled at the time of the one before,
        and events of other processes at the same instant keep their order. (The first step
        held has no step before it here: CHAIN events follow its start, so it is never among them.)"""
        times = []
        last_end = None
        for no, start, end, _ in self.recent:
            if no >= step0:
                if gap and no > step0 and last_end is not None and start > last_end:
                    times.append(start)
                times.append(end)
            last_end = end
        return times[-CHAIN:]

    def _show_before(self, touched: np.ndarray, end: float) -> None:
        """The first tokens and finishes of the run's steps before its last one (those before `end`), and the count."""
        st = self.srv.state
        g = self.gidx[touched]
        ft, fin = self.req.first_token[touched], self.req.finish[touched]
        st.first_token[g] = np.where(ft < end, ft, np.nan)
        st.finish[g] = np.where(fin < end, fin, np.nan)
        st.n_finished = int(self.rs.finished) - int(np.count_nonzero(fin == end))

    def _apply(self, touched: np.ndarray, finished: int) -> None:
        """The run ended: its first tokens, finishes and freed KV show; where a finish submits a request (a closed
        loop), the run ended at its first step that finished any (`loop`), and its `finished` requests go to the
        arrival source in the kernel's own order of that step's finishes (Scratch.done)."""
        srv, req = self.srv, self.req
        st = srv.state
        g = self.gidx[touched]
        st.first_token[g] = req.first_token[touched]
        st.finish[g] = req.finish[touched]
        st.n_finished = int(self.rs.finished)
        srv.sched.pool.used = int(self.rs.used)
        if srv.arrivals.submits_on_finish:
            for k in self.scratch.done[:finished]:
                srv.arrivals.on_finish(int(self.gidx[k]), float(req.finish[k]))

    def _flush(self) -> None:
        """The step rows and ITL gaps in the buffers into the server's tables; the buffers start over."""
        log, bufs, rs = self.srv.log, self.bufs, self.rs
        r, ni = int(rs.rows), int(rs.itl)
        if ni:
            log.itl_chunks.append(bufs.itl[:ni].copy())
        if r:
            log.steps.append_columns(self._columns(rows_head(bufs.rows, r, copy=True)))
        rs.rows = rs.itl = 0

    def settle(self) -> None:
        """Everything the kernel did so far into the server's state, counters, KV pool, policy and tables (called
        by Server.result; again later, it adds only what happened since)."""
        srv, rs, req, pol = self.srv, self.rs, self.req, self.pol
        st = srv.state
        if self.bufs is not None:
            self._flush()
        k = self.n_known
        g, loc = self.gidx[:k], slice(0, k)
        for name in ("gen", "prefill_left", "prefill_done", "blocks", "last_emit", "first_sched", "first_token",
                     "finish"):
            getattr(st, name)[g] = getattr(req, name)[loc]
        n_run, nq = int(rs.n_run), int(rs.requeued)
        run = req.run[:n_run]
        # the queues in workload numbering: every request routed here has arrived (pulled or not)
        st.run[:n_run], st.requeued[:nq], st.arrived[:k] = self.gidx[run], self.gidx[req.requeued[:nq]], g
        st.n_run, st.nq, st.admit, st.ptr = n_run, nq, int(rs.admit), k
        st.preemptions[g] = req.preempted[loc]
        st.started[g[~np.isnan(req.first_token[loc])]] = True
        st.n_finished = int(rs.finished)
        counts = np.stack([req.dsteps[loc], req.dprop[loc], req.dacc[loc]])
        self._add_counts(g, *(counts - self.settled[:, loc]), pol.usage - self.settled_usage, rs)
        self.settled[:, loc], self.settled_usage = counts, pol.usage.copy()
        self._write_policy(pol, run, self.work.first, self.work.last)
        self._write_last_drafter(req.last_slot[loc], g)
        if self.psd:
            st.sub_batch[g] = self.carry.side[loc]
            self._write_psd(loc, g)
