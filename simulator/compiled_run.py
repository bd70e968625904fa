"""Compiled engine path: an eligible single-server run (AR or fixed-k SD, open or closed loop) in one compiled loop.

`for_server` says whether a `Server` can take the compiled path (`ineligible_reason` names why not: a cluster
replica, PSD, a learning policy, sampled verification, vLLM V1 rules, a profile or draft cost kind the
kernel does not price, KV that could preempt, numba missing, or the path forced off). An eligible server's
`CompiledRun.run` steps the whole run in simulator/compiled_kernel.py and writes the outcome into the server's
state, records and counters, so `Server.result()` builds the same tables as the step path.

Equality: the requests and steps tables and the ITL gaps are bit for bit those of the step path (the kernel forms
every float with the step path's operations in its order; tests/simulator/test_compiled_run.py checks it over
random eligible configs). Set DRAFTSIM_ENGINE=steps (or `COMPILED = False`) to force the step path, =compiled to take
the compiled one for runs below MIN_WORK_TOKENS too.

The kernel runs in segments: it returns when its row buffers are full or when a given number of requests have
finished, and continues from its state; `CompiledRun.run(stop=...)` uses the latter to let a caller end a run
early (a callable asked after every `check_every` finishes, or at the counts `next_check()` names). While it asks,
the server's state is what the step path's is after the same step: every finish and first token up to the kernel's
clock (`now`, the end of the step just taken; the SimPy clock stands still during a compiled run) and
`n_finished`, so a step hook's snapshot (simulator/early_stop.py progress_of) reads the same on both paths.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

import numpy as np

from policies.base import FixedPolicy
from simulator.arrivals import ClosedLoopArrivals, OpenLoopArrivals
from simulator.latency import LinearProfile
from simulator.request_state import FINISHED

COMPILED = True  # module switch: False keeps every server on the step path (benchmarks compare both)
ENGINE_ENV = "DRAFTSIM_ENGINE"  # "steps" forces the step path; "compiled": the compiled one whenever eligible
# below this many output tokens a run takes the step path unless the kernel is already loaded in this process: numba's
# import and the kernel's cache load (~0.6 s + 0.5 s CPU under load) cost more than the step path's ~0.4 s for it
MIN_WORK_TOKENS = 200_000
PHASES = ("prefill", "decode", "draft", "verify", "mixed", "draft_prefill")  # compiled_kernel's phase codes
SEGMENT_ROWS = 1 << 18  # step rows per kernel call (untouched buffer pages cost nothing); more: further calls
DRAFT_KINDS = {"constant": 1, "fraction_of_verify": 2, "whole_proposal": 3, "autoregressive": 4}


def ineligible_reason(server) -> str | None:
    """Why `server` must take the step path, or None when the compiled path reproduces it exactly."""
    choice = os.environ.get(ENGINE_ENV, "")
    if not COMPILED or choice == "steps":
        return f"step path forced ({ENGINE_ENV}=steps)" if COMPILED else "compiled path switched off"
    if server.mode not in ("ar", "sd"):
        return f"mode {server.mode!r} (PSD runs two sub-batches: step path)"
    if type(server.arrivals) not in (OpenLoopArrivals, ClosedLoopArrivals):
        return "arrivals pushed at run time (a cluster replica behind a router)"
    cfg = server.scenario.server
    if cfg.scheduler != "draftsim":
        return f"scheduler {cfg.scheduler!r} (token budget shared by decodes, engine-loop gap)"
    target = server.pricing.target
    if type(target) is not LinearProfile:
        return (f"target profile kind {getattr(target, 'kind', '?')!r} ({type(target).__name__}; the kernel prices "
                "LinearProfile only)")
    coefs = (target._a, target._b, target._s, target._d, server.pricing.overhead)
    if not all(np.isfinite(c) and c >= 0 for c in coefs):
        return "a negative or non-finite target coefficient (the step path names it)"
    if any(c.kind == "engine_step" for c in server.pricing.draft_costs.values()):
        return "engine_step draft costs (vLLM V1's proposer)"
    policy = server.drafting.policy
    if type(policy) is not FixedPolicy:
        return f"policy {policy.name!r} chooses per step (learning or adaptive): step path"
    if policy.drafter is not None:
        if server.drafting.verification != "greedy":
            return "sampled verification draws per step"
        if server.pricing.switch_cost_s > 0:
            return "a drafter switching cost"
        if policy.drafter not in server.table.acc_len:
            return f"no acceptance trace for drafter {policy.drafter!r}"
        cost = server.pricing.draft_costs[policy.drafter]
        if cost.kind in ("whole_proposal", "autoregressive"):
            p = cost.profile
            if type(p) is not LinearProfile:
                return (f"draft cost profile kind {getattr(p, 'kind', '?')!r} ({type(p).__name__}; the kernel prices "
                        "LinearProfile only)")
            if not all(np.isfinite(c) and c >= 0 for c in (p._a, p._b, p._s, p._d)):
                return "a negative or non-finite draft profile coefficient (the step path names it)"
    # no preemption: the max_num_seqs largest requests at their largest KV (Scheduler.check_fits's need) fit at once
    wl, pool = server.wl, server.sched.pool
    lookahead = policy.k if policy.drafter is not None else 0
    need = np.sort(pool.blocks_for(wl.prompt_len + wl.output_len - 1 + max(1, lookahead)))[::-1]
    held = int(need[:server.max_num_seqs].sum())
    if held > pool.total_blocks:
        return (f"KV could preempt: the {min(len(need), server.max_num_seqs)} largest requests need {held} blocks, "
                f"the server has {pool.total_blocks}")
    tokens = int(wl.output_len.sum())
    if tokens < MIN_WORK_TOKENS and choice != "compiled" and not _kernel_loaded():
        return (f"a small run ({tokens:,} output tokens < {MIN_WORK_TOKENS:,}): loading the compiled kernel costs more "
                f"(set {ENGINE_ENV}=compiled to use it)")
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed"
    return None


def _kernel_loaded() -> bool:
    """The kernel was already compiled or loaded from its cache in this process."""
    ker = sys.modules.get("simulator.compiled_kernel")
    return ker is not None and bool(ker.run_steps.signatures)


def for_server(server) -> CompiledRun | None:
    """The compiled run of `server`, or None (its reason in `server.engine_path_reason`)."""
    reason = ineligible_reason(server)
    server.engine_path_reason = reason
    return None if reason is not None else CompiledRun(server)


class CompiledRun:
    """Runs one eligible server in compiled_kernel.run_steps and writes the outcome into its state."""

    def __init__(self, server):
        self.srv = server
        self.running, self.now = False, 0.0  # during run(): the kernel's clock at its last return
        wl, table, policy = server.wl, server.table, server.drafting.policy
        self.drafter = None if policy.drafter is None else table.drafters.index(policy.drafter)
        cfg = server.scenario.server
        t = server.pricing.target
        f = np.zeros(12)
        f[0:5] = t._a, t._b, t._s, t._d, server.pricing.overhead
        i = np.zeros(12, dtype=np.int64)
        i[0] = server.mode == "sd"
        i[5], i[6], i[7], i[8] = server.max_num_seqs, cfg.max_num_batched_tokens, cfg.chunked_prefill, \
            cfg.prefill == "separate"
        i[9], i[10] = server.sched.pool.block_size, server.sched.pool.total_blocks
        self.closed = isinstance(server.arrivals, ClosedLoopArrivals)
        if self.closed:
            i[11], f[11] = 1, server.arrivals.think_time
        first = server.drafting._first.astype(np.int64)
        last = server.drafting._last.astype(np.int64)
        prop = acc = np.zeros(1, dtype=np.int32)
        if self.drafter is not None:
            name, k = policy.drafter, policy.k
            cost = server.pricing.draft_costs[name]
            i[1], i[2], i[3] = 1, k, DRAFT_KINDS[cost.kind]
            i[4] = cost.kind in ("whole_proposal", "autoregressive")  # DraftCost.prefill_time: a profile prices it
            f[5], f[6] = cost.seconds, cost.fraction
            if cost.profile is not None:
                p = cost.profile
                f[7:11] = p._a, p._b, p._s, p._d
            # the replay rule (traces/acceptance.py) once over the table for this drafter and k
            from traces.acceptance import accepted_drafts, proposed_tokens

            lens, acc_len = table.proposal_len.get(name), table.acc_len[name]
            prop = np.asarray(proposed_tokens(k, lens) if lens is not None else k, dtype=np.int32)
            acc = np.asarray(accepted_drafts(acc_len, prop), dtype=np.int32)
            if prop.ndim == 0:
                prop = np.full(len(acc_len), k, dtype=np.int32)
        self.iparams, self.fparams = i, f
        self.first, self.last, self.step_prop, self.step_acc = first, last, prop, acc

    def run(self, stop: Callable[[int], bool] | None = None, check_every: int = 1,
            next_check: Callable[[], int] | None = None) -> float:
        """Step the whole run (or until `stop(n_finished)` is true, asked every `check_every` finishes, or when
        `next_check()` finishes have happened if given); returns the simulated time it ends at. While `stop` is
        asked, `self.now` is the kernel's clock and the server's state holds every finish up to it."""
        from simulator import compiled_kernel as ker

        srv = self.srv
        st, wl, n = srv.state, srv.wl, len(srv.wl)
        istate = np.zeros(12, dtype=np.int64)
        arr = srv.arrivals
        istate[ker.S_SUBMITTED] = arr._next if self.closed else n
        client_of = arr.client_of if self.closed else np.zeros(1, dtype=np.int64)
        fstate = np.array([srv.env.now], dtype=np.float64)
        run = np.zeros(srv.max_num_seqs, dtype=np.int64)
        dsteps, dprop, dacc = (np.zeros(n, dtype=np.int64) for _ in range(3))
        rows_i = np.empty((ker.ROW_INTS, SEGMENT_ROWS), dtype=np.int64)  # one line per column
        rows_f = np.empty((2, SEGMENT_ROWS))
        itl = np.empty(SEGMENT_ROWS * 16 + srv.max_num_seqs)
        prompt, out = wl.prompt_len.astype(np.int64), wl.output_len.astype(np.int64)
        arrival = st.arrival
        blocks_row, itl_parts = [], []

        def ask_at(done: int) -> int:
            return min(n, next_check() if next_check is not None else done + check_every)

        stop_at = n if stop is None else ask_at(0)
        self.running, self.now = True, float(fstate[0])
        while True:
            code = ker.run_steps(arrival, client_of, prompt, out, self.first, self.last, self.step_prop, self.step_acc,
                                 self.iparams, self.fparams, istate, fstate, run, st.gen, st.prefill_left,
                                 st.prefill_done, st.blocks, st.last_emit, st.first_sched, st.first_token,
                                 st.finish, dsteps, dprop, dacc, rows_i, rows_f, itl, stop_at)
            if code < 0:
                raise RuntimeError(f"compiled engine: {'stalled' if code == ker.ERR_STALL else 'needed a preemption'}"
                                   f" at t={fstate[0]:.6f}s (its eligibility check should have sent this run to the "
                                   f"step path; set {ENGINE_ENV}=steps)")
            r, ni = int(istate[ker.S_ROWS]), int(istate[ker.S_ITL])
            n_fin = int(istate[ker.S_FINISHED])
            self.now = float(fstate[0])  # the end of the step just taken: the state is complete up to it
            st.n_finished = n_fin
            if srv.on_step is not None and code == ker.DONE:  # told at the end; mid-run through `stop` (Server)
                srv.on_step(n_fin)
            last = code == ker.DONE or (code == ker.STOPPED and stop(n_fin))
            if last:  # the buffers are not reused: keep views
                blocks_row.append((rows_i[:, :r], rows_f[:, :r]))
                itl_parts.append(itl[:ni])
                break
            if r or code == ker.FULL:
                blocks_row.append((rows_i[:, :r].copy(), rows_f[:, :r].copy()))
                itl_parts.append(itl[:ni].copy())
                istate[ker.S_ROWS] = istate[ker.S_ITL] = 0
            if code == ker.STOPPED:
                stop_at = ask_at(n_fin)
        self.running = False
        self._write(istate, run, dsteps, dprop, dacc, blocks_row, itl_parts)
        return float(fstate[0])

    def _write(self, istate, run, dsteps, dprop, dacc, blocks_row, itl_parts) -> None:
        """The kernel's outcome into the server's state, counters, KV pool, ITL and step records."""
        from simulator import compiled_kernel as ker

        srv = self.srv
        st, outcome, pool = srv.state, srv.outcome, srv.sched.pool
        n_run, ptr, admit = int(istate[ker.S_NRUN]), int(istate[ker.S_PTR]), int(istate[ker.S_ADMIT])
        if self.closed:  # submitted, not yet pulled: the heap's entries; ids in order, as _submit numbers them
            srv.arrivals._next = int(istate[ker.S_SUBMITTED])
            srv.arrivals._heap = [(float(st.arrival[i]), i) for i in range(ptr, srv.arrivals._next)]
        else:
            srv.arrivals._ptr = ptr
        fin = ~np.isnan(st.finish)
        st.status[:ptr] = 1  # WAITING; then running and finished
        st.status[run[:n_run]] = 2
        st.status[fin] = FINISHED
        st.running = [int(i) for i in run[:n_run]]
        st.prefilling = {int(i): None for i in run[:n_run] if st.prefill_left[i] > 0}
        st.waiting.extend(range(admit, ptr))
        st.started[~np.isnan(st.first_token)] = True
        st.n_finished = int(istate[ker.S_FINISHED])
        all_idx = np.arange(len(srv.wl))
        drafted = self.drafter is not None
        st.verify_counts.add_run(all_idx, dsteps, dprop if drafted else None, dacc if drafted else None)
        if drafted:
            st.usage[self.drafter] += int(istate[ker.S_USAGE_D])
        st.usage[-1] += int(istate[ker.S_USAGE_NONE])
        pool.used, pool.peak = int(istate[ker.S_USED]), max(pool.peak, int(istate[ker.S_PEAK]))
        outcome.step_no = int(istate[ker.S_STEP])
        itl = itl_parts[0] if len(itl_parts) == 1 else np.concatenate(itl_parts)
        if len(itl):
            outcome.itl_chunks.append(itl)
        ri = blocks_row[0][0] if len(blocks_row) == 1 else np.concatenate([b[0] for b in blocks_row], axis=1)
        rf = blocks_row[0][1] if len(blocks_row) == 1 else np.concatenate([b[1] for b in blocks_row], axis=1)
        if ri.shape[1]:
            outcome.steps.append_columns(self._columns(ri, rf))

    def _columns(self, ri: np.ndarray, rf: np.ndarray) -> dict[str, np.ndarray]:
        """Step-table columns (records.STEP_COLUMNS) of the kernel's rows."""
        from simulator import compiled_kernel as ker

        S = ri.shape[1]
        name = "" if self.drafter is None else self.srv.table.drafters[self.drafter]
        phases = np.array(PHASES, dtype=object)
        names = np.array(["", name], dtype=object)
        col = ri.__getitem__  # a line of the (columns, rows) buffer: contiguous
        # strings by a gather from a few objects (np.full fills object arrays one Python object at a time)
        return {"step": col(ker.R_STEP), "device": np.array(["target"], dtype=object)[np.zeros(S, dtype=np.intp)],
                "phase": phases[col(ker.R_PHASE)], "start": rf[0], "end": rf[1], "num_seqs": col(ker.R_NS),
                "prefill_tokens": col(ker.R_PT),
                "batched_tokens": col(ker.R_BT), "kv_tokens": col(ker.R_KV), "kv_blocks_used": col(ker.R_USED),
                "proposed_tokens": col(ker.R_PROP), "accepted_tokens": col(ker.R_ACC),
                "emitted_tokens": col(ker.R_EMIT), "sub_batch": np.full(S, -1, dtype=np.int64),
                "drafters": names[col(ker.R_DRF)]}
