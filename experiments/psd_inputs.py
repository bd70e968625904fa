"""Inputs of the PSD experiments: a chat-like closed batch and i.i.d. acceptance for the Qwen3 drafters.

Acceptance is ASSUMED, not measured (no Qwen3-32B acceptance traces are available to this project):
per-token rates rise with drafter size, in the range of per-token rates derived from real traces
in SD-FACTS (EAGLE-3 on Llama-3.1-8B: about 0.62-0.68 per token at k = 3). The config states the
rates; change them there. Each request's acc_len at each position is 1 + the number of consecutive
accepted tokens drawn i.i.d. with that rate (capped at `max_acc_len`), so Leviathan's formula holds.
"""
from __future__ import annotations

import numpy as np

from simulator.scenario import SimInputs, inputs_from_traces
from traces.bundle import DrafterTrace, RequestTrace


def iid_acc_len(rng: np.random.Generator, rate: float, n: int, max_acc_len: int = 16) -> np.ndarray:
    """acc_len per position: 1 + consecutive successes at per-token rate `rate`, capped."""
    if not 0 <= rate < 1:
        raise ValueError(f"acceptance rate must be in [0, 1), got {rate!r}")
    if rate == 0:
        return np.ones(n, dtype=np.int32)
    # numpy's geometric(p) counts trials up to the first success; with p = 1 - rate, a "success" is a
    # rejection, so the draw is 1 + accepted tokens.
    return np.minimum(rng.geometric(1.0 - rate, size=n), max_acc_len).astype(np.int32)


def chat_batch(num_requests: int, rates: dict[str, float], *, prompt_median: int, prompt_sigma: float,
               prompt_max: int, output_len: int, seed: int, max_acc_len: int = 16
               ) -> SimInputs:
    """`num_requests` all arriving at t = 0 (an offline batch, as MineDraft's 1000-prompt runs), lognormal
    prompt lengths, a fixed output length, and acceptance per drafter at its stated rate."""
    rng = np.random.default_rng(seed)
    prompts = np.clip(np.round(rng.lognormal(np.log(prompt_median), prompt_sigma, size=num_requests)),
                      8, prompt_max).astype(np.int64)
    traces = []
    for i in range(num_requests):
        drafters = {d: DrafterTrace(acc_len=iid_acc_len(rng, r, output_len, max_acc_len)) for d, r in rates.items()}
        traces.append(RequestTrace(id=f"chat-{i}", prompt_len=int(prompts[i]), output_len=output_len,
                                   drafters=drafters, category="chat"))
    return inputs_from_traces(traces, list(rates))
