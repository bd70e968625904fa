"""vLLM-like scheduler of one server: FIFO admission within max_num_seqs, the token budget and free KV
blocks; paged KV growth; preemption of the newest request by recompute; prefill chunks.

`prefill` = "mixed": prefills join decode/verify steps (vLLM V1, or V0 with chunked prefill);
"separate": vLLM V0 without chunked prefill (MineDraft): a step that schedules prefills schedules no
decodes. PSD sub-batch sides are kept here too (MineDraft's scheduler owns them).

`rules` names a variant of the scheduler registry `SCHEDULERS` (server `scheduler:`): "vllm-v1", the default,
follows vLLM V1's `Scheduler.schedule()` (vLLM 0.32, vllm/v1/core/sched/scheduler.py) where it matters for timing
(VLLM_V1_RULES); "draftsim" is the older rule set that paper reproductions (MineDraft's V0 runs) keep.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from policies.base import NO_DRAFT
from simulator.engine.kv_pool import BlockPool
from simulator.engine.request_state import RequestState
from simulator.engine.rules.decode_budget import decode_side_budget
from simulator.engine.rules.kv import peak_tokens
from simulator.engine.rules.prefill_plan import PlanSums, PrefillLimits, plan_buffers
from simulator.engine.workload_arrays import EngineWorkload

PrefillMode = Literal["mixed", "separate"]
SchedulerRules = str  # a name in SCHEDULERS

VLLM_V1_RULES = {
    "modelled": (
        "chunked prefill always on; a prefill chunk is min(prompt left, token budget left)",
        "one token budget (max_num_batched_tokens) per step shared by decode tokens, draft tokens and prefill "
        "chunks; running requests are served first, in admission order, each taking min(1 + drafts, budget left); "
        "a request cut to 1 token verifies no drafts, one cut to 0 waits for the next step",
        "waiting requests are admitted FIFO after the running ones, while budget, max_num_seqs and free KV blocks "
        "allow, and only in steps that preempted nobody",
        "KV in blocks of the server's block_size (vLLM CPU: 128, CUDA: 16); a verify step reserves slots for "
        "its drafts; when KV runs out the newest running request is preempted and recomputed later",
        "lookahead KV (allocate_slots' num_lookahead_tokens): with an EAGLE/EAGLE-3/MTP or draft-model drafter "
        "every running request (decoding or continuing its prompt) holds k slots beyond its scheduled tokens, "
        "a waiting request admitted with nothing computed none; n-gram and suffix drafters reserve none "
        "(rules/kv.lookahead_slots)",
        "async scheduling (server async_scheduling: true): the next step's host work overlaps this step's "
        "forward, so the engine-loop gap after a step is what exceeds its forward (period = max(forward, host); "
        "rules/engine_loop.overlapped_gap)",
        "proposals: the n-gram proposer and the draft model run once per step for every decoding request and "
        "their time is part of the step (vLLM proposes right after the forward, for the next step: the same "
        "total per step, shifted by one step)",
        "the prefill's last chunk samples the first output token",
    ),
    "not_modelled": (
        "long_prefill_token_threshold / adaptive thresholds (off by default)",
        "max_model_len trimming of draft tokens and lookahead slots near the context limit",
        "async scheduling's one-step lag: a request admitted while a step runs is scheduled by the host work that "
        "overlaps it here (vLLM schedules it one step later); draft tokens as placeholders",
        "prefix caching, encoder budgets, structured output, LoRA, priorities other than FCFS, pipeline and "
        "data parallelism, KV connectors",
        "a partial prefill that was admitted before some decoding request is scheduled after it here "
        "(vLLM walks one running list; draftsim serves decodes first, then partial prefills)",
        "the draft model's own prefill and KV (its time is in the drafter's per-step cost only)",
        "client/API-server overheads (tokenisation, detokenisation, HTTP): the step recorder times engine steps",
    ),
}
DRAFTSIM_RULES = {
    "modelled": (
        "every running request decodes (with all its drafts) every step; only prefill chunks are limited by "
        "max_num_batched_tokens, which they share with the step's decode and draft tokens",
        "chunked prefill off by default (a prompt is prefilled whole in one step); chunked_prefill: true splits it",
        "prefill: separate (vLLM V0 without chunked prefill, as MineDraft runs): a step that schedules prefills "
        "schedules no decodes",
        "waiting requests are admitted FIFO while budget, max_num_seqs and free KV blocks allow, and only in steps "
        "that preempted nobody; KV in blocks, the newest running request preempted by recompute",
        "step_overhead_s is part of every step's time",
    ),
    "not_modelled": (
        "vLLM V1's shared token budget (decodes are never cut or left waiting by it)",
        "vLLM V1's engine-loop gap between busy steps",
    ),
}


@dataclass(frozen=True)
class SchedulerVariant:
    """One named scheduler rule set, selected by a server's `scheduler:` (the registry SCHEDULERS)."""

    name: str
    description: str  # one line, for `draftsim run --help` and the docs
    decodes_in_budget: bool  # decode and draft tokens come out of max_num_batched_tokens, else the decode side's
    # budget is unbounded (rules/decode_budget.decode_side_budget)
    engine_loop_gap: bool  # step_overhead_s passes between busy steps (rules/engine_loop.py), not inside a step
    always_chunked: bool  # chunked prefill always on; prefill: separate and chunked_prefill: false refused
    modelled: tuple[str, ...]
    not_modelled: tuple[str, ...]


