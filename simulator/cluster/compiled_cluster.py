"""A cluster on the compiled path: the replicas and the router advance inside one compiled loop
(simulator/cluster/compiled_cluster_kernel.py run_cluster), returning to Python only when a replica's row buffers are
full, at the early-stop hook's checks, and at the end.

`cluster_ineligible_reason` says why a cluster keeps the per-replica path (each replica's SimPy process calling the
kernel up to the next routing, simulator/engine/compiled_replica.py): a replica on the step path, a step hook that
does not name its next check, replicas whose step prices, drafters or acceptance tables differ (the loop shares
them). An eligible cluster's replicas keep their `CompiledReplica` (its arrays become rows of the loop's stacked
arrays, so its `settle` writes the outcome into the server as before); one SimPy process drives the loop and moves
the clock to each hook's instant, so `progress_of` and `run_until_decided` read it as before.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.cluster.router import ROUTER_CODES
from simulator.engine import compiled_run
from simulator.engine.compiled_replica import exact_delays

ENABLED = True  # module switch: False keeps every cluster on the per-replica path (tests compare both)
BIG_BUFFER = 4096  # rows per replica's buffer when SEGMENT_ROWS is larger and replicas are many (memory)


def cluster_ineligible_reason(cluster, on_step) -> str | None:
    """Why `cluster` (a ClusterSimulation being built) keeps the per-replica path, or None."""
    if not ENABLED:
        return "compiled cluster loop switched off (compiled_cluster.ENABLED)"
    for j, rep in enumerate(cluster.replicas):
        c = rep.server.compiled
        if c is None or not c.stepwise:
            return f"replica {j} takes the step path ({rep.server.engine_path_reason})"
    if on_step is not None and not hasattr(on_step, "next_check"):
        return "a step hook without next_check (told after every step): per-replica path"
    c0 = cluster.replicas[0].server.compiled
    for j, rep in enumerate(cluster.replicas[1:], 1):
        c = rep.server.compiled
        shared = ("rowof", "cap", "pf_order", "arm_slot", "first_all", "last_all", "target", "drafts", "dprofiles",
                  "slots")
        for name in (("tab",) if c0.slots else ()) + shared:  # an AR run's tab is never read (left unfilled)
            if not _same(getattr(c0, name), getattr(c, name)):
                return f"replica {j}'s {name} differs from replica 0's (the loop shares them): per-replica path"
        if c.est_s.shape != c0.est_s.shape or c.arm_counts.shape != c0.arm_counts.shape:
            return f"replica {j}'s policy state differs in shape from replica 0's: per-replica path"
    return None


def _same(a, b) -> bool:
    """Equal values: arrays element for element (and dtype), tuples and records item for item."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and bool(np.array_equal(a, b)))
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b)))
    return a == b


def _stack(arrays: list[np.ndarray], fill) -> np.ndarray:
    """One array with the given ones as rows along a new first axis (padded with `fill` to the largest shape)."""
    shape = tuple(max(a.shape[d] for a in arrays) for d in range(arrays[0].ndim))
    out = np.full((len(arrays),) + shape, fill, dtype=arrays[0].dtype)
    for j, a in enumerate(arrays):
        out[(j,) + tuple(slice(0, s) for s in a.shape)] = a
    return out


# the per-replica arrays of CompiledReplica the loop stacks (name, padding)
STACKED = (("gidx", 0), ("arrival", np.nan), ("prompt", 0), ("out", 0), ("first", 0), ("last", 0), ("est_s", 0.0),
           ("est_f", 0.0), ("arm_counts", 0.0), ("arm_sums", 0.0), ("usage", 0), ("iparams", 0), ("fparams", 0.0),
           ("istate", 0), ("fstate", 0.0), ("run_", 0), ("gen", 0), ("prefill_left", 0), ("prefill_done", 0),
           ("blocks", 0), ("last_emit", np.nan), ("first_sched", np.nan), ("first_token", np.nan),
           ("finish", np.nan), ("dsteps", 0), ("dprop", 0), ("dacc", 0))


