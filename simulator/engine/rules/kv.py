"""Paged KV: the blocks a request needs to hold its tokens (the one block rule of every path), a step's growth
of each request's blocks to what its tokens need, and vLLM V1's lookahead slots for proposers that keep KV."""
from __future__ import annotations

# drafter kinds (traces/bundle.py DRAFTER_KINDS) whose vLLM proposer keeps its own KV, so the scheduler reserves
# lookahead slots for it: eagle/eagle3/mtp (SpeculativeConfig.use_eagle) and draft models (uses_draft_model)
LOOKAHEAD_KINDS = frozenset({"eagle", "mtp", "draft_model", "int8", "truncated"})


def lookahead_slots(kinds, k, scheduler):
    """KV slots vLLM V1 reserves per running request beyond the tokens it schedules (vllm/v1/core/sched/
    scheduler.py Scheduler.__init__: num_lookahead_tokens = num_speculative_tokens when the speculative config
    use_eagle() or uses_draft_model(); Scheduler.schedule passes it to kv_cache_manager.allocate_slots for every
    running request; vllm/v1/core/kv_cache_manager.py allocate_slots holds computed + new + lookahead). `kinds`:
    the drafter kinds the policy uses, `k`: its largest k. n-gram, suffix and synthetic drafters reserve none,
    and neither does the draftsim scheduler."""
    if scheduler != "vllm-v1" or k <= 0 or not any(kind in LOOKAHEAD_KINDS for kind in kinds):
        return 0
    return int(k)


def decode_hold(ctx, proposed, lookahead):
    """KV tokens a decoding request holds in a step: its context (computed tokens + the one sampled last step),
    the drafts it verifies and the lookahead slots (vLLM allocate_slots: computed + 1 + drafts + lookahead).
    Scalars or integer arrays."""
    return ctx + proposed + lookahead


def peak_tokens(prompt, output, k, lookahead):
    """The most KV tokens a request ever holds: its last decode (prompt + output - 1 context, k drafts at least the
    one slot a recompute's last prefill chunk adds) plus the lookahead slots. The up-front fit check
    (Scheduler.check_fits) reads it."""
    return prompt + output - 1 + max(1, k) + lookahead


def blocks_for(tokens, block_size):
    """ceil(tokens / block_size): the KV blocks that hold `tokens` tokens (ints or integer arrays)."""
    return -(-tokens // block_size)


def kv_growth(idx, n, tokens, blocks, block_size, extra):
    """The blocks each of idx[:n] must add to hold tokens[j] (none when it holds enough: KV never shrinks while a
    request runs), into extra[j]. Returns their sum."""
    total = 0
    for j in range(n):
        e = blocks_for(tokens[j], block_size) - blocks[idx[j]]
        if e < 0:
            e = 0
        extra[j] = e
        total += e
    return total


def preempt_keep(run, n, extra, blocks, free):
    """How many of run[:n] (admission order) keep running when each must grow by extra[q] blocks and `free` are
    free: the most L for which the growth of run[:L] fits in the free blocks plus those run[L:] hold, which are
    preempted (newest first, by recompute). n when everything fits."""
    held = 0
    for q in range(n):
        held += blocks[run[q]]
    keep = 0
    grow = 0
    for q in range(n + 1):
        if grow <= free + held:  # run[:q] grows, run[q:] gives its blocks back
            keep = q
        if q < n:
            grow += extra[q]
            held -= blocks[run[q]]
    return keep


def preempt_suffix(run, keep, n, blocks, prefill_left, prefill_done, preemptions):
    """Recompute preemption of run[keep:n]: each gives back its KV blocks and its computed tokens (its prompt and
    output so far are prefilled again when it is readmitted) and counts a preemption. Returns the blocks freed."""
    freed = 0
    for q in range(keep, n):
        i = run[q]
        freed += blocks[i]
        blocks[i] = 0
        prefill_left[i] = 0  # set on readmission (rules/prefill_plan.take_prefill_plan)
        prefill_done[i] = 0
        preemptions[i] += 1
    return freed


def add_blocks(idx, n, extra, blocks):
    """Commit a growth: each of idx[:n] holds extra[j] more blocks."""
    for j in range(n):
        blocks[idx[j]] += extra[j]
