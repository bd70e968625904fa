"""`draftsim calibrate suffix-cost`: time the suffix-decoding proposer per decode step and fit a host-side profile.

One timed call is one decode step for a batch of b sequences with c-token contexts: each sequence appends its
newly sampled token to its local and global counts and speculates (traces/suffix_decoding.py, the same work per
step as vLLM's proposer, in Python rather than ArcticInference's C++, so it prices this pass, not vLLM's).
Points are (num_seqs = b, batched_tokens = tokens proposed in the call, kv_tokens = b * c), each with the machine
load when taken; the profile is fitted like the n-gram one (`whole_proposal` in a config).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from calibration.latency_sweep import SweepConfig, fit_profiles, machine_load, provenance, time_repeats
from simulator.costs.profile_records import Measurement
from traces.suffix_decoding import SuffixConfig, SuffixDecodingCache

VOCAB = 32  # a small alphabet so that suffixes recur and the proposer walks real paths


def sweep_suffix(cfg: SweepConfig, suffix: SuffixConfig) -> list[Measurement]:
    """One measurement per (batch size, context length) of cfg; contexts drawn from cfg.seed."""
    rng = np.random.default_rng(cfg.seed)
    out = []
    for b in cfg.batch_sizes:
        for c in cfg.context_lens:
            cache = SuffixDecodingCache(suffix)
            ctxs = [list(rng.integers(0, VOCAB, size=c)) for _ in range(b)]
            for i, ctx in enumerate(ctxs):
                cache.start_request(i, ctx[:-1])
                cache.add_active_response(i, ctx[-1:])
            proposed = [0]

            def step() -> None:
                total = 0
                for i, ctx in enumerate(ctxs):
                    tok = int(rng.integers(0, VOCAB))
                    ctx.append(tok)
                    cache.add_active_response(i, [tok])
                    total += len(cache.speculate(i, ctx[-suffix.max_tree_depth:]).token_ids)
                proposed[0] = total

            med, spread, _ = time_repeats(step, cfg.warmup, cfg.repeats)
            out.append(Measurement(num_seqs=b, batched_tokens=proposed[0], kv_tokens=b * c, seconds=med,
                                   spread=spread, repeats=cfg.repeats, load=round(machine_load(), 3),
                                   extra={"context_len": c, "threads": 1}))
    return out


def calibrate_suffix_cost(cfg: SweepConfig, suffix: SuffixConfig, out: str | Path, name: str,
                          model: str = "any") -> tuple[Path, dict]:
    """Sweep, fit and save the linear profile `name` to `out` (a .yaml path); returns the path and fit report."""
    from simulator.costs.latency import save_profile

    ms = sweep_suffix(cfg, suffix)
    prov = provenance("python", "cpu", "int64", notes=f"suffix-decoding proposer {asdict(suffix)}, "
                      f"traces/suffix_decoding.py; one append + speculate per sequence; warmup={cfg.warmup}; "
                      f"repeats={cfg.repeats}; draftsim calibrate suffix-cost")
    fitted = fit_profiles(name, model, ms, prov)
    return save_profile(fitted.linear, out), fitted.report
