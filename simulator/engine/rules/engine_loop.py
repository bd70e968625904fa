"""vLLM V1's engine loop (server `scheduler: vllm-v1`; vllm/v1/engine/core.py run_busy_loop): the time between one
busy step's outputs and the next step's inputs, and how much of it async scheduling hides (docs/architecture.md)."""
from __future__ import annotations


def engine_loop_gap(busy, gap_s, n_running, n_waiting):
    """After a busy step, while requests are running or waiting, `gap_s` passes before the input queue is read
    (arrivals during it join the next step); otherwise none."""
    if busy and gap_s > 0.0 and (n_running > 0 or n_waiting > 0):
        return gap_s
    return 0.0


def overlapped_gap(gap_s, forward_s):
    """Async scheduling (server `async_scheduling: true`; vllm/v1/engine/core.py step_with_batch_queue with
    AsyncScheduler): the host work of the next step runs while this step's forward (`forward_s`, the step's whole
    device time) runs, so only what exceeds the forward is left as a gap: a step's period is max(forward, host)."""
    if gap_s > forward_s:
        return gap_s - forward_s
    return 0.0
