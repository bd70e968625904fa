"""vLLM V1's engine loop (server `scheduler: vllm-v1`; vllm/v1/engine/core.py run_busy_loop): the time between one
busy step's outputs and the next step's inputs (docs/architecture.md)."""
from __future__ import annotations


def engine_loop_gap(busy, gap_s, n_running, n_waiting):
    """After a busy step, while requests are running or waiting, `gap_s` passes before the input queue is read
    (arrivals during it join the next step); otherwise none."""
    if busy and gap_s > 0.0 and (n_running > 0 or n_waiting > 0):
        return gap_s
    return 0.0
