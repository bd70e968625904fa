"""`draftsim calibrate suffix-cost`: time the suffix-decoding proposer per decode step and fit a host-side profile.

One timed call is one decode step for a batch of b sequences with c-token contexts: each sequence appends its
newly sampled token to its local and global counts and speculates (traces/suffix_decoding.py, the same work per
step as vLLM's proposer, in Python rather than ArcticInference's C++, so it prices this pass, not vLLM's).
`backend="arctic"` times ArcticInference's own SuffixDecodingCache instead (what vLLM runs; optional, imported only
then, never a dependency). Points are (num_seqs = b, batched_tokens = tokens proposed in the call, kv_tokens =
b * c), each with the machine load when taken; the profile is fitted like the n-gram one (`whole_proposal`).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from calibration.latency_sweep import SweepConfig, fit_profiles, machine_load, provenance, time_repeats
from simulator.costs.profile_records import Measurement
from traces.suffix_decoding import SuffixConfig, SuffixDecodingCache

VOCAB = 32  # a small alphabet so that suffixes recur and the proposer walks real paths
BACKENDS = ("python", "arctic")


class _ArcticCache:
    """ArcticInference's SuffixDecodingCache behind this module's cache interface (vLLM's call pattern)."""

    def __init__(self, cfg: SuffixConfig) -> None:
        try:
            from arctic_inference.suffix_decoding import SuffixDecodingCache as Real
        except ImportError as e:
            raise ValueError("suffix cost backend 'arctic' needs arctic_inference importable (pip install "
                             f"arctic-inference in a separate environment): {e}") from None
        self.cfg = cfg
        self.real = Real(max_tree_depth=cfg.max_tree_depth, max_cached_requests=cfg.max_cached_requests)

    def start_request(self, seq_id: int, prompt) -> None:
        self.real.start_request(seq_id, np.asarray(prompt, dtype=np.int32))

    def add_active_response(self, seq_id: int, tokens) -> None:
        self.real.add_active_response(seq_id, [int(t) for t in tokens])

    def speculate(self, seq_id: int, pattern):
        c = self.cfg
        return self.real.speculate(seq_id, np.asarray(pattern, dtype=np.int32), max_spec_tokens=c.k,
                                   max_spec_factor=c.max_spec_factor, min_token_prob=c.min_token_prob)


def _make_cache(cfg: SuffixConfig, backend: str):
    if backend not in BACKENDS:
        raise ValueError(f"suffix cost backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    return SuffixDecodingCache(cfg) if backend == "python" else _ArcticCache(cfg)


def sweep_suffix(cfg: SweepConfig, suffix: SuffixConfig, backend: str = "python") -> list[Measurement]:
    """One measurement per (batch size, context length) of cfg; contexts drawn from cfg.seed."""
    _make_cache(suffix, backend)  # a missing backend fails before any timing
    rng = np.random.default_rng(cfg.seed)
    out = []
    for b in cfg.batch_sizes:
        for c in cfg.context_lens:
            cache = _make_cache(suffix, backend)
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
                          model: str = "any", backend: str = "python") -> tuple[Path, dict]:
    """Sweep, fit and save the linear profile `name` to `out` (a .yaml path); returns the path and fit report."""
    from simulator.costs.latency import save_profile

    ms = sweep_suffix(cfg, suffix, backend)
    what = "traces/suffix_decoding.py" if backend == "python" else "ArcticInference SuffixDecodingCache"
    prov = provenance(backend, "cpu", "int32", notes=f"suffix-decoding proposer {asdict(suffix)}, "
                      f"{what}; one append + speculate per sequence; warmup={cfg.warmup}; "
                      f"repeats={cfg.repeats}; draftsim calibrate suffix-cost")
    fitted = fit_profiles(name, model, ms, prov)
    return save_profile(fitted.linear, out), fitted.report
