"""The scheduler variants of one server (the registry SCHEDULERS) and its settings, checked when it is made.

The scheduling itself (FIFO admission within max_num_seqs, the token budget and free KV blocks; paged KV growth;
preemption of the newest request by recompute; prefill chunks; PSD's sub-batch sides) is the rules of
simulator/engine/rules/, which the kernels run (docs/architecture.md). `prefill` = "mixed": prefills join
decode/verify steps (vLLM V1, or V0 with chunked prefill); "separate": vLLM V0 without chunked prefill (MineDraft): a
step that schedules prefills schedules no decodes.

`rules` names a variant of the scheduler registry `SCHEDULERS` (server `scheduler:`): "vllm-v1", the default,
follows vLLM V1's `Scheduler.schedule()` (vLLM 0.32, vllm/v1/core/sched/scheduler.py) where it matters for timing
(VLLM_V1_RULES); "draftsim" is the older rule set that paper reproductions (MineDraft's V0 runs) keep.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.engine.kv_pool import BlockPool
from simulator.engine.rules.decode_budget import decode_side_budget
from simulator.engine.rules.kv import peak_tokens
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


class Scheduler:
    """A server's scheduler settings, checked when it is made: the variant's decode budget, vLLM V1's lookahead KV
    slots and the KV pool, which the kernels read (their step is the scheduling rules of
    simulator/engine/rules/); and the up-front check that every request can run."""

    def __init__(self, wl: EngineWorkload, pool: BlockPool, *, max_num_batched_tokens: int, chunked: bool,
                 prefill: PrefillMode = "mixed", rules: SchedulerRules = DEFAULT_SCHEDULER, lookahead: int = 0):
        variant = scheduler_variant(rules)
        if variant.always_chunked and (not chunked or prefill != "mixed"):
            raise ValueError(f"scheduler: {rules!r} needs chunked prefill with prefill: mixed")
        if prefill not in ("mixed", "separate"):
            raise ValueError(f"prefill: expected 'mixed' or 'separate', got {prefill!r}")
        if prefill == "separate" and chunked:
            raise ValueError("prefill: 'separate' (prefill-only steps, vLLM V0) cannot be combined with "
                             "chunked_prefill, which mixes prefill chunks into decode steps; use prefill: mixed")
        self.wl, self.pool = wl, pool
        self.budget = max_num_batched_tokens
        self.chunked = chunked
        self.decode_budget = decode_side_budget(max_num_batched_tokens, variant.decodes_in_budget)
        self.lookahead = lookahead  # KV slots per running request beyond its tokens (rules/kv.lookahead_slots)

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