class CompiledCluster:
    """The loop's arrays for one cluster and the SimPy process that drives it (`drive`)."""

    def __init__(self, cluster, on_step):
        import simulator.cluster.compiled_cluster_kernel as cker
        import simulator.engine.compiled_kernel as ker

        self.cluster, self.on_step, self.cker, self.ker = cluster, on_step, cker, ker
        reps = cluster.replicas
        N, n = len(reps), len(cluster.wl)
        self.comp = comp = [r.server.compiled for r in reps]
        for c in comp:
            c.driven = True  # its own SimPy process returns at once (CompiledReplica.loop)
        self.arr = {}
        for name, fill in STACKED:
            big = _stack([getattr(c, name) for c in comp], fill)
            self.arr[name] = big
            for j, c in enumerate(comp):
                setattr(c, name, big[(j,) + tuple(slice(0, s) for s in getattr(c, name).shape)])
        rows = compiled_run.SEGMENT_ROWS
        if rows > BIG_BUFFER:
            rows = max(BIG_BUFFER, rows // N)
        max_seqs = max(r.server.max_num_seqs for r in reps)
        self.rows_i = np.empty((N, ker.ROW_INTS, rows), dtype=np.int64)
        self.rows_f = np.empty((N, 2, rows))
        self.itl = np.empty((N, rows * 16 + max_seqs))
        for j, c in enumerate(comp):
            c.rows_i, c.rows_f, c.itl = self.rows_i[j], self.rows_f[j], self.itl[j]
        c0 = comp[0]
        self.c_arrival = cluster.arrival  # float64; a closed loop's source fills it (in place)
        self.pblocks = np.stack([r._prompt_blocks.astype(np.int64) for r in reps])
        router, source = cluster.router, cluster.source
        self.router_code = ROUTER_CODES[cluster.spec.name]
        closed = cluster.closed_loop
        if source.arrival is not cluster.arrival:
            raise ValueError("compiled cluster: the arrival source must fill the cluster's arrival array")
        self.c_client = source.client_of if closed else np.zeros(n, dtype=np.int64)  # written in place
        self.key_id, self.key_client = np.zeros(n, dtype=np.int64), 0
        self.homes = np.full(1, -1, dtype=np.int64)
        self.limit = np.zeros(N, dtype=np.int64)
        if cluster.spec.name == "affinity":
            if router.key == "client":  # known as each request is submitted (the loop writes the later ones)
                self.key_id[:] = np.maximum(self.c_client, 0)
                self.key_client, n_keys = 1, max(cluster.wl.closed_loop_clients, 1)
            else:
                self.key_id, n_keys = self._affinity_keys(router.key)
            self.homes = np.full(max(n_keys, 1), -1, dtype=np.int64)
            self.limit = router.limits(reps)
        self.assigned = cluster.assigned  # written in place
        self.routed = np.zeros(N, dtype=np.int64)
        self.cum = np.zeros((N, n + 1), dtype=np.int64)  # prompt blocks of a replica's first k routed requests
        self.ev_time = np.full(N + 2, math.inf)  # N: the router's timeout / condition; N + 1: its wake
        self.ev_prio = np.full(N + 2, cker.URGENT, dtype=np.int64)
        self.ev_eid = np.arange(N + 2, dtype=np.int64)  # the processes' starts, in the order they were made
        self.ev_kind = np.full(N + 2, cker.K_TOP, dtype=np.int64)
        self.ev_kind[N], self.ev_kind[N + 1] = cker.K_R_BODY, cker.K_NONE
        self.ev_time[:N + 1] = float(cluster.env.now)
        self.push_wait = np.zeros(N, dtype=np.int64)
        self.cst = np.zeros(cker.N_CST, dtype=np.int64)
        self.cst[cker.C_EID] = N + 1
        self.cst[cker.C_RESUME_REP] = -1
        self.cst[cker.C_NEXT] = source.submitted if closed else n
        self.cst[cker.C_CLOSED] = closed
        self.cst[cker.C_RMODE] = cker.R_RUNNING
        self.cft = np.zeros(2)
        self.cft[cker.CF_THINK] = source.think_time if closed else 0.0
        self.inflight = np.zeros((N, 3), dtype=np.int64)
        self.fin_list = np.zeros((N, max_seqs), dtype=np.int64)  # a step's finishes in StepOutcome's order
        self.shared = (c0.client_of, c0.tab, c0.rowof, c0.cap, c0.target, c0.drafts, c0.dprofiles, c0.pf_order,
                       c0.arm_slot)
        self.prompt_all, self.out_all = c0.prompt_all, c0.out_all
        self.first_all, self.last_all = c0.first_all, c0.last_all
        self.calls = 0  # run_cluster calls from Python (a count the tests and docs/speed.md read)

    def _affinity_keys(self, key: str) -> tuple[np.ndarray, int]:
        """Each request's affinity key as a number (first-seen order) and how many keys (router.Affinity's keys)."""
        cl = self.cluster
        wl = cl.wl
        if key == "category":
            values = list(wl.categories)
        elif key == "trace":
            values = [cl.table.trace_ids[int(t)] for t in wl.trace_index]
        else:
            raise ValueError(f"affinity key {key!r}: not a per-request attribute")
        ids: dict = {}
        out = np.array([ids.setdefault(v, len(ids)) for v in values], dtype=np.int64)
        return out, len(ids)

    def _call(self, next_check: int) -> int:
        a = self.arr
        code = self.cker.run_cluster(
            self.c_arrival, self.c_client, self.prompt_all, self.out_all, self.first_all, self.last_all, self.pblocks,
            self.key_id, self.key_client, self.homes, self.limit, self.router_code, self.assigned, self.routed,
            self.ev_time, self.ev_prio, self.ev_eid, self.ev_kind, self.push_wait, self.cst, self.cft, self.inflight,
            self.fin_list, next_check, *self.shared,
            a["gidx"], self.cum, a["arrival"], a["prompt"], a["out"], a["first"], a["last"], a["est_s"], a["est_f"],
            a["arm_counts"], a["arm_sums"], a["usage"], a["iparams"], a["fparams"], a["istate"], a["fstate"],
            a["run_"], a["gen"], a["prefill_left"], a["prefill_done"], a["blocks"], a["last_emit"], a["first_sched"],
            a["first_token"], a["finish"], a["dsteps"], a["dprop"], a["dacc"], self.rows_i, self.rows_f, self.itl)
        self.calls += 1
        return int(code)

    def drive(self):
        """The cluster's SimPy process: the loop until the end (or the hook stops the run)."""
        cker, cl = self.cker, self.cluster
        env = cl.env
        hook = self.on_step
        total = len(cl.wl)
        while True:
            check = -1 if hook is None else min(int(hook.next_check), total)
            code = self._call(check)
            if code == cker.FULL:
                self.comp[int(self.cst[cker.C_FULL_REP])]._flush()
                continue
            if code == cker.HOOK:
                for d in exact_delays(float(env.now), float(self.cft[cker.CF_NOW])):
                    yield env.timeout(d)
                self._show()
                if hook(cl.n_finished):
                    return
                continue
            if code != cker.DONE:
                j = int(self.cst[cker.C_FULL_REP])
                what = {cker.STALLED: "stalled", self.ker.ERR_STALL: "stalled",
                        self.ker.ERR_PREEMPT: "needed a preemption"}.get(code, f"returned {code}")
                at = float(self.cft[cker.CF_NOW])
                raise RuntimeError(f"compiled cluster loop (replica {j}): {what} near t={at:.6f}s (its eligibility "
                                   "check should have sent this run to the per-replica path: a bug, please report it "
                                   "with the config)")
            self._show()
            end = float(self.arr["fstate"][:, 0].max())  # the last step's end (SimPy's clock at the end)
            if end > env.now:
                for d in exact_delays(float(env.now), end):
                    yield env.timeout(d)
            return

    def _show(self) -> None:
        """What the step path shows now into the cluster and the replicas' servers: routing (assigned, routed
        counts, arrival times, the router's state), and each replica's first tokens, finishes and finished count,
        without those of a step still in flight."""
        cl, cker, ker = self.cluster, self.cker, self.ker
        cl.n_routed = int(self.cst[cker.C_ROUTED])
        if cl.closed_loop:
            cl.source.resume(int(self.cst[cker.C_NEXT]), int(self.cst[cker.C_SRC]))
        else:
            cl.source.resume(int(self.cst[cker.C_SRC]))
        router = cl.router
        if cl.spec.name == "round_robin":
            router._next = cl.n_routed
        elif cl.spec.name == "affinity":
            router.overflows = int(self.cst[cker.C_OVERFLOWS])
        for j, (rep, c) in enumerate(zip(cl.replicas, self.comp)):
            rep.routed = int(self.routed[j])
            st = rep.server.state
            k = int(c.istate[ker.S_SUBMITTED])
            g = c.gidx[:k]
            st.arrival[g] = c.arrival[:k]
            ft, fin = c.first_token[:k].copy(), c.finish[:k].copy()
            n_fin = int(c.istate[ker.S_FINISHED])
            if self.inflight[j, cker.IF_ON]:
                end = float(c.fstate[ker.FS_NOW])
                ft[ft >= end] = np.nan
                fin[fin >= end] = np.nan
                n_fin -= int(self.inflight[j, cker.IF_FIN])
            st.first_token[g], st.finish[g] = ft, fin
            st.n_finished = n_fin
