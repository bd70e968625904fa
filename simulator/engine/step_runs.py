"""Macro-steps: a run of AR or fixed-k SD steps between batch-changing events, computed in one numpy pass.

Between two events that change the batch (an arrival, a preemption, a prefill or admission, a policy that must
see each step; a finish when something may be admitted after it or a closed loop sends a new request) the
steps of a fixed-policy server are determined: every running request decodes until it finishes, its tokens
come from the trace (fixed drafter and k), durations from the linear target profile and the growing KV. This
module finds how many such steps follow (`plan`), computes durations, tokens, KV growth and release, finishes,
step-table rows and ITL gaps as (steps x requests) arrays, and writes them into the server's state (`apply`).

The result equals the step-by-step path (simulator/engine/step_sd.py + step_outcome.py) bit for bit: the same float
operations in the same order (a duration is ((draft + verify) + overhead) + 0.0; times accumulate one step at
a time, as SimPy adds each timeout). Where a piece of that equality cannot be had (a non-linear profile, sampled
verification, a learning or non-fixed policy, PSD, switch costs, vLLM V1 engine-step drafters, arrivals a
cluster's router hands out at run time) `for_server` returns None and the server stays on the step path.

The steps table keeps one row per step and slice: runs keep what their rows need, and the rows of every run are
built in one pass when the table is (`ColumnBuffer.defer`), merged with the step path's rows by step number.
The progress callback `on_step` is called once per run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.base import FixedPolicy
from simulator.engine.arrivals import ClosedLoopArrivals, OpenLoopArrivals
from simulator.costs.draft_cost import DraftCost
from simulator.costs.latency import LinearProfile

MACRO_STEPS = True  # module switch: False keeps every server on the step path (benchmarks compare both)
MAX_RUN_STEPS = 512  # horizon of one pass; a longer quiet spell takes several runs


@dataclass
class StepRun:
    """`steps` consecutive decode steps planned at `start`; request `batch[i]` decodes in steps 0..last_step[i]
    and finishes at the end of its last step when that is before the run's end (open loop, nobody waiting)."""

    start: float
    end: float
    steps: int
    batch: np.ndarray  # requests (admission order) decoding at the start
    active: np.ndarray  # (steps, batch) bool: request decodes in the step
    last_step: np.ndarray  # (batch,) its last step in the run (steps - 1 when it does not finish in it)
    times: np.ndarray  # step boundaries, steps + 1 values: times[0] = start, times[-1] = end
    gen_end: np.ndarray  # (batch,) output tokens after the run (cut at output_len)
    num_seqs: np.ndarray  # (steps,) requests decoding per step
    emitted: np.ndarray  # (steps,) tokens the batch emits per step
    proposed: np.ndarray  # (steps,) drafts proposed per step
    accepted: np.ndarray  # (steps,) drafts accepted per step (before the end-of-output cut)
    drafting: np.ndarray  # (steps,) requests that propose something per step
    proposed_per_request: np.ndarray | None  # (batch,) over the run; None without a drafter
    accepted_per_request: np.ndarray | None
    draft_t: np.ndarray  # (steps,)
    kv_tokens: np.ndarray  # (steps,) KV tokens the target attends
    blocks_end: np.ndarray  # (batch,) KV blocks held at the end of each request's last step
    new_blocks: np.ndarray  # (steps,) blocks allocated up to and including each step
    released: np.ndarray  # (steps,) blocks freed by finishes before each step


class LinearTime:
    """A LinearProfile's step_time over arrays, with the scalar method's operation order."""

    def __init__(self, p: LinearProfile):
        self.a, self.b, self.s, self.d = p._a, p._b, p._s, p._d

    def __call__(self, n, tokens, kv):
        return self.a * kv + self.b * tokens + self.s * n + self.d


def _draft_times(cost: DraftCost, n: np.ndarray, prop_sum: np.ndarray, k: int, kv: np.ndarray,
                 verify: np.ndarray) -> np.ndarray | None:
    """`DraftCost.draft_time` per step as an array (0 where nothing is proposed); None if not vectorisable."""
    active = (n > 0) & (prop_sum > 0)
    if cost.kind == "constant":
        t = np.full(len(n), cost.seconds)
    elif cost.kind == "fraction_of_verify":
        t = cost.fraction * verify
    elif cost.kind == "whole_proposal" and type(cost.profile) is LinearProfile:
        t = LinearTime(cost.profile)(n, prop_sum, kv)
    elif cost.kind == "autoregressive" and type(cost.profile) is LinearProfile:
        f = LinearTime(cost.profile)
        t = np.zeros(len(n))
        for i in range(k):
            t = t + f(n, n, kv + i * n)
    else:
        return None
    return np.where(active, t, 0.0)


