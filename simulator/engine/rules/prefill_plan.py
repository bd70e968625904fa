"""Prefill planning: the prompt chunks a step schedules (partial prefills first, then FIFO admission within the
token budget, max_num_seqs and free KV), and taking such a plan (docs/architecture.md)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from simulator.engine.rules.kv import blocks_for


class PrefillLimits(NamedTuple):
    """The server limits a prefill plan keeps to."""

    max_num_seqs: int  # running requests at most
    max_num_batched_tokens: int  # the step's token budget
    chunked: bool  # a prompt may be split into chunks of the budget left
    block_size: int  # KV tokens per block
    lookahead: int = 0  # KV slots a running request holds beyond its scheduled tokens (rules/kv.lookahead_slots)


class PlanBuffers(NamedTuple):
    """Caller-given buffers a plan is written into, one entry per chunk in the order the step schedules them."""

    request: np.ndarray  # int64: the request the chunk belongs to
    tokens: np.ndarray  # int64: prompt tokens it processes
    blocks: np.ndarray  # int64: KV blocks it allocates
    new: np.ndarray  # bool: admitted from the waiting queue by this step
    last: np.ndarray  # bool: ends the prompt (samples the first output token)


class PlanSums(NamedTuple):
    """How many chunks a plan holds, their prompt tokens, their KV (cached tokens + chunk) and their attention's
    token pairs (chunk x (cached + chunk), a structured step model's prefill_attn)."""

    count: int
    tokens: int
    kv: int
    attn: int


def plan_buffers(size: int) -> PlanBuffers:
    """Empty buffers for plans of at most `size` chunks (at least the partial prefills plus the queue offered)."""
    return PlanBuffers(np.zeros(size, np.int64), np.zeros(size, np.int64), np.zeros(size, np.int64),
                       np.zeros(size, np.bool_), np.zeros(size, np.bool_))


def plan_prefills(limits, partial, n_partial, queue, n_queue, n_running, tokens_used, free, prompt, gen,
                  prefill_left, prefill_done, blocks, out):
    """Partial prefills (`partial[:n_partial]`, admission order) take their next chunk where its KV fits (with the
    lookahead slots of a running request), then `queue[:n_queue]` is admitted FIFO while sequences, budget and KV
    last (a request with nothing computed reserves no lookahead: vLLM's effective_lookahead_tokens is 0 for it);
    writes `out`, commits nothing."""
    budget = limits.max_num_batched_tokens - tokens_used
    bs = limits.block_size
    n = 0
    tokens = 0
    kv = 0
    attn = 0
    for j in range(n_partial):
        i = partial[j]
        left = prefill_left[i]
        c = min(left, budget) if limits.chunked else left  # the whole prompt unless chunked
        if c <= 0:  # nothing left (a decoding request) or no budget left
            continue
        ends = c == left
        # the last chunk: +1 token slot; a running request: its lookahead slots too
        need = blocks_for(prefill_done[i] + c + (1 if ends else 0) + limits.lookahead, bs) - blocks[i]
        if need > free:  # skipped this step; later requests may still fit
            continue
        need = max(need, 0)
        free -= need
        budget -= c
        out.request[n], out.tokens[n], out.blocks[n], out.new[n], out.last[n] = i, c, need, False, ends
        n += 1
        tokens += c
        kv += prefill_done[i] + c
        attn += c * (prefill_done[i] + c)
    running = n_running
    for q in range(n_queue):
        if running >= limits.max_num_seqs or budget <= 0:
            break
        i = queue[q]
        total = prompt[i] + gen[i]  # a recompute after preemption prefills the output so far too
        c = min(total, budget) if limits.chunked else total
        if c > budget and (n > 0 or tokens_used > 0):
            break  # an oversized (unchunked) prefill runs alone rather than never; FIFO: nobody overtakes it
        ends = c == total
        need = blocks_for(c + (1 if ends else 0), bs)
        if need > free:
            break
        free -= need
        budget -= c
        running += 1
        out.request[n], out.tokens[n], out.blocks[n], out.new[n], out.last[n] = i, c, need, True, ends
        n += 1
        tokens += c
        kv += c  # nothing of a newly admitted request is cached yet
        attn += c * c
    return PlanSums(n, tokens, kv, attn)


def take_prefill_plan(plan, count, prompt, gen, blocks, prefill_left, prefill_done, first_sched, now):
    """Commit `plan[:count]`: each chunk's KV blocks are held; a new request starts its prompt (prompt + output so
    far left, nothing cached) and keeps its first scheduling time. Returns the blocks allocated."""
    allocated = 0
    for j in range(count):
        i = plan.request[j]
        blocks[i] += plan.blocks[j]
        allocated += plan.blocks[j]
        if plan.new[j]:
            prefill_left[i] = prompt[i] + gen[i]
            prefill_done[i] = 0
            if np.isnan(first_sched[i]):
                first_sched[i] = now
    return allocated
