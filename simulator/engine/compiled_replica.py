"""A cluster replica on the compiled path: its SimPy process takes runs of steps in compiled_kernel.run_steps.

A replica behind a router (simulator/cluster/simulation.py) is read at run time: the router sees its outstanding
requests and KV load when it routes, an early-stop monitor its per-request times after a step that finishes one. So
the replica keeps the step path's turns (engine-loop gap, pull, idle or steps, apply, step hook), and each kernel call
runs the steps that start before the next routing (`loop`), then shows the step path's state while the last of them
is in flight (KV after its plan, its finishes not yet) and, at its end, its first tokens, finishes, freed KV and the
closed-loop submissions (`on_finish`, in the step path's order). The kernel works on the replica's own requests,
numbered in routing order (routing order is arrival order, so the kernel's FIFO pointers hold); `settle` writes them
back into the server's state and tables, as `CompiledRun._write` does for a single server.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.engine import compiled_run
from simulator.engine.compiled_run import CompiledRun
from simulator.engine.request_state import FINISHED, RUNNING, WAITING
from simulator.engine.rules.engine_loop import engine_loop_gap


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


CHAIN = 4  # a run's last SimPy events of the step path the replica's process waits through (CompiledReplica.loop)


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
        self.first, self.last = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.arrival = np.full(n, np.nan)
        self.prompt, self.out = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.gen, self.prefill_left, self.prefill_done, self.blocks = (np.zeros(n, dtype=np.int64) for _ in range(4))
        self.last_emit, self.first_sched, self.first_token, self.finish = (np.full(n, np.nan) for _ in range(4))
        self.dsteps, self.dprop, self.dacc = (np.zeros(n, dtype=np.int64) for _ in range(3))
        self.usage = np.zeros(len(self.slots) + 1, dtype=np.int64)
        self.est_s, self.est_f = self._estimates(n)
        self.arm_counts, self.arm_sums = self._arms(n)
        self.istate = np.zeros(ker.N_ISTATE, dtype=np.int64)
        self.istate[ker.S_USED] = self.istate[ker.S_PEAK] = srv.sched.pool.used
        self.fstate = np.zeros(ker.N_FSTATE)
        self.run_ = np.zeros(srv.max_num_seqs, dtype=np.int64)
        self.client_of = np.zeros(1, dtype=np.int64)  # the cluster's source submits closed-loop requests
        self.rows_i = self.rows_f = self.itl = None  # allocated at the first step
        self.settled = np.zeros((3, n), dtype=np.int64)  # dsteps, dprop, dacc already in the server's counters
        self.settled_usage = np.zeros_like(self.usage)
        self.iparams[ker.I_ROUTED] = 1  # idle with nothing routed here: the kernel returns to wait for a push
        self.recent: list[tuple[int, float, float, int]] = []  # the last steps taken (_note_steps)
        self.kernel_calls = 0  # run_steps calls (a count the tests read: runs of steps per call)
        self.driven = False  # stepped by the compiled cluster loop (simulator/cluster/compiled_cluster.py), not loop

    @property
    def n_known(self) -> int:
        return int(self.istate[self.ker.S_SUBMITTED])

    def waiting(self) -> np.ndarray:
        """Workload indices routed here and not yet admitted (the step path's `state.waiting`, pulled or not)."""
        ker = self.ker
        return self.gidx[int(self.istate[ker.S_ADMIT]):self.n_known]

    def _take(self, pulled) -> None:
        """Requests the router pushed (workload indices, routing order) become the kernel's next requests."""
        if not pulled:
            return
        idx = np.fromiter(pulled, dtype=np.int64, count=len(pulled))
        k = self.n_known
        sl = slice(k, k + len(idx))
        self.gidx[sl] = idx
        self.arrival[sl] = self.srv.state.arrival[idx]
        self.prompt[sl], self.out[sl] = self.prompt_all[idx], self.out_all[idx]
        self.first[sl], self.last[sl] = self.first_all[idx], self.last_all[idx]
        self.istate[self.ker.S_SUBMITTED] = k + len(idx)

    def _idle(self) -> bool:
        ist, ker = self.istate, self.ker
        return ist[ker.S_NRUN] == 0 and ist[ker.S_ADMIT] == ist[ker.S_SUBMITTED]

    def loop(self):
        """The replica's SimPy process: Server.loop's turns (engine-loop gap, pull, idle or steps, apply, step hook),
        each run of steps up to the next external event taken in one kernel call.

        Nothing outside the replica reads it before `quiet_until` (the router's next routing), so the kernel takes
        every step that starts before then. The replica then shows what the step path shows while the last of them
        is in flight: everything up to its start (first tokens and finishes, shown at the call; the cluster's
        progress snapshot hides those after its clock, simulator/measure/early_stop.progress_of), KV after its plan,
        and at its end its first tokens, finishes and freed KV. Its process waits through its last CHAIN events of
        the step path (`_last_events`), each scheduled at the time of the one before as there, so events of other
        processes at the same instant keep their order. A step hook (the plan's early stop) counts finishes, and a
        closed loop's finish submits a request: then a run also ends at the first step that finishes a request, so
        each finish shows at its own step's end and the hook is told there."""
        if self.driven:
            return
        srv, ker = self.srv, self.ker
        env, st, pool, ist = srv.env, srv.state, srv.sched.pool, self.istate
        arrivals = srv.arrivals
        n = len(srv.wl)
        while st.n_finished < n:
            gap = engine_loop_gap(ist[ker.S_BUSY] == 1, srv.gap_s, int(ist[ker.S_NRUN]),
                                  int(ist[ker.S_PTR] - ist[ker.S_ADMIT]))  # vLLM V1, then inputs (Server.loop)
            if gap:
                yield env.timeout(gap)
            ist[ker.S_BUSY] = 0
            self._take(arrivals.pull(env.now))
            if self._idle():
                yield srv._idle()
                continue
            now = float(env.now)
            before = self.run_[:int(ist[ker.S_NRUN])].copy()
            admit0 = int(ist[ker.S_ADMIT])
            each_finish = srv.on_step is not None or arrivals.submits_on_finish
            stop = int(ist[ker.S_FINISHED]) + 1 if each_finish else n
            step0 = int(ist[ker.S_STEP])
            self._steps(now, arrivals.quiet_until(now), stop)
            touched = np.concatenate([before, np.arange(admit0, int(ist[ker.S_ADMIT]))])
            end = float(self.fstate[0])
            hops = self._last_events(step0, srv.gap_s > 0.0)
            if len(hops) > 1:  # the steps before the last one: done before its start
                self._show_before(touched, end)
            for t in hops[:-1]:
                for d in exact_delays(float(env.now), t):
                    yield env.timeout(d)
            pool.used = self.recent[-1][3]  # in flight: KV after the last step's plan, its finishes not yet
            yield env.timeout(exact_delay(env.now, end))
            self._apply(touched, end)
            if srv.on_step is not None:
                srv.on_step(st.n_finished)

    def _steps(self, now: float, until: float, stop: int) -> int:
        """Kernel steps from `now`: those starting before `until`, up to the one that makes `stop` finishes (the
        kernel checks its buffers before a step, so a full buffer is emptied into the server's tables between two
        steps and the run goes on); returns how many steps it took."""
        ker = self.ker
        if self.rows_i is None:
            rows = compiled_run.SEGMENT_ROWS
            self.rows_i = np.empty((ker.ROW_INTS, rows), dtype=np.int64)
            self.rows_f = np.empty((2, rows))
            self.itl = np.empty(rows * 16 + self.srv.max_num_seqs)
        step0 = int(self.istate[ker.S_STEP])
        self.fstate[0] = now
        while True:
            code = ker.run_steps(
                self.arrival, self.client_of, self.prompt, self.out, self.first, self.last, self.tab, self.rowof,
                self.cap, self.target, self.drafts, self.dprofiles, self.pf_order, self.est_s,
                self.est_f, self.arm_counts, self.arm_sums, self.arm_slot, self.usage, self.iparams, self.fparams,
                self.istate, self.fstate, self.run_, self.gen, self.prefill_left, self.prefill_done, self.blocks,
                self.last_emit, self.first_sched, self.first_token, self.finish, self.dsteps, self.dprop, self.dacc,
                self.rows_i, self.rows_f, self.itl, stop, until)
            self.kernel_calls += 1
            self._note_steps()
            if code == ker.FULL:
                self._flush()
                continue
            if code < 0:
                raise RuntimeError(f"compiled engine (cluster replica {getattr(self.srv.arrivals, 'replica', '?')}):"
                                   f" {'stalled' if code == ker.ERR_STALL else 'needed a preemption'} near "
                                   f"t={float(self.fstate[0]):.6f}s (its eligibility check should have sent this run "
                                   "to the step path: a bug, please report it with the config)")
            return int(self.istate[ker.S_STEP]) - step0

    def _note_steps(self) -> None:
        """(number, start, end, KV after its plan) of the last CHAIN steps the kernel took, from the row buffer: a
        step's rows share its number, the first starts it and the last ends it, each records the KV after its plan (a
        step's rows never straddle two buffers)."""
        ker, ri, rf = self.ker, self.rows_i, self.rows_f
        r = int(self.istate[ker.S_ROWS])
        found = []
        while r > 0 and len(found) < CHAIN:
            no = int(ri[ker.R_STEP, r - 1])
            if self.recent and no <= self.recent[-1][0]:
                break
            r0 = r - 1
            while r0 > 0 and ri[ker.R_STEP, r0 - 1] == no:
                r0 -= 1
            found.append((no, float(rf[0, r0]), float(rf[1, r - 1]), int(ri[ker.R_USED, r - 1])))
            r = r0
        self.recent = (self.recent + found[::-1])[-CHAIN:]

    def _last_events(self, step0: int, gap: bool) -> list[float]:
        """The times of the replica's last CHAIN SimPy events of the step path over the steps from number `step0`
        (each step's end; under vLLM V1 also each later step's start, the end of the engine-loop gap before it), the
        last the run's end. The replica's process waits through them, so each of its events is scheduled at the
        time of the one before, as on the step path, and events of other processes at the same instant keep their
        order."""
        times = []
        for no, start, end, _ in self.recent:
            if no < step0:
                continue
            if gap and no > step0:
                times.append(start)
            times.append(end)
        return times[-CHAIN:]

    def _show_before(self, touched: np.ndarray, end: float) -> None:
        """The first tokens and finishes of the run's steps before its last one (those before `end`), and the count."""
        st = self.srv.state
        g = self.gidx[touched]
        ft, fin = self.first_token[touched], self.finish[touched]
        st.first_token[g] = np.where(ft < end, ft, np.nan)
        st.finish[g] = np.where(fin < end, fin, np.nan)
        st.n_finished = int(self.istate[self.ker.S_FINISHED]) - int(np.count_nonzero(fin == end))

    def _apply(self, touched: np.ndarray, end: float) -> None:
        """The run ended: its first tokens, finishes and freed KV show; each finish goes to the arrival source in
        time order and, within a step, in StepOutcome's order (decoding requests in admission order, then those a
        prefill finished)."""
        srv, ker = self.srv, self.ker
        st = srv.state
        g = self.gidx[touched]
        st.first_token[g] = self.first_token[touched]
        st.finish[g] = self.finish[touched]
        st.n_finished = int(self.istate[ker.S_FINISHED])
        srv.sched.pool.used = int(self.istate[ker.S_USED])
        done = touched[~np.isnan(self.finish[touched])]  # in admission order
        if len(done):
            order = np.lexsort((np.arange(len(done)), self.out[done] <= 1, self.finish[done]))
            for k in done[order]:
                srv.arrivals.on_finish(int(self.gidx[k]), float(self.finish[k]))

    def _flush(self) -> None:
        """The step rows and ITL gaps in the buffers into the server's tables; the buffers start over."""
        ker, outcome = self.ker, self.srv.outcome
        r, ni = int(self.istate[ker.S_ROWS]), int(self.istate[ker.S_ITL])
        if ni:
            outcome.itl_chunks.append(self.itl[:ni].copy())
        if r:
            outcome.steps.append_columns(self._columns(self.rows_i[:, :r].copy(), self.rows_f[:, :r].copy()))
        self.istate[ker.S_ROWS] = self.istate[ker.S_ITL] = 0

    def settle(self) -> None:
        """Everything the kernel did so far into the server's state, counters, KV pool, policy and tables (called
        by Server.result; again later, it adds only what happened since)."""
        srv, ker, ist = self.srv, self.ker, self.istate
        st, outcome, pool = srv.state, srv.outcome, srv.sched.pool
        if self.rows_i is not None:
            self._flush()
        k = self.n_known
        g, loc = self.gidx[:k], slice(0, k)
        for name in ("gen", "prefill_left", "prefill_done", "blocks", "last_emit", "first_sched", "first_token",
                     "finish"):
            getattr(st, name)[g] = getattr(self, name)[loc]
        n_run, admit = int(ist[ker.S_NRUN]), int(ist[ker.S_ADMIT])
        run = self.run_[:n_run]
        st.status[g] = WAITING
        st.status[self.gidx[run]] = RUNNING
        st.status[g[~np.isnan(self.finish[loc])]] = FINISHED
        st.running = [int(i) for i in self.gidx[run]]
        st.prefilling = {int(self.gidx[i]): None for i in run if self.prefill_left[i] > 0}
        st.waiting.clear()
        st.waiting.extend(int(i) for i in self.gidx[admit:k])
        st.started[g[~np.isnan(self.first_token[loc])]] = True
        st.n_finished = int(ist[ker.S_FINISHED])
        counts = np.stack([self.dsteps[loc], self.dprop[loc], self.dacc[loc]])
        delta = counts - self.settled[:, loc]
        drafted = bool(self.slots)
        st.verify_counts.add_run(g, delta[0], delta[1] if drafted else None, delta[2] if drafted else None)
        self.settled[:, loc] = counts
        du = self.usage - self.settled_usage
        for j, di in enumerate(self.drafter_idx):
            st.usage[di] += int(du[j])
        st.usage[-1] += int(du[-1])
        self.settled_usage = self.usage.copy()
        pool.used, pool.peak = int(ist[ker.S_USED]), max(pool.peak, int(ist[ker.S_PEAK]))
        outcome.step_no = int(ist[ker.S_STEP])
        self._write_estimates(self.est_s, self.est_f, run, self.gidx)
        self._write_arms(self.arm_counts, self.arm_sums, run, self.gidx)
