"""Macro-steps: a run of AR or fixed-k SD steps between batch-changing events, computed in one numpy pass.

Between two events that change the batch (an arrival, a finish, a preemption, a prefill, a policy that must
see each step) the steps of a fixed-policy server are determined: every running request decodes, its tokens
come from the trace (fixed drafter and k), durations from the linear target profile and the growing KV. This
module finds how many such steps follow (`plan`), computes their durations, tokens, KV growth, step-table rows
and ITL gaps as (steps x requests) arrays, and writes them into the server's state at once (`apply`).

The result equals the step-by-step path (simulator/step_sd.py + step_outcome.py) bit for bit: the same float
operations in the same order (a duration is ((draft + verify) + overhead) + 0.0; times accumulate one step at
a time, as SimPy adds each timeout). Where a piece of that equality cannot be had (a non-linear profile, sampled
verification, a learning or non-fixed policy, PSD, switch costs, vLLM V1 engine-step drafters, pushed arrivals
of a cluster) `for_server` returns None and the server stays on the step path.

The steps table keeps one row per step and slice: runs keep what their rows need and the rows of every run
are built in one pass when the table is (`ColumnBuffer.defer`), merged with the step path's rows by step. The progress callback `on_step` is called once per run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.base import FixedPolicy
from simulator.arrivals import ClosedLoopArrivals, OpenLoopArrivals
from simulator.draft_cost import DraftCost
from simulator.latency import LinearProfile

MACRO_STEPS = True  # module switch: False keeps every server on the step path (benchmarks compare both)
MAX_RUN_STEPS = 512  # horizon of one pass; a longer quiet spell takes several runs


@dataclass
class StepRun:
    """`steps` consecutive decode steps of the whole running batch, planned at `start`."""

    start: float
    end: float
    steps: int
    batch: np.ndarray  # requests (admission order), all decoding every step
    times: np.ndarray  # step boundaries, steps + 1 values: times[0] = start, times[-1] = end
    gen: np.ndarray  # (steps + 1, batch) output tokens before each step (cut at output_len in the last row)
    proposed: np.ndarray  # (steps, batch)
    accepted: np.ndarray  # (steps, batch), before the end-of-output cut
    draft_t: np.ndarray  # (steps,)
    kv_tokens: np.ndarray  # (steps,) KV tokens the target attends
    blocks: np.ndarray  # (batch,) KV blocks held after the run
    new_blocks: np.ndarray  # (steps,) blocks allocated by each step


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
        self.lower_bound_ok = all(v >= 0 for v in c.values())
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
        left_min = int((out - gen0).min())
        nxt = self.srv.arrivals.next_time()
        horizon = min(left_min, MAX_RUN_STEPS)
        prompt = wl.prompt_len[batch]
        ctx0 = int((prompt + gen0).sum())
        if nxt is not None and self.lower_bound_ok:
            floor = self.verify_time(nb, nb, ctx0) + self.overhead  # no step of the run is shorter
            if floor > 0:
                horizon = min(horizon, int((nxt - now) / floor) + 2)
        horizon = max(horizon, 1)
        if self.drafter is None:
            gen = gen0[None, :] + np.arange(horizon + 1)[:, None]
            proposed = accepted = np.zeros((horizon, nb), dtype=np.int64)
        else:
            gen = np.empty((horizon + 1, nb), dtype=np.int64)
            gen[0] = gen0
            first, last = self.first[batch], self.last[batch]
            flat = np.empty((horizon, nb), dtype=np.int64)
            emit = self.step_emit
            g = gen0
            for j in range(horizon):
                f = np.minimum(first + g, last)
                flat[j] = f
                g = g + emit[f]
                gen[j + 1] = g
            proposed, accepted = self.step_prop[flat], self.step_acc[flat]
        if self.sched.decodes_in_budget and int(proposed.sum(axis=1).max()) + nb > self.sched.budget:
            return None  # vLLM V1 would cut decodes to the token budget
        # the run ends with the first step in which a request reaches its output length
        done = (gen[1:] >= out).any(axis=1)
        steps = int(np.argmax(done)) + 1 if done.any() else horizon
        ctx = prompt[None, :] + gen[:steps]
        kv = ctx.sum(axis=1)
        prop_sum = proposed[:steps].sum(axis=1)
        need = -(-(ctx + proposed[:steps]) // self.block_size)
        held = np.maximum.accumulate(np.vstack([st.blocks[batch][None, :], need]), axis=0)
        new_blocks = (held[1:] - held[:-1]).sum(axis=1)
        fits = np.cumsum(new_blocks) <= self.sched.pool.free
        if not fits.all():
            steps = int(np.argmin(fits))  # that step preempts: the step path takes it
            if steps == 0:
                return None
        n_arr = np.full(steps, nb)
        verify = self.verify_time(n_arr, prop_sum[:steps] + nb, kv[:steps])
        if self.drafter is not None:
            n_draft = np.count_nonzero(proposed[:steps], axis=1)
            draft = _draft_times(self.cost, n_draft, prop_sum[:steps], self.k, self._draft_kv(ctx, proposed, steps),
                                 verify)
            if draft is None:
                return None
        else:
            draft = np.zeros(steps)
        duration = draft + verify + self.overhead + 0.0
        if not (np.isfinite(duration).all() and (duration >= 0).all() and (draft >= 0).all()):
            return None  # the step path raises the error naming the profile
        times = np.add.accumulate(np.concatenate([[now], duration]))
        if nxt is not None:
            late = times[1:steps] >= nxt  # a step planned at or after the next arrival pulls it first
            if late.any():
                steps = int(np.argmax(late)) + 1
                times = times[:steps + 1]
        end = float(times[steps])
        if now + (end - now) != end:  # SimPy adds the delay to now: it must land on the same float
            return None
        gen = gen[:steps + 1].copy()
        gen[steps] = np.minimum(gen[steps], out)
        return StepRun(now, end, steps, batch, times, gen, proposed[:steps], accepted[:steps], draft[:steps],
                       kv[:steps], held[steps], new_blocks[:steps])

    def _draft_kv(self, ctx: np.ndarray, proposed: np.ndarray, steps: int) -> np.ndarray:
        """KV tokens of the requests that propose something (the drafter's own sub-batch)."""
        return np.where(proposed[:steps] > 0, ctx[:steps], 0).sum(axis=1)

    def apply(self, run: StepRun) -> None:
        """Write the run's effects: tokens, counters, KV, ITL gaps, step rows, and the last step's finishes."""
        st, outcome = self.st, self.outcome
        batch, L, nb, times = run.batch, run.steps, len(run.batch), run.times
        gen = run.gen
        itl = np.empty((L, nb))
        itl[0] = times[1] - st.last_emit[batch]
        if L > 1:
            itl[1:] = np.diff(times[1:])[:, None]
        outcome.itl_chunks.append(itl.ravel())
        st.last_emit[batch] = run.end
        last = gen[L]
        st.gen[batch] = last
        drafted = self.drafter is not None
        prop_sum = run.proposed.sum(axis=1)
        if drafted:
            st.verify_counts.add_run(batch, L, run.proposed.sum(axis=0), run.accepted.sum(axis=0))
        else:
            st.verify_counts.add_run(batch, L, None, None)
        st.usage[self.drafter if drafted else -1] += nb * L
        pool = self.sched.pool
        used = pool.used + np.cumsum(run.new_blocks)
        total = int(used[-1]) - pool.used
        if total:
            pool.allocate(total)
            st.blocks[batch] = run.blocks
        self._runs.append((outcome.step_no, L, nb, times, run.draft_t, run.kv_tokens, prop_sum,
                           run.accepted.sum(axis=1) if drafted else None, np.diff(gen.sum(axis=1)), used,
                           np.count_nonzero(run.proposed, axis=1) if drafted else None))
        outcome.step_no += L
        out = self.wl.output_len[batch]
        if (last >= out).any():
            outcome.finish(batch[last >= out], run.end)

    def _columns(self) -> dict[str, np.ndarray] | None:
        """The step rows of every run so far, in step order (the draft row, where there is one, first)."""
        runs, self._runs = self._runs, []
        if not runs:
            return None
        L = np.array([r[1] for r in runs])
        nb = np.repeat([r[2] for r in runs], L)
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
