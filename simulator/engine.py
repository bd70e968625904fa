"""SimPy engine: one server with continuous batching, paged KV and AR / SD / two-batch PSD steps.

The scheduler loop is one SimPy process. Each iteration plans a step from the running batch
(admission, KV reservation, preemption by recompute, the policy's drafter and k per request),
prices it with the latency profiles for the batch it actually has, advances simulated time by the
step, and applies the outcome (tokens from the acceptance trace, finishes, policy feedback).
Arrivals are pulled from a time-ordered source (a closed loop adds the next request of a client
when its previous one finishes), so there are SimPy events per step, not per request.
Per-request state lives in numpy arrays and each step works on index arrays of its batch.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import simpy

from policies.base import NO_DRAFT, BatchFeedback, BatchView, FixedPolicy, Policy
from simulator.acceptance_table import AcceptanceTable
from simulator.draft_cost import DraftCost
from simulator.kv_pool import BlockPool
from simulator.latency import LatencyProfile
from simulator.records import REQUEST_COLUMNS, STEP_COLUMNS, ColumnBuffer
from simulator.server_config import PSDConfig, RunSpec
from simulator.workload_arrays import EngineWorkload

NOT_ARRIVED, WAITING, RUNNING, FINISHED = 0, 1, 2, 3
KV_MARGIN_TOKENS = 16  # room for one step's speculative slots beyond prompt + output


@dataclass
class SimResult:
    """Everything one simulated server produced."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    itl: np.ndarray  # gap between consecutive emissions of a request, one per decode step it took part in
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Step:
    """A planned step: who does what, and how long each device is busy."""

    dec: np.ndarray  # requests the target verifies/decodes this step
    d_idx: np.ndarray  # drafter per request in dec (NO_DRAFT = none)
    k: np.ndarray
    proposed: np.ndarray
    accepted: np.ndarray
    pre: np.ndarray  # requests prefilled this step
    chunk: np.ndarray  # prefill tokens each processes
    duration: float
    target_slices: list[tuple[str, float, float, dict]]
    drafter_slices: list[tuple[str, float, float, dict]]
    drafted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # PSD: draft-only side
    drafted_d: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    drafted_k: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    drafted_prop: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class ServerSimulation:
    """One simulated server running one mode and policy over a workload."""

    def __init__(
        self,
        *,
        run: RunSpec,
        target: LatencyProfile,
        workload: EngineWorkload,
        table: AcceptanceTable,
        draft_costs: Mapping[str, DraftCost],
        policy: Policy | None,
        kv_capacity_tokens: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        block_size: int = 16,
        step_overhead_s: float = 0.0,
        chunked_prefill: bool = False,
        temperature: float = 0.0,
        seed: int = 0,
        traces: Sequence[Any] | None = None,
        live: bool = False,
        on_step: Callable[[int], None] | None = None,
    ):
        self.run = run
        self.mode = run.mode
        self.target = target
        self.wl = workload
        self.table = table
        self.draft_costs = dict(draft_costs)
        self.policy = policy if policy is not None else FixedPolicy(None, 0)
        if self.mode == "ar":
            self.policy = FixedPolicy(None, 0)
        self.psd = run.psd or PSDConfig()
        m = self.psd.sub_batch_max_num_seqs or max_num_seqs
        self.max_num_seqs = 2 * m if self.mode == "psd" else max_num_seqs
        self.budget = max_num_batched_tokens
        self.overhead = step_overhead_s
        self.chunked = chunked_prefill
        self.temperature = temperature
        self.rng = np.random.default_rng(seed)
        self.on_step = on_step
        self.pool = BlockPool(kv_capacity_tokens // block_size, block_size)
        self.drafters = table.drafters
        self._learns = self.policy.learns
        if self.policy.reads_ground_truth:
            if live:
                raise ValueError(f"policy {self.policy.name!r} reads the ground truth (an oracle) and cannot run live")
            if traces is None:
                raise ValueError(f"policy {self.policy.name!r} is an oracle and needs the ground-truth traces")
            # the oracle sees each request's own trace, keyed by the id it is served under
            self.policy.bind_ground_truth({rid: traces[t] for rid, t in zip(workload.request_ids, workload.trace_index)})
        if self.policy.needs_tv:
            wanted = getattr(self.policy, "drafters", self.drafters)
            missing = [d for d in wanted if d not in table.tv]
            if missing:
                raise ValueError(f"policy {self.policy.name!r} uses the block-divergence reward, which needs per-position "
                                 f"tv, but the traces have none for {missing}; use reward: be (block efficiency)")
        if temperature > 0:
            self._sampler = _sampled_acceptance()
        self._validate_fits()

        n = len(workload)
        self.status = np.full(n, NOT_ARRIVED, dtype=np.int8)
        self.arrival = workload.arrival.astype(np.float64).copy()
        self.gen = np.zeros(n, dtype=np.int64)
        self.prefill_left = np.zeros(n, dtype=np.int64)
        self.prefill_done = np.zeros(n, dtype=np.int64)  # prefill tokens already in KV for this admission
        self.blocks = np.zeros(n, dtype=np.int64)
        self.flag = np.full(n, -1, dtype=np.int64)  # PSD sub-batch
        self.pending_d = np.full(n, NO_DRAFT, dtype=np.int64)  # PSD: proposal drafted last step
        self.pending_k = np.zeros(n, dtype=np.int64)
        self.pending_prop = np.zeros(n, dtype=np.int64)
        self.last_drafter = np.full(n, NO_DRAFT, dtype=np.int64)
        self.last_emit = np.full(n, np.nan)
        self.first_sched = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.decode_steps = np.zeros(n, dtype=np.int64)
        self.n_proposed = np.zeros(n, dtype=np.int64)
        self.n_accepted = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.started = np.zeros(n, dtype=bool)
        self.usage = np.zeros(len(self.drafters) + 1, dtype=np.int64)  # last slot: no drafter
        self.running: list[int] = []
        self.prefilling: dict[int, None] = {}  # running requests with prompt tokens left, in admission order
        self.waiting: deque[int] = deque()
        self.n_finished = 0
        self.step_no = 0
        self.itl_chunks: list[np.ndarray] = []
        self.steps = ColumnBuffer(STEP_COLUMNS)
        self.verify_side = 0
        self.psd_fallback_steps = 0
        self._group_cache: tuple = (None, [])

        # arrivals: a time-ordered source (open loop: all known; closed loop: heap fed on finishes)
        self._heap: list[tuple[float, int]] = []
        self._next_submit = 0
        if workload.closed_loop_clients > 0:
            self.arrival[:] = np.nan
            self.client_of = np.full(n, -1, dtype=np.int64)
            for c in range(min(workload.closed_loop_clients, n)):
                self._submit(0.0, c)
        else:
            self._open_ptr = 0

        self.env = simpy.Environment()
        self.env.process(self._scheduler())

    # ------------------------------------------------------------------ setup checks

    def _validate_fits(self) -> None:
        need = self.wl.prompt_len + self.wl.output_len + KV_MARGIN_TOKENS
        worst = int(need.max())
        cap = self.pool.total_blocks * self.pool.block_size
        if worst > cap:
            i = int(need.argmax())
            raise ValueError(f"request {self.wl.request_ids[i]!r} needs {worst} KV tokens (prompt + output + "
                             f"{KV_MARGIN_TOKENS}) but the server holds {cap}; raise kv_capacity_tokens")
        if not self.chunked:
            if int(self.wl.prompt_len.max()) > self.budget:
                i = int(self.wl.prompt_len.argmax())
                raise ValueError(f"request {self.wl.request_ids[i]!r} has a {int(self.wl.prompt_len[i])}-token prompt, "
                                 f"more than max_num_batched_tokens={self.budget}; enable chunked_prefill or raise it")

    def _submit(self, t: float, client: int) -> None:
        """Closed loop: the client's next request arrives at t."""
        i = self._next_submit
        if i >= len(self.wl):
            return
        self._next_submit += 1
        self.client_of[i] = client
        self.arrival[i] = t
        heapq.heappush(self._heap, (t, i))

    def _pull_arrivals(self, now: float) -> None:
        if self.wl.closed_loop_clients > 0:
            while self._heap and self._heap[0][0] <= now:
                _, i = heapq.heappop(self._heap)
                self.status[i] = WAITING
                self.waiting.append(i)
            return
        arr = self.arrival
        n = len(arr)
        p = self._open_ptr
        while p < n and arr[p] <= now:
            self.status[p] = WAITING
            self.waiting.append(p)
            p += 1
        self._open_ptr = p

    def _next_arrival(self) -> float | None:
        if self.wl.closed_loop_clients > 0:
            return self._heap[0][0] if self._heap else None
        return float(self.arrival[self._open_ptr]) if self._open_ptr < len(self.arrival) else None

    # ------------------------------------------------------------------ main loop

    def _scheduler(self):
        env = self.env
        n = len(self.wl)
        while self.n_finished < n:
            self._pull_arrivals(env.now)
            if not self.running and not self.waiting:
                nxt = self._next_arrival()
                if nxt is None:
                    raise RuntimeError("engine stalled: requests left but none running, waiting or arriving")
                yield env.timeout(max(0.0, nxt - env.now))
                continue
            step = self._plan(env.now)
            if not (len(step.dec) or len(step.pre) or len(step.drafted)):
                raise RuntimeError(f"engine stalled at t={env.now:.6f}s: {len(self.running)} running, "
                                   f"{len(self.waiting)} waiting, {self.pool.free} free KV blocks")
            yield env.timeout(step.duration)
            self._apply(step, env.now)

    def simulate(self) -> SimResult:
        self.env.run()
        return self._result()

    # ------------------------------------------------------------------ planning

    def _choose(self, idx: np.ndarray, now: float, n_batch: int, kv: int, prefill_tokens: int):
        """Ask the policy for drafter and k of requests `idx`; apply n-gram proposal caps."""
        m = len(idx)
        if m == 0 or self.mode == "ar":
            z = np.zeros(m, dtype=np.int64)
            return np.full(m, NO_DRAFT, dtype=np.int64), z, z.copy(), None
        pos = self.gen[idx]  # output position of the first drafted token
        tix = self.wl.trace_index[idx]
        flat = self.table.flat_index(tix, pos)
        prop_known = {d: a[flat] for d, a in self.table.proposal_len.items()}
        view = BatchView(
            now=now,
            drafters=self.drafters,
            request_ids=_Gather(self.wl.request_ids, idx),
            positions=pos,
            categories=_Gather(self.wl.categories, idx),
            proposal_len=prop_known,
            step_time_estimate=self._estimator(n_batch, kv, prefill_tokens),
        )
        d_idx, k = self.policy.choose_batch(view)
        d_idx = np.asarray(d_idx, dtype=np.int64)
        k = np.asarray(k, dtype=np.int64)
        groups = self._groups_of(d_idx)
        if not (len(groups) == 1 and groups[0][1] is None):  # some requests do not draft: their k is 0
            k = np.where(d_idx == NO_DRAFT, 0, k)
        if m and k.min() < 0:
            raise ValueError(f"policy {self.policy.name!r} returned a negative k")
        proposed = k.copy() if prop_known else k
        if prop_known:
            for di, mask in groups:
                d = self.drafters[di]
                if d in prop_known:
                    if mask is None:
                        proposed = np.minimum(k, prop_known[d])
                    else:
                        proposed[mask] = np.minimum(k[mask], prop_known[d][mask])
        return d_idx, k, proposed, flat

    def _groups_of(self, d_idx: np.ndarray):
        """`_groups(d_idx)`, remembered for the array the policy returned this step (reused 3-4 times)."""
        if self._group_cache[0] is d_idx:
            return self._group_cache[1]
        g = _groups(d_idx)
        self._group_cache = (d_idx, g)
        return g

    def _accept(self, idx: np.ndarray, d_idx: np.ndarray, proposed: np.ndarray, flat: np.ndarray | None = None) -> np.ndarray:
        """Accepted draft tokens per request from the trace (greedy) or by sampling (temperature > 0)."""
        acc = np.zeros(len(idx), dtype=np.int64)
        if len(idx) == 0:
            return acc
        pos = self.gen[idx]  # output position of the first drafted token
        tix = self.wl.trace_index[idx]
        if flat is None:
            flat = self.table.flat_index(tix, pos)
        for di, mask in self._groups_of(d_idx):
            d = self.drafters[di]
            prop = _sel(proposed, mask)
            if self.temperature > 0 and d in self.table.tv:
                kmax = int(prop.max())
                if kmax == 0:
                    continue
                got = self._sampler(self.table.tv_window(d, _sel(tix, mask), _sel(pos, mask), kmax), prop, self.rng)
            else:
                a = self.table.acc_len[d][_sel(flat, mask)]
                got = np.minimum(a - 1, prop)
            if mask is None:
                acc = got.astype(np.int64, copy=False)
            else:
                acc[mask] = got
        return acc

    def _draft_time(self, idx: np.ndarray, d_idx: np.ndarray, k: np.ndarray, proposed: np.ndarray,
                    verify_time: float, ctx: np.ndarray | None = None) -> tuple[float, list[str]]:
        """Each drafter used is charged once for its own sub-batch; plus switching cost."""
        total = 0.0
        used = []
        if len(idx) == 0:
            return 0.0, used
        for di, mask in self._groups_of(d_idx):
            prop = _sel(proposed, mask)
            active = prop > 0
            n = int(np.count_nonzero(active))
            if n == 0:
                continue
            members = _sel(idx, mask)
            kk = _sel(k, mask)
            cx = None if ctx is None else _sel(ctx, mask)
            if n < len(prop):
                prop, members, kk = prop[active], members[active], kk[active]
                cx = None if cx is None else cx[active]
            name = self.drafters[di]
            cost = self.draft_costs.get(name)
            if cost is None:
                raise ValueError(f"policy chose drafter {name!r} but the experiment's 'drafters:' gives no cost for it "
                                 f"(have: {sorted(self.draft_costs)})")
            kv = int(cx.sum()) if cx is not None else int(self.wl.prompt_len[members].sum() + self.gen[members].sum())
            total += cost.draft_time(n, int(prop.sum()), int(kk.max()), kv, verify_time)
            used.append(name)
            if self.run.switch_cost_s > 0:
                prev = self.last_drafter[members]
                if ((prev != NO_DRAFT) & (prev != di)).any():
                    total += self.run.switch_cost_s
        return total, used

    def _estimator(self, n_batch: int, kv: int, prefill_tokens: int):
        target, costs, overhead, mode = self.target, self.draft_costs, self.overhead, self.mode

        def estimate(drafter: str | None, k: int) -> float:
            k = k if drafter is not None else 0
            verify = target.step_time(n_batch, prefill_tokens + n_batch * (k + 1), kv)
            draft = 0.0
            if k > 0:
                draft = costs[drafter].draft_time(n_batch, n_batch * k, k, kv, verify)
            if mode == "psd":
                return max(verify + overhead, draft)
            return draft + verify + overhead

        return estimate

    def _target_time(self, dec: np.ndarray, proposed: np.ndarray, pre: np.ndarray, chunk: np.ndarray,
                     kv_dec: int | None = None, prop_sum: int | None = None) -> tuple[float, int, int, int]:
        """Verify/decode (+ prefill) forward time for the batch the target actually runs."""
        n = len(dec) + len(pre)
        if n == 0:
            return 0.0, 0, 0, 0
        if kv_dec is None:
            kv_dec = int((self.wl.prompt_len[dec] + self.gen[dec]).sum())
        tokens = (int(proposed.sum()) if prop_sum is None else prop_sum) + len(dec)
        kv = kv_dec
        if len(pre):
            tokens += int(chunk.sum())
            kv += int((self.prefill_done[pre] + chunk).sum())
        return self.target.step_time(n, tokens, kv), n, tokens, kv

    def _plan(self, now: float) -> _Step:
        run = np.fromiter(self.running, dtype=np.int64, count=len(self.running))
        dec_mask = self.prefill_left[run] == 0
        dec_all = run[dec_mask]
        ctx = self.wl.prompt_len[dec_all] + self.gen[dec_all]
        kv_est = int(ctx.sum())
        if self.mode == "psd":
            return self._plan_psd(now, run, dec_mask, kv_est)
        d_idx, k, proposed, flat = self._choose(dec_all, now, len(dec_all), kv_est, 0)
        need = np.zeros(len(run), dtype=np.int64)
        need[dec_mask] = self.pool.blocks_for(ctx + proposed)
        keep, preempted = self._reserve(run, need)
        if preempted:
            kept = np.isin(dec_all, run[:keep])
            dec_all, d_idx, k, proposed, ctx = dec_all[kept], d_idx[kept], k[kept], proposed[kept], ctx[kept]
            flat = None if flat is None else flat[kept]
            kv_est = int(ctx.sum())
        prop_sum = int(proposed.sum())
        pre, chunk = self._prefills(tokens_used=prop_sum + len(dec_all), allow_new=not preempted)
        verify_t, nseq, tokens, kv = self._target_time(dec_all, proposed, pre, chunk, kv_est, prop_sum)
        draft_t, used = self._draft_time(dec_all, d_idx, k, proposed, verify_t, ctx)
        accepted = self._accept(dec_all, d_idx, proposed, flat)
        duration = draft_t + verify_t + self.overhead
        slices = []
        t = now
        args = {"num_seqs": nseq, "prefill_tokens": int(chunk.sum()), "batched_tokens": tokens, "kv_tokens": kv}
        if draft_t > 0:
            n_dr = int(np.count_nonzero(proposed))
            slices.append(("draft", t, t + draft_t, {"num_seqs": n_dr, "prefill_tokens": 0,
                                                      "batched_tokens": prop_sum, "kv_tokens": kv,
                                                      "proposed_tokens": prop_sum, "drafters": "+".join(used)}))
            t += draft_t
        phase = "decode" if self.mode == "ar" else "verify"
        if len(pre) and len(dec_all):
            phase = "mixed"
        elif len(pre):
            phase = "prefill"
        slices.append((phase, t, now + duration, {**args, "proposed_tokens": prop_sum,
                                                   "accepted_tokens": int(accepted.sum()), "drafters": "+".join(used)}))
        return _Step(dec_all, d_idx, k, proposed, accepted, pre, chunk, duration, slices, [])

    def _plan_psd(self, now: float, run: np.ndarray, dec_mask: np.ndarray, kv_est: int) -> _Step:
        dec_all = run[dec_mask]
        vs = self.verify_side
        flags = self.flag[dec_all]
        on_v = flags == vs
        V, D = dec_all[on_v], dec_all[~on_v]
        fallback = len(D) == 0 or len(V) == 0 or len(dec_all) < self.psd.split_min_batch
        if fallback and len(dec_all):
            # one sub-batch empty: this step is plain SD for everyone (draft, then verify)
            V, D = dec_all, dec_all[:0]
            self.psd_fallback_steps += 1
        has_prop = self.pending_d[V] != NO_DRAFT
        # Without a proposal from the previous step a verify-side request is drafted first, in sequence,
        # only in a fallback step (plain SD); otherwise it decodes one plain token in the verify pass
        # (a request that just joined), so the pipeline never stalls for it.
        V_new = V[~has_prop] if fallback else V[:0]
        to_choose = np.concatenate([V_new, D])
        d_c, k_c, p_c, _ = self._choose(to_choose, now, len(dec_all), kv_est, 0)
        nv = len(V_new)
        d_v = self.pending_d[V].copy()
        k_v = self.pending_k[V].copy()
        p_v = self.pending_prop[V].copy()
        no_prop = ~has_prop
        k_v[no_prop], p_v[no_prop] = 0, 0
        if fallback:
            d_v[no_prop], k_v[no_prop], p_v[no_prop] = d_c[:nv], k_c[:nv], p_c[:nv]
        d_d, k_d, p_d = d_c[nv:], k_c[nv:], p_c[nv:]

        idx_all = np.concatenate([V, D])
        need_tok = self.wl.prompt_len[idx_all] + self.gen[idx_all]
        extra = np.concatenate([p_v, np.zeros(len(D), np.int64) if self.psd.defer_kv else p_d])
        need = np.zeros(len(self.wl), dtype=np.int64)
        need[idx_all] = self.pool.blocks_for(need_tok + extra)
        need = need[run]
        keep, preempted = self._reserve(run, need)
        if preempted:
            alive = set(int(x) for x in run[:keep])
            mv = np.array([int(x) in alive for x in V], dtype=bool)
            md = np.array([int(x) in alive for x in D], dtype=bool)
            V, d_v, k_v, p_v, has_prop = V[mv], d_v[mv], k_v[mv], p_v[mv], has_prop[mv]
            D, d_d, k_d, p_d = D[md], d_d[md], k_d[md], p_d[md]
        pre, chunk = self._prefills(tokens_used=int(p_v.sum()) + len(V), allow_new=not preempted)
        verify_t, nseq, tokens, kv = self._target_time(V, p_v, pre, chunk)
        newv = ~has_prop & (d_v != NO_DRAFT)
        pre_draft_t, used_pre = self._draft_time(V[newv], d_v[newv], k_v[newv], p_v[newv], verify_t)
        draft_t, used_d = self._draft_time(D, d_d, k_d, p_d, verify_t)
        accepted = self._accept(V, d_v, p_v)
        target_end = pre_draft_t + verify_t + (self.overhead if (len(V) or len(pre)) else 0.0)
        drafter_end = pre_draft_t + draft_t
        duration = max(target_end, drafter_end) + self.psd.sync_s
        if duration <= 0:
            duration = self.overhead
        t_slices, d_slices = [], []
        if pre_draft_t > 0:
            d_slices.append(("draft", now, now + pre_draft_t, {
                "num_seqs": int(newv.sum()), "prefill_tokens": 0, "batched_tokens": int(p_v[newv].sum()),
                "kv_tokens": kv, "proposed_tokens": int(p_v[newv].sum()), "drafters": "+".join(used_pre),
                "sub_batch": vs}))
        if draft_t > 0:
            kv_d = int((self.wl.prompt_len[D] + self.gen[D]).sum())
            d_slices.append(("draft", now + pre_draft_t, now + drafter_end, {
                "num_seqs": len(D), "prefill_tokens": 0, "batched_tokens": int(p_d.sum()), "kv_tokens": kv_d,
                "proposed_tokens": int(p_d.sum()), "drafters": "+".join(used_d), "sub_batch": 1 - vs}))
        if len(V) or len(pre):
            phase = "mixed" if (len(pre) and len(V)) else ("prefill" if len(pre) else "verify")
            t_slices.append((phase, now + pre_draft_t, now + target_end, {
                "num_seqs": nseq, "prefill_tokens": int(chunk.sum()), "batched_tokens": tokens, "kv_tokens": kv,
                "proposed_tokens": int(p_v.sum()), "accepted_tokens": int(accepted.sum()),
                "drafters": "+".join(sorted(set(self.drafters[i] for i in np.unique(d_v) if i != NO_DRAFT))),
                "sub_batch": vs}))
        step = _Step(V, d_v, k_v, p_v, accepted, pre, chunk, duration, t_slices, d_slices)
        step.drafted, step.drafted_d, step.drafted_k, step.drafted_prop = D, d_d, k_d, p_d
        return step

    def _reserve(self, run: np.ndarray, need_blocks: np.ndarray) -> tuple[int, bool]:
        """Grow each running request's KV to `need_blocks`; preempt the newest until it fits.

        Returns how many of `run` (admission order) keep running, and whether any was preempted.
        """
        extra = np.maximum(need_blocks - self.blocks[run], 0)
        if int(extra.sum()) <= self.pool.free:
            keep = len(run)
        else:
            cum_extra = np.concatenate([[0], np.cumsum(extra)])
            held = self.blocks[run]
            suffix = np.concatenate([np.cumsum(held[::-1])[::-1], [0]])  # blocks freed by preempting run[L:]
            ok = cum_extra - (self.pool.free + suffix) <= 0
            keep = int(np.nonzero(ok)[0].max())
            for i in run[keep:][::-1]:
                self._preempt(int(i))
        grow = extra[:keep]
        total = int(grow.sum())
        if total:
            self.pool.allocate(total)
            self.blocks[run[:keep]] += grow
        return keep, keep < len(run)

    def _preempt(self, i: int) -> None:
        self.running.remove(i)
        self.pool.release(int(self.blocks[i]))
        self.blocks[i] = 0
        self.status[i] = WAITING
        self.waiting.appendleft(i)
        self.prefill_left[i] = 0  # set on re-admission
        self.prefilling.pop(i, None)
        self.prefill_done[i] = 0
        self.pending_d[i] = NO_DRAFT
        self.flag[i] = -1
        self.preemptions[i] += 1

    def _prefills(self, tokens_used: int, allow_new: bool) -> tuple[np.ndarray, np.ndarray]:
        """Continue partial prefills, then admit waiting requests in FIFO order within budget and KV."""
        budget = self.budget - tokens_used
        if not self.prefilling and not (allow_new and self.waiting and len(self.running) < self.max_num_seqs):
            return _EMPTY, _EMPTY
        pre, chunk = [], []
        for i in list(self.prefilling):  # admission order; preempted ones were removed
            c = min(int(self.prefill_left[i]), budget) if self.chunked else int(self.prefill_left[i])
            if c <= 0:
                continue
            finishing = c == self.prefill_left[i]
            need = self.pool.blocks_for(int(self.prefill_done[i]) + c + int(finishing)) - int(self.blocks[i])
            if need > self.pool.free:
                continue
            if need > 0:
                self.pool.allocate(need)
                self.blocks[i] += need
            budget -= c
            pre.append(int(i))
            chunk.append(c)
        while allow_new and self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            i = self.waiting[0]
            total = int(self.wl.prompt_len[i] + self.gen[i])  # recompute after preemption includes output so far
            c = min(total, budget) if self.chunked else total
            if c > budget and (pre or tokens_used > 0):
                break  # an oversized recompute prefill runs alone rather than never
            need = self.pool.blocks_for(c + int(c == total))
            if need > self.pool.free:
                break
            self.waiting.popleft()
            self.pool.allocate(need)
            self.blocks[i] = need
            self.status[i] = RUNNING
            self.running.append(i)
            self.prefill_left[i] = total
            self.prefilling[i] = None
            self.prefill_done[i] = 0
            if np.isnan(self.first_sched[i]):
                self.first_sched[i] = self.env.now
            if self.mode == "psd":
                self._assign_side(i)
            budget -= c
            pre.append(i)
            chunk.append(c)
        return np.asarray(pre, dtype=np.int64), np.asarray(chunk, dtype=np.int64)

    def _assign_side(self, i: int) -> None:
        """MineDraft: join the side drafted next step; a balance counter keeps the sides within one."""
        run = np.fromiter(self.running, dtype=np.int64, count=len(self.running))
        flags = self.flag[run]
        n0, n1 = int((flags == 0).sum()), int((flags == 1).sum())
        drafted_next = self.verify_side  # the side verified now is drafted next step
        counts = (n0, n1)
        side = drafted_next if counts[drafted_next] <= counts[1 - drafted_next] else 1 - drafted_next
        self.flag[i] = side

    # ------------------------------------------------------------------ applying a step

    def _apply(self, s: _Step, end: float) -> None:
        dec = s.dec
        done_dec = dec[:0]
        if len(dec):
            gen = self.gen[dec]
            out = self.wl.output_len[dec]
            emitted = np.minimum(1 + s.accepted, out - gen)
            self.itl_chunks.append(end - self.last_emit[dec])  # every decoding request emitted before
            self.last_emit[dec] = end
            self.gen[dec] = gen + emitted
            done_dec = dec[gen + emitted >= out]
            self.decode_steps[dec] += 1
            self.n_proposed[dec] += s.proposed
            self.n_accepted[dec] += s.accepted  # as verification reports it, before the max-tokens cut
            groups = self._groups_of(s.d_idx)
            n_drafted = 0
            for di, mask in groups:
                c = len(dec) if mask is None else int(np.count_nonzero(mask))
                self.usage[di] += c
                n_drafted += c
            self.usage[-1] += len(dec) - n_drafted
            if n_drafted:
                drafted = None if n_drafted == len(dec) else s.d_idx != NO_DRAFT
                self.last_drafter[_sel(dec, drafted)] = _sel(s.d_idx, drafted)
                if self._learns:
                    self._feedback(_sel(dec, drafted), _sel(gen, drafted), _sel(s.d_idx, drafted),
                                   _sel(s.k, drafted), _sel(s.proposed, drafted), _sel(s.accepted, drafted),
                                   s.duration)
            if self.mode == "psd":
                self.pending_d[dec] = NO_DRAFT
        else:
            emitted = np.zeros(0, dtype=np.int64)
        if self.mode == "psd":
            D = s.drafted
            if len(D):
                self.pending_d[D] = s.drafted_d
                self.pending_k[D] = s.drafted_k
                self.pending_prop[D] = s.drafted_prop
            if len(D) and len(dec):
                self.verify_side = 1 - self.verify_side
        # prefills
        first_tokens = 0
        for i, c in zip(s.pre, s.chunk):
            self.prefill_left[i] -= c
            self.prefill_done[i] += c
            if self.prefill_left[i] == 0:
                del self.prefilling[i]
                first_tokens += 1
                self.gen[i] += 1
                self.last_emit[i] = end
                if np.isnan(self.first_token[i]):
                    self.first_token[i] = end
                if not self.started[i]:
                    self.started[i] = True
                    self.policy.start_request(self.wl.request_ids[i])
        self._record(s, end, int(emitted.sum()) + first_tokens)
        # finishes (a prefill can finish a request whose output is one token)
        done = done_dec
        if len(s.pre):
            pre = s.pre
            fin = pre[(self.gen[pre] >= self.wl.output_len[pre]) & (self.prefill_left[pre] == 0)]
            if len(fin):
                done = np.concatenate([done_dec, fin])
        for i in done:
            i = int(i)
            if self.status[i] == FINISHED:
                continue
            self.status[i] = FINISHED
            self.finish[i] = end
            self.running.remove(i)
            self.pool.release(int(self.blocks[i]))
            self.blocks[i] = 0
            self.pending_d[i] = NO_DRAFT
            self.n_finished += 1
            if self.started[i]:
                self.policy.finish_request(self.wl.request_ids[i])
            if self.wl.closed_loop_clients > 0:
                self._submit(end + self.wl.think_time, int(self.client_of[i]))
        self.step_no += 1
        if self.on_step is not None:
            self.on_step(self.n_finished)

    def _feedback(self, idx, pos, d_idx, k, proposed, accepted, step_time) -> None:
        """Tell the policy what was accepted; TV over the proposed positions where the trace has it."""
        tv = None
        if self.table.tv:
            tv = []
            for j, i in enumerate(idx):
                d = self.drafters[d_idx[j]]
                if d in self.table.tv and proposed[j] > 0:
                    w = self.table.tv_window(d, self.wl.trace_index[i:i + 1], pos[j:j + 1], int(proposed[j]))[0]
                    tv.append(w[~np.isnan(w)])
                else:
                    tv.append(None)
        fb = BatchFeedback(
            drafters=self.drafters,
            request_ids=[self.wl.request_ids[i] for i in idx],
            positions=pos,
            drafter_idx=d_idx, k=k, proposed=proposed, accepted=accepted, tv=tv, step_time=step_time,
        )
        self.policy.observe_batch(fb)

    def _record(self, s: _Step, end: float, emitted: int) -> None:
        used_blocks = self.pool.used
        add = self.steps.append_row
        for device, slices in (("target", s.target_slices), ("drafter", s.drafter_slices)):
            for phase, t0, t1, a in slices:
                g = a.get
                add((self.step_no, device, phase, t0, t1, g("num_seqs", 0), g("prefill_tokens", 0),
                     g("batched_tokens", 0), g("kv_tokens", 0), used_blocks, g("proposed_tokens", 0),
                     g("accepted_tokens", 0), emitted if device == "target" and phase != "draft" else 0,
                     g("sub_batch", -1), g("drafters", "")))

    # ------------------------------------------------------------------ results

    def _result(self) -> SimResult:
        wl = self.wl
        out = wl.output_len
        tpot = np.where(out > 1, (self.finish - self.first_token) / np.maximum(out - 1, 1), np.nan)
        req = {
            "request_id": np.asarray(wl.request_ids, dtype=object),
            "trace_id": np.asarray([self.table.trace_ids[t] for t in wl.trace_index], dtype=object),
            "category": np.asarray(wl.categories, dtype=object),
            "arrival_time": self.arrival,
            "prompt_len": wl.prompt_len.astype(np.int64),
            "output_len": out.astype(np.int64),
            "first_scheduled_time": self.first_sched,
            "first_token_time": self.first_token,
            "finish_time": self.finish,
            "ttft": self.first_token - self.arrival,
            "tpot": tpot,
            "e2e": self.finish - self.arrival,
            "queue_delay": self.first_sched - self.arrival,
            "decode_steps": self.decode_steps,
            "proposed_tokens": self.n_proposed,
            "accepted_tokens": self.n_accepted,
            "preemptions": self.preemptions,
            "sub_batch": self.flag if self.mode == "psd" else np.full(len(wl), -1, dtype=np.int64),
        }
        requests = pd.DataFrame({c: req[c] for c in REQUEST_COLUMNS})
        itl = np.concatenate(self.itl_chunks) if self.itl_chunks else np.zeros(0)
        usage = {d: int(self.usage[i]) for i, d in enumerate(self.drafters)}
        usage["none"] = int(self.usage[-1])
        extras = {
            "kv_total_blocks": self.pool.total_blocks,
            "kv_peak_blocks": self.pool.peak,
            "block_size": self.pool.block_size,
            "steps": self.step_no,
            "request_steps": int(self.decode_steps.sum()),
            "drafter_usage": usage,
            "psd_fallback_steps": self.psd_fallback_steps,
            "max_num_seqs": self.max_num_seqs,
        }
        return SimResult(requests, self.steps.frame(), itl, extras)


_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.setflags(write=False)


class _Gather:
    """A read-only sequence view `seq[idx[i]]`, so a step does not copy ids it may never read."""

    __slots__ = ("seq", "idx")

    def __init__(self, seq, idx):
        self.seq, self.idx = seq, idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.seq[j] for j in self.idx[i]]
        return self.seq[self.idx[i]]

    def __iter__(self):
        return (self.seq[j] for j in self.idx)


def _groups(d_idx: np.ndarray):
    """(drafter index, mask) per drafter used; mask None when the whole batch uses one drafter."""
    if len(d_idx) == 0:
        return []
    lo, hi = d_idx.min(), d_idx.max()
    if lo == hi:
        return [] if lo == NO_DRAFT else [(int(lo), None)]
    return [(int(di), d_idx == di) for di in np.unique(d_idx) if di != NO_DRAFT]


def _sel(a: np.ndarray, mask):
    return a if mask is None else a[mask]


def _sampled_acceptance():
    """The seeded sampled-verification rule (temperature > 0), from traces/."""
    try:
        from traces.sampled_acceptance import sample_accepted
    except ImportError as e:  # pragma: no cover - present once the policies work is merged
        raise ValueError("temperature > 0 needs traces/sampled_acceptance.py (sampled verification)") from e
    return sample_accepted