class StepRuns:
    """Plans and applies macro-steps for one server whose policy and costs allow them."""

    def __init__(self, server, drafter: int | None, k: int):
        self.srv = server
        self.st, self.wl, self.sched, self.pricing = server.state, server.wl, server.sched, server.pricing
        self.outcome = server.outcome
        self.verify_time = LinearTime(server.pricing.target)
        self.overhead = server.pricing.overhead
        self.drafter, self.k = drafter, k
        self._runs: list[tuple] = []  # per run: what its step rows need, built in one pass by `_columns`
        self.outcome.steps.defer(self._columns, order_by="step")
        self.phase = "decode" if server.mode == "ar" else "verify"
        self.block_size = self.sched.pool.block_size
        c = server.pricing.target.coefficients
        # no step is shorter than one sequence's (with non-negative coefficients): bounds a run's horizon
        self.floor_s = self.verify_time(1, 1, 0) + self.overhead if all(v >= 0 for v in c.values()) else 0.0
        self.open_loop = isinstance(server.arrivals, OpenLoopArrivals)
        if drafter is not None:
            table, name = server.table, server.table.drafters[drafter]
            self.name = name
            self.cost = server.pricing.draft_costs[name]
            first = server.drafting._first
            self.first, self.last = first, server.drafting._last
            acc = table.acc_len[name]
            prop = np.minimum(k, table.proposal_len[name]) if name in table.proposal_len else np.full(len(acc), k)
            self.step_prop = prop.astype(np.int64)
            # the replay rule (traces/acceptance.py) once over the whole table for this drafter and k
            from traces.acceptance import accepted_drafts
            self.step_acc = np.asarray(accepted_drafts(acc, self.step_prop), dtype=np.int64)
            self.step_emit = 1 + self.step_acc

    def _quiet(self) -> bool:
        """No prefill or admission can happen in the next step: the batch is fixed until an event."""
        st, sched = self.st, self.sched
        return not st.prefilling and bool(st.running) and not sched.can_admit()

    def plan(self, now: float) -> StepRun | None:
        """The macro-step starting at `now`, or None when the next step must take the step path."""
        if not self._quiet():
            return None
        st, wl = self.st, self.wl
        batch = st.running_array()
        nb = len(batch)
        gen0 = st.gen[batch]
        out = wl.output_len[batch]
        left = out - gen0
        # past a finish only when nothing can be admitted after it and no arrival follows from it
        through_finishes = self.open_loop and not st.waiting
        nxt = self.srv.arrivals.next_time()
        ctx0 = wl.prompt_len[batch] + gen0
        held0 = st.blocks[batch]
        horizon = min(int(left.max() if through_finishes else left.min()), MAX_RUN_STEPS)
        if nxt is not None and self.floor_s > 0:
            horizon = min(horizon, int((nxt - now) / self.floor_s) + 2)
        horizon = max(horizon, 1)
        bs = self.block_size
        j = np.arange(horizon)
        if self.drafter is None:  # AR: one token per request per step
            last_step = left - 1
            gen_all = None
        else:
            gen_all = np.empty((horizon + 1, nb), dtype=np.int64)
            gen_all[0] = gen0
            first, last = self.first[batch], self.last[batch]
            flat = np.empty((horizon, nb), dtype=np.int64)
            emit = self.step_emit
            g = gen0
            for i in range(horizon):
                f = np.minimum(first + g, last)
                flat[i] = f
                g = g + emit[f]
                gen_all[i + 1] = g
            reached = gen_all[1:] >= out
            last_step = np.where(reached.any(axis=0), np.argmax(reached, axis=0), horizon)
        first_finish = int(last_step.min())
        steps = horizon if through_finishes else min(horizon, first_finish + 1)
        steps = min(steps, int(last_step.max()) + 1)  # nobody left to decode after that
        j = j[:steps]
        active = j[:, None] <= last_step[None, :]
        upto = np.minimum(j[:, None], last_step[None, :])  # a finished request keeps its last step's KV
        if self.drafter is None:
            ctx = ctx0 + upto
            need = -(-ctx // bs)
            proposed = accepted = None
            prop_sum = acc_sum = n_draft = np.zeros(steps, dtype=np.int64)
        else:
            flat = flat[:steps]
            proposed = np.where(active, self.step_prop[flat], 0)
            accepted = np.where(active, self.step_acc[flat], 0)
            ctx = ctx0 + (np.take_along_axis(gen_all, upto, axis=0) - gen0)
            need = np.maximum.accumulate(-(-(ctx + proposed) // bs), axis=0)
            prop_sum = proposed.sum(axis=1)
            acc_sum = accepted.sum(axis=1)
            n_draft = np.count_nonzero(proposed, axis=1)
        num_seqs = active.sum(axis=1)
        kv = np.where(active, ctx, 0).sum(axis=1)
        if self.sched.decodes_in_budget and int((prop_sum + num_seqs).max()) > self.sched.budget:
            return None  # vLLM V1 would cut decodes to the token budget
        blocks = np.maximum(need, held0)
        new_blocks = (blocks - held0).sum(axis=1)
        fin_blocks = blocks[np.minimum(last_step, steps - 1), np.arange(nb)]
        freed = np.bincount(last_step[last_step < steps - 1] + 1, weights=fin_blocks[last_step < steps - 1],
                            minlength=steps)[:steps].astype(np.int64)
        released = np.cumsum(freed)
        over = new_blocks - released > self.sched.pool.free
        if over.any():
            steps = int(np.argmax(over))  # that step preempts: the step path takes it
            if steps == 0:
                return None
        verify = self.verify_time(num_seqs[:steps], prop_sum[:steps] + num_seqs[:steps], kv[:steps])
        if self.drafter is not None:
            draft_kv = np.where(proposed[:steps] > 0, ctx[:steps], 0).sum(axis=1)
            draft = _draft_times(self.cost, n_draft[:steps], prop_sum[:steps], self.k, draft_kv, verify)
            if draft is None or draft.min() < 0:
                return None
            duration = draft + verify + self.overhead + 0.0
        else:
            draft = np.zeros(steps)
            duration = 0.0 + verify + self.overhead + 0.0
        if not (np.isfinite(duration).all() and duration.min() >= 0):
            return None  # the step path raises the error naming the profile
        times = np.add.accumulate(np.concatenate(([now], duration)))
        if nxt is not None and steps > 1 and times[steps - 1] >= nxt:
            # a step planned at or after the next arrival pulls it first: the run stops before it
            steps = int(np.searchsorted(times[1:steps], nxt)) + 1
            times = times[:steps + 1]
        end = float(times[steps])
        if now + (end - now) != end:  # SimPy adds the delay to now: it must land on the same float
            return None
        active = active[:steps]
        last_step = np.minimum(last_step, steps - 1)
        if self.drafter is None:
            gen_end = gen0 + last_step + 1
            emitted = num_seqs
            prop_req = acc_req = None
        else:
            gen_end = np.minimum(gen_all[steps], out)
            emitted = np.diff(np.minimum(gen_all[:steps + 1], out).sum(axis=1))
            prop_req, acc_req = proposed[:steps].sum(axis=0), accepted[:steps].sum(axis=0)
        return StepRun(now, end, steps, batch, active, last_step, times, gen_end, num_seqs[:steps], emitted[:steps],
                       prop_sum[:steps], acc_sum[:steps], n_draft[:steps], prop_req, acc_req, draft[:steps],
                       kv[:steps], blocks[last_step, np.arange(nb)], new_blocks[:steps], released[:steps])

    def apply(self, run: StepRun) -> None:
        """Write the run's effects: tokens, counters, KV, ITL gaps, step rows, and finishes in step order."""
        st, outcome = self.st, self.outcome
        batch, L, times, active = run.batch, run.steps, run.times, run.active
        nb = len(batch)
        itl = np.empty((L, nb))
        itl[0] = times[1] - st.last_emit[batch]
        if L > 1:
            itl[1:] = np.diff(times[1:])[:, None]
        outcome.itl_chunks.append(itl[active])  # row-major: step order, admission order within a step
        st.last_emit[batch] = times[run.last_step + 1]
        st.gen[batch] = run.gen_end
        st.verify_counts.add_run(batch, run.last_step + 1, run.proposed_per_request, run.accepted_per_request)
        st.usage[-1 if self.drafter is None else self.drafter] += int(run.num_seqs.sum())
        pool = self.sched.pool
        used0 = pool.used
        st.blocks[batch] = run.blocks_end
        self._runs.append((outcome.step_no, L, run.num_seqs, times, run.draft_t, run.kv_tokens, run.proposed,
                           run.accepted, run.emitted, used0 + run.new_blocks - run.released, run.drafting))
        outcome.step_no += L
        finished = run.gen_end >= self.wl.output_len[batch]
        allocated = 0
        if finished.any():
            fin_steps = run.last_step[finished]
            for step in np.unique(fin_steps):  # allocate up to that step, then its finishes free their KV
                upto = int(run.new_blocks[step])
                if upto > allocated:
                    pool.allocate(upto - allocated)
                    allocated = upto
                outcome.finish(batch[finished][fin_steps == step], float(times[step + 1]))
        total = int(run.new_blocks[-1])
        if total > allocated:
            pool.allocate(total - allocated)

    def _columns(self) -> dict[str, np.ndarray] | None:
        """The step rows of every run so far, in step order (the draft row, where there is one, first)."""
        runs, self._runs = self._runs, []
        if not runs:
            return None
        L = np.array([r[1] for r in runs])
        nb = np.concatenate([r[2] for r in runs])
        step_no = np.concatenate([np.arange(r[0], r[0] + r[1]) for r in runs])
        start = np.concatenate([r[3][:-1] for r in runs])
        end = np.concatenate([r[3][1:] for r in runs])
        draft_t = np.concatenate([r[4] for r in runs])
        kv = np.concatenate([r[5] for r in runs])
        prop_sum = np.concatenate([r[6] for r in runs])
        used = np.concatenate([r[9] for r in runs])
        emitted = np.concatenate([r[8] for r in runs])
        S = len(step_no)
        zeros, minus = np.zeros(S, np.int64), np.full(S, -1, np.int64)
        target = np.full(S, "target", dtype=object)
        has_draft = draft_t > 0
        if self.drafter is not None:
            acc_sum = np.concatenate([r[7] for r in runs])
            n_draft = np.concatenate([r[10] for r in runs])
            # a drafter counts as used when something was proposed, even at zero cost
            names = np.where(prop_sum > 0, self.name, "").astype(object)
        else:
            acc_sum, n_draft, names = zeros, zeros, np.full(S, "", dtype=object)
        verify = {"step": step_no, "device": target, "phase": np.full(S, self.phase, dtype=object),
                  "start": np.where(has_draft, start + draft_t, start), "end": end,
                  "num_seqs": nb, "prefill_tokens": zeros, "batched_tokens": prop_sum + nb,
                  "kv_tokens": kv, "kv_blocks_used": used, "proposed_tokens": prop_sum,
                  "accepted_tokens": acc_sum, "emitted_tokens": emitted, "sub_batch": minus, "drafters": names}
        if not has_draft.any():
            return verify
        draft = {"step": step_no, "device": target, "phase": np.full(S, "draft", dtype=object),
                 "start": start, "end": start + draft_t, "num_seqs": n_draft, "prefill_tokens": zeros,
                 "batched_tokens": prop_sum, "kv_tokens": kv, "kv_blocks_used": used,
                 "proposed_tokens": prop_sum, "accepted_tokens": zeros, "emitted_tokens": zeros, "sub_batch": minus,
                 "drafters": names}
        keep = np.stack([has_draft, np.ones(S, bool)], axis=1).ravel()
        return {c: np.stack([draft[c], verify[c]], axis=1).ravel()[keep] for c in verify}


def for_server(server) -> StepRuns | None:
    """Macro-steps for `server` when its mode, policy, profile, costs and arrivals make steps determined."""
    if not MACRO_STEPS or server.mode not in ("ar", "sd"):
        return None
    if server.gap_s:
        return None  # vLLM V1's engine-loop gap between steps: admissions happen after it, step by step
    if not isinstance(server.arrivals, (OpenLoopArrivals, ClosedLoopArrivals)):
        return None  # a router pushes arrivals at times the server cannot see ahead
    pricing, drafting = server.pricing, server.drafting
    if type(pricing.target) is not LinearProfile:
        return None
    if any(c.kind == "engine_step" for c in pricing.draft_costs.values()):
        return None
    policy = drafting.policy
    if type(policy) is not FixedPolicy:
        return None
    if server.mode == "ar" or policy.drafter is None or policy.k == 0:
        return StepRuns(server, None, 0)
    if drafting.verification != "greedy" or pricing.switch_cost_s > 0:
        return None
    if policy.drafter not in server.table.drafters or policy.drafter not in pricing.draft_costs:
        return None  # the step path raises the error naming the drafter
    if policy.drafter not in server.table.acc_len:
        return None
    return StepRuns(server, server.table.drafters.index(policy.drafter), policy.k)
