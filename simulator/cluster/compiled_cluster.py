"""A cluster in one kernel call: the replicas and the router advance inside one compiled loop
(simulator/cluster/compiled_cluster_kernel.py run_cluster), returning to Python only when a replica's row buffers are
full, at the early-stop hook's checks, and at the end.

`cluster_ineligible_reason` says why a cluster keeps the per-replica path (each replica's SimPy process calling the
kernel up to the next routing, simulator/engine/compiled_replica.py): a step hook that does not name its next
check, replicas whose step prices, drafters or acceptance tables differ (the loop shares
them). An eligible cluster's replicas keep their `CompiledReplica` (its kernel records become views of rows of the
loop's stacked records, so its `settle` writes the outcome into the server as before); one SimPy process drives the loop and moves
the clock to each hook's instant, so `progress_of` and `run_until_decided` read it as before.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.cluster.router import ROUTER_CODES
from simulator.engine import compiled_run
from simulator.engine.compiled_replica import exact_delays
from simulator.engine.kernel_records import (PSD_STATE, RUN_STATE, PSDCarry, PSDSettings, StepBuffers, StepRows,
                                             Workload, new_state, psd_scratch, scratch_buffers, step_buffers, typed)

ENABLED = True  # module switch: False keeps every cluster on the per-replica path (tests compare both)
BIG_BUFFER = 4096  # rows per replica's buffer when SEGMENT_ROWS is larger and replicas are many (memory)


def cluster_ineligible_reason(cluster, on_step) -> str | None:
    """Why `cluster` (a ClusterSimulation being built) keeps the per-replica path, or None."""
    if not ENABLED:
        return "compiled cluster loop switched off (compiled_cluster.ENABLED)"
    import simulator.engine.compiled_kernel as ker

    if any(rep.server.compiled.policy_kind == ker.POL_GIVEN for rep in cluster.replicas):
        return "a policy asked in Python (each replica's own, at each of its steps): per-replica path"
    if on_step is not None and not hasattr(on_step, "next_check"):
        return "a step hook without next_check (told after every step): per-replica path"
    if any(rep.server.compiled.settings.sampled for rep in cluster.replicas):
        return "sampled verification (each replica draws from its own generator): per-replica path"
    if any(_draws(rep.server.compiled.settings) for rep in cluster.replicas):
        return "a bandit that draws from its generator (each replica's policy has its own): per-replica path"
    c0 = cluster.replicas[0].server.compiled
    for j, rep in enumerate(cluster.replicas[1:], 1):
        c = rep.server.compiled
        shared = (("rowof", c.replay.rowof, c0.replay.rowof), ("cap", c.replay.cap, c0.replay.cap),
                  ("choice_slot", c.replay.choice_slot, c0.replay.choice_slot),
                  ("choice_k", c.replay.choice_k, c0.replay.choice_k), ("tv", c.replay.tv, c0.replay.tv),
                  ("tree", [getattr(c.replay, f) for f in TREE], [getattr(c0.replay, f) for f in TREE]),
                  ("batch_k", c.replay.batch_k, c0.replay.batch_k), ("slot_k", c.replay.slot_k, c0.replay.slot_k),
                  ("costs", c.costs, c0.costs),
                  ("arm_slot", c.pol.arm_slot, c0.pol.arm_slot), ("first_all", c.first_all, c0.first_all),
                  ("last_all", c.last_all, c0.last_all), ("slots", c.slots, c0.slots))
        if c0.psd:
            shared += (("psd settings", c.psd_cfg, c0.psd_cfg),)
        if c0.slots:  # an AR run's tab is never read (left unfilled)
            shared = (("tab", c.replay.tab, c0.replay.tab),) + shared
        for name, mine, first in shared:
            if not _same(first, mine):
                return f"replica {j}'s {name} differs from replica 0's (the loop shares them): per-replica path"
        if any(np.shape(mine) != np.shape(first) for name, mine, first in zip(c.pol._fields, c.pol, c0.pol)
               if isinstance(mine, np.ndarray) and name not in PLAN_ROWS):
            return f"replica {j}'s policy state differs in shape from replica 0's: per-replica path"
    return None


def _draws(settings) -> bool:
    """Whether a replica's policy is a bandit whose choices draw from its own generator
    (compiled_kernel.bandit_draws)."""
    import simulator.engine.compiled_kernel as ker

    return settings.policy == ker.POL_BANDIT and bool(ker.bandit_draws(settings.bandit))


# min-time's plan rows follow each replica's max_num_seqs: stacked, a replica's padded rows are never in its free list
PLAN_ROWS = ("plan_free", "plan_d", "plan_k", "plan_value")
TREE = ("tree_parent", "tree_rank", "tree_ranks", "tree_passes")  # a static draft tree's records (Replay)


def _same(a, b) -> bool:
    """Equal values: arrays element for element (and dtype; NaN equal to NaN, as a table profile's degenerate
    simplices hold), tuples and records item for item."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))
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


