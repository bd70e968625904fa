"""A cluster replica on the compiled path: its SimPy process takes each step in compiled_kernel.run_steps.

A replica behind a router (simulator/cluster/simulation.py) is read at run time: the router sees its outstanding
requests and KV load, an early-stop monitor its per-request times. So the replica advances as the step path does, one
SimPy timeout per step, with the same yields in the same order (pull, idle or step, apply, step hook), and only
the planning and applying of a step are the kernel's: `loop` asks the kernel for one step (`until` = the SimPy
clock), then shows the step path's state while the step is in flight (KV after the step's plan, no finishes yet)
and, at its end, the step's first tokens, finishes, freed KV and the closed-loop submissions (`on_finish`, in the
step path's order). The kernel works on the replica's own requests, numbered in routing order (routing order is
arrival order, so the kernel's FIFO pointers hold); `settle` writes them back into the server's state and tables,
as `CompiledRun._write` does for a single server.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.engine import compiled_run
from simulator.engine.compiled_run import CompiledRun
from simulator.engine.request_state import FINISHED, RUNNING, WAITING


def exact_delay(now: float, end: float) -> float:
    """A delay `d` with `now + d == end` in floating point (SimPy schedules a timeout at `now + d`), so a replica's
    step ends at the kernel's clock bit for bit."""
    d = end - now
    while now + d < end:
        d = math.nextafter(d, math.inf)
    while now + d > end:
        d = math.nextafter(d, -math.inf)
    if now + d != end:  # rounding to nearest cannot step over `end` (its neighbours are at most one ulp(d) apart)
        raise ArithmeticError(f"no SimPy delay from t={now!r} lands on t={end!r}")
    return d


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
        """The replica's SimPy process (Server.loop's steps, each planned and applied by the kernel)."""
        srv, ker = self.srv, self.ker
        env, st, pool = srv.env, srv.state, srv.sched.pool
        n = len(srv.wl)
        while st.n_finished < n:
            self._take(srv.arrivals.pull(env.now))
            if self._idle():
                yield srv._idle()
                continue
            before = self.run_[:int(self.istate[ker.S_NRUN])].copy()
            admit0 = int(self.istate[ker.S_ADMIT])
            self._step(float(env.now))
            end = float(self.fstate[0])
            # in flight: KV after the step's plan (admissions, growth), no finish yet
            pool.used = int(self.rows_i[ker.R_USED, int(self.istate[ker.S_ROWS]) - 1])
            yield env.timeout(exact_delay(env.now, end))
            self._apply(np.concatenate([before, np.arange(admit0, int(self.istate[ker.S_ADMIT]))]), end)
            if srv.on_step is not None:
                srv.on_step(st.n_finished)

    def _step(self, now: float) -> None:
        """One kernel step from `now` (the kernel checks `until` before its buffers, so a full buffer is reported
        before the step, never after it: the buffers are emptied into the server's tables and the step taken)."""
        ker = self.ker
        if self.rows_i is None:
            rows = compiled_run.SEGMENT_ROWS
            self.rows_i = np.empty((ker.ROW_INTS, rows), dtype=np.int64)
            self.rows_f = np.empty((2, rows))
            self.itl = np.empty(rows * 16 + self.srv.max_num_seqs)
        while True:
            self.fstate[0] = now
            code = ker.run_steps(
                self.arrival, self.client_of, self.prompt, self.out, self.first, self.last, self.tab, self.rowof,
                self.cap, self.target, self.drafts, self.dprofiles, self.pf_order, self.est_s,
                self.est_f, self.arm_counts, self.arm_sums, self.arm_slot, self.usage, self.iparams, self.fparams,
                self.istate, self.fstate, self.run_, self.gen, self.prefill_left, self.prefill_done, self.blocks,
                self.last_emit, self.first_sched, self.first_token, self.finish, self.dsteps, self.dprop, self.dacc,
                self.rows_i, self.rows_f, self.itl, len(self.arrival), now)
            if code == ker.FULL:
                self._flush()
                continue
            if code < 0:
                raise RuntimeError(f"compiled engine (cluster replica {getattr(self.srv.arrivals, 'replica', '?')}):"
                                   f" {'stalled' if code == ker.ERR_STALL else 'needed a preemption'} at "
                                   f"t={now:.6f}s (its eligibility check should have sent this run to the step path:"
                                   " a bug, please report it with the config)")
            return

    def _apply(self, touched: np.ndarray, end: float) -> None:
        """The step ended: its first tokens, finishes and freed KV show; each finish goes to the arrival source in
        StepOutcome's order (decoding requests in admission order, then those a prefill finished)."""
        srv, ker = self.srv, self.ker
        st = srv.state
        g = self.gidx[touched]
        st.first_token[g] = self.first_token[touched]
        st.finish[g] = self.finish[touched]
        st.n_finished = int(self.istate[ker.S_FINISHED])
        srv.sched.pool.used = int(self.istate[ker.S_USED])
        done = touched[~np.isnan(self.finish[touched])]
        if len(done):
            for k in np.concatenate([done[self.out[done] > 1], done[self.out[done] <= 1]]):
                srv.arrivals.on_finish(int(self.gidx[k]), end)

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
