"""Latency profiles of the live batched server, measured with the very forward it serves with.

Each point times `BatchedLM.forward` (padding, mask, per-sequence KV copy included) for a batch of
`num_seqs` sequences of `context` cached tokens appending `query` tokens each; the median of the
repeats is kept with the machine load, then the simulator's own fits (linear and table) are made.
Run in the process, on the core and with the thread count the live run uses ("the same setup").
"""
from __future__ import annotations

from dataclasses import dataclass

from calibration.live.batched_kv import BatchedLM
from calibration.latency_sweep import machine_load, time_repeats
from simulator.costs.latency import Measurement


@dataclass(frozen=True)
class Grid:
    """Points to time: decode/verify points (batch x query x context) and prefill points (batch x prompt)."""

    batch_sizes: tuple[int, ...] = (1, 2, 4)
    query_tokens: tuple[int, ...] = (1, 3)
    context_lens: tuple[int, ...] = (160, 320)
    prefill_lens: tuple[int, ...] = (160, 320)
    prefill_batches: tuple[int, ...] = (1,)
    warmup: int = 1
    repeats: int = 3


def measure_points(lm: BatchedLM, grid: Grid, query_tokens: tuple[int, ...] | None = None, seed: int = 0
                   ) -> list[Measurement]:
    """Time every grid point of one model; `query_tokens` overrides the grid's (drafters: (1,))."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = int(lm.model.config.vocab_size)
    cap = max(grid.context_lens + grid.prefill_lens) + max(grid.query_tokens) + 8
    out = []

    def ids(n):
        return [int(x) for x in rng.integers(0, vocab, size=n)]

    for b in grid.batch_sizes:
        for c in grid.context_lens:
            seqs = [lm.new_seq(cap) for _ in range(b)]
            lm.forward(seqs, [ids(c) for _ in range(b)], last_only=True)
            for q in query_tokens or grid.query_tokens:
                toks = [ids(q) for _ in range(b)]

                def step():
                    lm.forward(seqs, toks)
                    for s in seqs:
                        s.truncate(c)

                load = machine_load()
                med, spread, _ = time_repeats(step, grid.warmup, grid.repeats)
                out.append(Measurement(num_seqs=b, batched_tokens=b * q, kv_tokens=b * (c + q), seconds=med,
                                       spread=spread, repeats=grid.repeats, load=round(max(load, machine_load()), 3),
                                       extra={"query_tokens": q, "context_len": c}))
    for b in grid.prefill_batches:
        for p in grid.prefill_lens:
            prompts = [ids(p) for _ in range(b)]

            def prefill():
                lm.forward([lm.new_seq(cap) for _ in range(b)], prompts, last_only=True)

            load = machine_load()
            med, spread, _ = time_repeats(prefill, grid.warmup, grid.repeats)
            out.append(Measurement(num_seqs=b, batched_tokens=b * p, kv_tokens=b * p, seconds=med, spread=spread,
                                   repeats=grid.repeats, load=round(max(load, machine_load()), 3),
                                   extra={"query_tokens": p, "context_len": 0, "prefill": True}))
    return out