SCHEDULERS: dict[str, SchedulerVariant] = {v.name: v for v in (
    SchedulerVariant("vllm-v1", "vLLM V1's scheduler (the default): chunked prefill, one token budget shared by "
                     "decode, draft and prefill tokens, the engine-loop gap between busy steps",
                     decodes_in_budget=True, engine_loop_gap=True, always_chunked=True, **VLLM_V1_RULES),
    SchedulerVariant("draftsim", "draftsim's older rules (paper reproductions: MineDraft's vLLM V0 runs): decodes "
                     "always scheduled, only prefills limited by the token budget; chunked prefill off unless set; "
                     "prefill: separate allowed",
                     decodes_in_budget=False, engine_loop_gap=False, always_chunked=False, **DRAFTSIM_RULES),
)}
DEFAULT_SCHEDULER = "vllm-v1"


def scheduler_variant(name: str) -> SchedulerVariant:
    """The registered scheduler `name`; else ValueError naming the field and the registered names."""
    try:
        return SCHEDULERS[name]
    except (KeyError, TypeError):
        names = [repr(n) for n in sorted(SCHEDULERS)]
        expected = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise ValueError(f"scheduler: expected {expected}, got {name!r}") from None


def describe_schedulers() -> str:
    """One line per registered scheduler: name and description (CLI help, docs)."""
    return "; ".join(f"{v.name}: {v.description}" for v in SCHEDULERS.values())


EMPTY = np.zeros(0, dtype=np.int64)
EMPTY.setflags(write=False)
NO_PLAN = PlanSums(0, 0, 0, 0)


