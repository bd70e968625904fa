"""The server's queues over arrays: the running requests (admission order), the waiting queue (the preempted
requests first, in order, then the arrivals not yet admitted), a step's prefill plan over them, admission,
preemption back to the queue and finish (docs/architecture.md).

The waiting queue is `requeued[:nq]` then `arrived[admit:ptr]` (`arrived`: requests in the order they reached the
server, `ptr` of them pulled; None when they reach it in index order, 0, 1, ..., as the compiled kernels number
them). A request preempted leaves the running requests for the queue's front; one admitted
is taken from the queue's head, so the preempted run again before any new arrival.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.rules.prefill_plan import plan_prefills


def queue_window(max_num_seqs, out, n_run, requeued, nq, arrived, admit, ptr):
    """The waiting queue's first max_num_seqs - n_run entries (admission cannot take more), copied to `out`;
    returns how many."""
    m = max(0, min(nq + ptr - admit, max_num_seqs - n_run))
    for t in range(m):
        if t < nq:
            out[t] = requeued[t]
        elif arrived is None:  # in index order
            out[t] = admit + t - nq
        else:
            out[t] = arrived[admit + t - nq]
    return m


def plan_step_prefills(limits, plan, window, tokens_used, allow_new, run, n_run, requeued, nq, arrived, admit, ptr,
                       free, prompt, gen, prefill_left, prefill_done, blocks):
    """The prompt chunks a step schedules after `tokens_used` decode/draft tokens (rules/prefill_plan.plan_prefills):
    the running requests with prompt left continue (a decoding one offers no chunk), then, when `allow_new`, the
    waiting queue's window is admitted. Writes `plan` (and the window to `window`), commits nothing; returns its
    PlanSums."""
    m = queue_window(limits.max_num_seqs, window, n_run, requeued, nq, arrived, admit, ptr) if allow_new else 0
    return plan_prefills(limits, run, n_run, window, m, n_run, tokens_used, free, prompt, gen, prefill_left,
                         prefill_done, blocks, plan)


def admit_planned(plan, count, run, n_run, requeued, nq, admit):
    """The requests plan[:count] admits (its `new` chunks, the queue's head in order) join the running requests;
    they leave the queue, the preempted first. Returns (n_run, nq, admit)."""
    new = 0
    for j in range(count):
        if plan.new[j]:
            run[n_run] = plan.request[j]
            n_run += 1
            new += 1
    taken = min(new, nq)
    for t in range(nq - taken):
        requeued[t] = requeued[t + taken]
    return n_run, nq - taken, admit + new - taken


def requeue_preempted(run, keep, n_run, requeued, nq):
    """The preempted requests run[keep:n_run] (their KV already freed: rules/kv.preempt_suffix) lead the waiting
    queue, in admission order, before those preempted earlier; the running requests are run[:keep]. Returns the new
    count of preempted requests waiting."""
    moved = n_run - keep
    for t in range(nq - 1, -1, -1):
        requeued[t + moved] = requeued[t]
    for q in range(keep, n_run):
        requeued[q - keep] = run[q]
    return nq + moved


def drop_finished(run, n_run, finish):
    """The running requests without a finish time stay, in order (rules/finish.release_finished stamps the ones that
    finished). Returns how many."""
    w = 0
    for j in range(n_run):
        i = run[j]
        if np.isnan(finish[i]):
            run[w] = i
            w += 1
    return w