# the replicas' kernel records the loop stacks (the CompiledReplica attribute holding it, the fields the replicas
# share instead (equal in every replica: the first one's is passed)
STACKED = (("work", ("client_of",)), ("req", ()), ("pol", ("arm_slot",)))


def _stacked_record(records: list, shared: tuple[str, ...]):
    """One record of the same type whose fields are the given ones' stacked along a new first axis (floats padded
    with NaN, integers with 0), but the `shared` fields, taken from the first."""
    fields = []
    for name in records[0]._fields:
        arrays = [getattr(r, name) for r in records]
        fields.append(arrays[0] if name in shared else _stack(arrays, np.nan if arrays[0].dtype.kind == "f" else 0))
    return type(records[0])._make(fields)


def _row_of(stacked, j: int, shared: tuple[str, ...], like):
    """Replica j's record: views of its rows of `stacked`, each cut to the shape of the field in `like`."""
    return type(like)._make(getattr(stacked, f) if f in shared else
                            getattr(stacked, f)[(j,) + tuple(slice(0, s) for s in getattr(like, f).shape)]
                            for f in like._fields)


class CompiledCluster:
    """The loop's records for one cluster and the SimPy process that drives it (`drive`)."""

    def __init__(self, cluster, on_step):
        import simulator.cluster.compiled_cluster_kernel as cker
        import simulator.engine.compiled_kernel as ker

        self.cluster, self.on_step, self.cker, self.ker = cluster, on_step, cker, ker
        reps = cluster.replicas
        N, n = len(reps), len(cluster.wl)
        self.comp = comp = [r.server.compiled for r in reps]
        for c in comp:
            c.driven = True  # its own SimPy process returns at once (CompiledReplica.loop)
        self.stacked = {}
        for attr, shared in STACKED:  # each replica's records become views of the loop's stacked ones
            own = [getattr(c, attr) for c in comp]
            big = self.stacked[attr] = _stacked_record(own, shared)
            for j, c in enumerate(comp):
                setattr(c, attr, _row_of(big, j, shared, own[j]))
        self.psd = self._psd_records(comp)
        self.state = np.zeros(N, dtype=RUN_STATE).view(np.recarray)
        self.settings = np.concatenate([c.kernel_settings for c in comp]).view(np.recarray)  # max_num_seqs may differ
        gidx, cum = _stack([c.gidx for c in comp], 0), _stack([c.cum for c in comp], 0)
        for j, c in enumerate(comp):
            self.state[j] = c.state[0]
            c.state, c.kernel_settings = self.state[j:j + 1], self.settings[j:j + 1]
            c.rs = c.state[0]
            c.gidx, c.cum = gidx[j, :len(c.gidx)], cum[j, :len(c.cum)]
        rows = compiled_run.segment_rows()
        if rows > BIG_BUFFER:
            rows = max(BIG_BUFFER, rows // N)
        max_seqs = max(r.server.max_num_seqs for r in reps)
        self.bufs = step_buffers(rows, rows * 16 + max_seqs, replicas=N)
        for j, c in enumerate(comp):
            c.bufs = StepBuffers(StepRows._make(col[j] for col in self.bufs.rows), self.bufs.itl[j])
        self.scratch = scratch_buffers(max_seqs, max(c.settings.k_max for c in comp), max(len(c.slots) for c in comp))
        c0 = comp[0]
        source, closed = cluster.source, cluster.closed_loop
        if source.arrival is not cluster.arrival:
            raise ValueError("compiled cluster: the arrival source must fill the cluster's arrival array")
        client = source.client_of if closed else np.zeros(n, dtype=np.int64)  # written in place
        limit = cluster.router.limits(reps) if cluster.spec.name == "affinity" else np.zeros(N, dtype=np.int64)
        # the cluster's requests in its numbering (a closed loop's source fills arrival and client in place)
        requests = Workload(cluster.arrival, client, c0.prompt_all, c0.out_all, c0.first_all, c0.last_all)
        self.routing = cker.Routing(requests, np.stack([c.prompt_blocks for c in comp]), cluster.router.key_id, limit)
        self.cset = typed(cker.ClusterSettings, router=ROUTER_CODES[cluster.spec.name], closed=closed,
                          think=source.think_time if closed else 0.0, psd=c0.psd)
        # the processes' starts (the replicas', then the router's), in the order they were made; N + 1: the wake
        self.ev = cker.Processes(np.full(N + 2, math.inf), np.full(N + 2, cker.URGENT, dtype=np.int64),
                                 np.arange(N + 2, dtype=np.int64), np.full(N + 2, cker.K_TOP, dtype=np.int64))
        self.ev.kind[N], self.ev.kind[N + 1] = cker.K_R_BODY, cker.K_NONE
        self.ev.time[:N + 1] = float(cluster.env.now)
        self.cstate = new_state(cker.CLUSTER_STATE, eid=N + 1, resume_rep=-1, full_rep=-1,
                                next=source.submitted, rmode=cker.R_RUNNING)
        self.cs = self.cstate[0]

        def z():
            return np.zeros(N, dtype=np.int64)

        self.views = cker.ReplicaViews(z(), np.full(N, np.nan), gidx, cum, z(), z(), z(),
                                       np.zeros((N, max_seqs), dtype=np.int64))
        self.calls = 0  # run_cluster calls from Python (a count the tests and docs/speed.md read)

    def _psd_records(self, comp):
        """The loop's PSDRecords: PSD replicas' PSD_STATE records and PSDCarry stacked (each replica's own become
        views of its rows), or placeholders of the same types."""
        import simulator.cluster.compiled_cluster_kernel as cker

        if not comp[0].psd:
            return cker.PSDRecords(typed(PSDSettings, split_min=0, defer_kv=False, sync_s=0.0), new_state(PSD_STATE),
                                   PSDCarry(*(np.zeros((1, 1), dtype=np.int64) for _ in PSDCarry._fields)),
                                   psd_scratch(1))
        carry = self.stacked["carry"] = _stacked_record([c.carry for c in comp], ())
        state = np.concatenate([c.psd_state for c in comp]).view(np.recarray)
        for j, c in enumerate(comp):
            c.carry, c.psd_state = _row_of(carry, j, (), c.carry), state[j:j + 1]
        return cker.PSDRecords(comp[0].psd_cfg, state, carry, psd_scratch(max(c.srv.max_num_seqs for c in comp),
                                                                        int(comp[0].psd_scratch.fixed_slot[0])))

    def _call(self, next_check: int) -> int:
        c0, big = self.comp[0], self.stacked
        code = self.cker.run_cluster(self.routing, self.cluster.routing, self.cset, self.cstate, self.ev, self.views,
                                     next_check, c0.replay, c0.costs, self.settings, big["work"], self.state,
                                     big["req"], big["pol"], self.bufs, self.scratch, self.psd)
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
                self.comp[int(self.cs.full_rep)]._flush()
                continue
            if code == cker.HOOK:
                for d in exact_delays(float(env.now), float(self.cs.now)):
                    yield env.timeout(d)
                self._show()
                if hook(cl.n_finished):
                    return
                continue
            if code == self.ker.ERR_PLAN_COSTS:
                rep = self.comp[int(self.cs.full_rep)]
                raise rep.plan_costs_error(self.scratch, rep.pol)
            if code != cker.DONE:
                j = int(self.cs.full_rep)
                what = {cker.STALLED: "stalled", self.ker.ERR_STALL: "stalled"}.get(code, f"returned {code}")
                at = float(self.cs.now)
                raise RuntimeError(f"compiled cluster loop (replica {j}): {what} near t={at:.6f}s (its eligibility "
                                   "check should have sent this run to the per-replica path: a bug, please report it "
                                   "with the config)")
            self._show()
            end = float(self.state.now.max())  # the last step's end (SimPy's clock at the end)
            if end > env.now:
                for d in exact_delays(float(env.now), end):
                    yield env.timeout(d)
            return

    def _show(self) -> None:
        """What the replicas show now into the cluster and the replicas' servers: the arrival source's place, arrival
        times (the router's state is the cluster's own, written in place), and each replica's first tokens, finishes
        and finished count, without those of a step still in flight."""
        cl, cs = self.cluster, self.cs
        cl.source.resume(int(cs.src), int(cs.next))
        for j, (rep, c) in enumerate(zip(cl.replicas, self.comp)):
            st = rep.server.state
            k = int(c.rs.submitted)
            g = c.gidx[:k]
            st.arrival[g] = c.work.arrival[:k]
            ft, fin = c.req.first_token[:k].copy(), c.req.finish[:k].copy()
            n_fin = int(c.rs.finished)
            if self.views.flight_on[j]:
                end = float(c.rs.now)
                ft[ft >= end] = np.nan
                fin[fin >= end] = np.nan
                n_fin -= int(self.views.flight_fin[j])
            st.first_token[g], st.finish[g] = ft, fin
            st.n_finished = n_fin