class Scheduler:
    """Admission, KV reservation and preemption over the shared request state."""

    def __init__(self, state: RequestState, wl: EngineWorkload, pool: BlockPool, *, max_num_seqs: int,
                 max_num_batched_tokens: int, chunked: bool, prefill: PrefillMode = "mixed", psd: bool = False,
                 rules: SchedulerRules = DEFAULT_SCHEDULER, lookahead: int = 0):
        variant = scheduler_variant(rules)
        if variant.always_chunked and (not chunked or prefill != "mixed"):
            raise ValueError(f"scheduler: {rules!r} needs chunked prefill with prefill: mixed")
        if prefill not in ("mixed", "separate"):
            raise ValueError(f"prefill: expected 'mixed' or 'separate', got {prefill!r}")
        if prefill == "separate" and chunked:
            raise ValueError("prefill: 'separate' (prefill-only steps, vLLM V0) cannot be combined with "
                             "chunked_prefill, which mixes prefill chunks into decode steps; use prefill: mixed")
        self.state, self.wl, self.pool = state, wl, pool
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.chunked = chunked
        self.separate = prefill == "separate"
        self.psd = psd
        self.decode_budget = decode_side_budget(max_num_batched_tokens, variant.decodes_in_budget)
        self.verify_side = 0  # PSD: the sub-batch verified this step
        self.lookahead = lookahead  # KV slots per running request beyond its tokens (rules/kv.lookahead_slots)
        self.limits = PrefillLimits(max_num_seqs, max_num_batched_tokens, chunked, pool.block_size, lookahead)
        # a plan holds at most max_num_seqs chunks (running ones plus those admitted), and one per request
        self.plan = plan_buffers(max(1, min(max_num_seqs, len(wl.prompt_len))))
        self.window = np.zeros(max(1, max_num_seqs), dtype=np.int64)  # the waiting queue a plan may admit from
        from simulator.engine import compiled_kernel as compiled  # the step rules, compiled (imports numba)

        self.rules = compiled  # rules/kv.py, queue.py, prefill_plan.py, finish.py, psd_sides.py, decode_budget.py

    def check_fits(self, lookahead_tokens: int, max_model_len: int | None = None) -> None:
        """Refuse up front requests that could never run: prompt + output above `max_model_len` (vLLM refuses
        them at the API), or prompt + output + draft lookahead above the whole KV pool; the error counts them."""
        wl = self.wl
        n = len(wl.prompt_len)
        total = wl.prompt_len + wl.output_len
        if max_model_len is not None and n and int(total.max()) > max_model_len:
            over = total > max_model_len
            i = int(total.argmax())
            raise ValueError(
                f"{int(over.sum())} of {n} requests have prompt + output above deployment.max_model_len="
                f"{max_model_len} (the longest: request {wl.request_ids[i]!r}, {int(wl.prompt_len[i])} prompt + "
                f"{int(wl.output_len[i])} output tokens); vLLM refuses them: raise max_model_len or bound the "
                f"workload's lengths")
        # largest KV a request ever asks for: context (prompt + output - 1) plus the tokens drafted on it,
        # or its (re)compute prefill prompt + output, plus the lookahead slots (rules/kv.peak_tokens)
        need = self.pool.blocks_for(peak_tokens(wl.prompt_len, wl.output_len, lookahead_tokens, self.lookahead))
        i = int(need.argmax()) if n else 0
        if n and int(need[i]) > self.pool.total_blocks:
            cap = self.pool.total_blocks * self.pool.block_size
            raise ValueError(
                f"{int((need > self.pool.total_blocks).sum())} of {n} requests need more KV than the server holds "
                f"({self.pool.total_blocks} blocks, {cap} tokens); the largest, request {wl.request_ids[i]!r}, needs "
                f"{int(need[i])} KV blocks ({int(wl.prompt_len[i])} prompt + {int(wl.output_len[i])} output - 1 + "
                f"{max(1, lookahead_tokens)} draft lookahead tokens + {self.lookahead} proposer lookahead slots, "
                f"block size {self.pool.block_size}); "
                f"raise kv_capacity_tokens or lower k")
        if not self.chunked and int(wl.prompt_len.max()) > self.budget:
            i = int(wl.prompt_len.argmax())
            raise ValueError(f"request {wl.request_ids[i]!r} has a {int(wl.prompt_len[i])}-token prompt, more than "
                             f"max_num_batched_tokens={self.budget}; enable chunked_prefill or raise it")

    def fit_decodes(self, proposed: np.ndarray) -> tuple[int, np.ndarray]:
        """Decoding requests (admission order) take 1 + drafts tokens each from the variant's decode budget until
        it runs out (rules/decode_budget.fit_decodes; unbounded under `draftsim` rules, so every decode runs with
        all its drafts). Returns how many are scheduled and their (possibly cut) draft counts."""
        drafts = np.empty_like(proposed)
        n = int(self.rules.fit_decodes(proposed, len(proposed), self.decode_budget, drafts))
        return n, drafts[:n]

    def reserve(self, run: np.ndarray, tokens: np.ndarray) -> tuple[int, bool]:
        """Grow each running request's KV to hold `tokens` (rules.kv.kv_growth; 0 for one that only prefills);
        preempt the newest until it fits: they lead the waiting queue (rules/queue.requeue_preempted), a PSD
        request without its side and proposal (rules/psd_sides.leave_sides).

        `run` is the running requests (admission order). Returns how many keep running, and whether any was
        preempted.
        """
        st, rules = self.state, self.rules
        extra = np.empty(len(run), dtype=np.int64)
        total = rules.kv_growth(run, len(run), tokens, st.blocks, self.pool.block_size, extra)
        if total <= self.pool.free:
            keep = len(run)
        else:
            keep = int(rules.preempt_keep(run, len(run), extra, st.blocks, self.pool.free))
            self.pool.release(int(rules.preempt_suffix(run, keep, len(run), st.blocks, st.prefill_left,
                                                       st.prefill_done, st.preemptions)))
            st.nq = int(rules.requeue_preempted(st.run, keep, st.n_run, st.requeued, st.nq))
            if self.psd:
                rules.leave_sides(st.run, keep, st.n_run, st.sub_batch, st.pending_d, NO_DRAFT)
            st.n_run = keep
            total = int(extra[:keep].sum())
        if total:
            self.pool.allocate(total)
            rules.add_blocks(run, keep, extra, st.blocks)
        return keep, keep < len(run)

    def plan_prefills(self, tokens_used: int, allow_new: bool) -> PlanSums:
        """The prompt chunks a step schedules after `tokens_used` decode/draft tokens, written to `self.plan`,
        changing nothing (rules/queue.plan_step_prefills over the running requests and, when `allow_new`, the
        waiting queue)."""
        st = self.state
        return self.rules.plan_step_prefills(self.limits, self.plan, self.window, tokens_used, allow_new, st.run,
                                             st.n_run, st.requeued, st.nq, st.arrived, st.admit, st.ptr,
                                             self.pool.free, self.wl.prompt_len, st.gen, st.prefill_left,
                                             st.prefill_done, st.blocks)

    def prefills(self, tokens_used: int, allow_new: bool, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Continue partial prefills, then admit waiting requests in FIFO order within budget and KV: the plan of
        `plan_prefills`, taken (rules/prefill_plan.take_prefill_plan), its new requests running
        (rules/queue.admit_planned; under PSD each joins a side: rules/psd_sides.assign_sides)."""
        st, plan, rules = self.state, self.plan, self.rules
        n = int(self.plan_prefills(tokens_used, allow_new).count)
        if not n:
            return EMPTY, EMPTY
        self.pool.allocate(int(rules.take_prefill_plan(plan, n, self.wl.prompt_len, st.gen, st.blocks,
                                                       st.prefill_left, st.prefill_done, st.first_sched, now)))
        n_old = st.n_run
        n_run, nq, admit = rules.admit_planned(plan, n, st.run, st.n_run, st.requeued, st.nq, st.admit)
        st.n_run, st.nq, st.admit = int(n_run), int(nq), int(admit)
        if self.psd:
            rules.assign_sides(st.sub_batch, st.run, n_old, st.n_run, self.verify_side)
        return plan.request[:n].copy(), plan.tokens[:n].copy()

    def preview_prefills(self, tokens_used: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(requests, chunks, how many chunks end their prompt) a mixed step would add after `tokens_used`
        tokens if it preempts nobody; nothing changes (a policy's step estimate, Pricing.estimator)."""
        if self.separate:
            return EMPTY, EMPTY, 0
        n = int(self.plan_prefills(tokens_used, True).count)
        if not n:
            return EMPTY, EMPTY, 0
        plan = self.plan
        return plan.request[:n].copy(), plan.tokens[:n].copy(), int(np.count_nonzero(plan.last[:n]))

    def prefill_only(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Separate mode: admit what fits now; a non-empty result makes this a prefill-only step."""
        if not self.separate:
            return EMPTY, EMPTY
        return self.prefills(0, True, now)

    def finish(self, done: np.ndarray, t: float) -> None:
        """Running requests `done` finished at `t`: their KV freed (rules/finish.release_finished), out of the
        running requests (rules/queue.drop_finished)."""
        st, rules = self.state, self.rules
        self.pool.release(int(rules.release_finished(done, len(done), t, st.finish, st.blocks)))
        st.pending_d[done] = -1
        st.n_run = int(rules.drop_finished(st.run, st.n_run, st.finish))
        st.n_finished += len(done)
