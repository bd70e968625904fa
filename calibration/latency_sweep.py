"""`draftsim calibrate latency`: time real forward steps and fit latency profiles.

For each (batch size, query tokens per sequence, context length) point, a static KV cache of
the context (random keys and values, written in place) is built once, then one forward of the
query tokens is timed `repeats` times after `warmup` runs (the cache is rewound after each; its length whole
16-token blocks, calibration/models/kv_cache.py), under an attention that reads each cached key and value once
in decodes and verifies alike (calibration/models/gqa_attention.py). Each point keeps its median, spread
(p90 - p10)/2, the threads used and the machine load when taken. Profiles are fitted linear
(non-negative least squares) and kept as tables too, with the raw measurements and provenance.
With `verify_mask="tree"` the query tokens of each sequence form a draft tree verified in one forward (a 4-D
tree-attention mask, built inside the timed step as a server builds it per step), for tree verifies of up to 64
tokens per sequence.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from simulator.costs.latency import LinearProfile, Measurement, Provenance, TableProfile, fit_linear


@dataclass
class SweepConfig:
    """The grid and the timing discipline."""

    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    query_tokens: list[int] = field(default_factory=lambda: [1, 2, 4, 6])  # 1..k+1 per sequence
    context_lens: list[int] = field(default_factory=lambda: [64, 256, 512])
    warmup: int = 2
    repeats: int = 5
    threads: int = 1
    seed: int = 0
    verify_mask: str = "causal"  # "tree": the query tokens form a draft tree (tree_parents), one 4-D mask per step

    def __post_init__(self) -> None:
        for name in ("batch_sizes", "query_tokens", "context_lens"):
            vals = getattr(self, name)
            if not vals or any(int(v) < 1 for v in vals):
                raise ValueError(f"latency sweep: {name} must be a non-empty list of integers >= 1, got {vals}")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"latency sweep: repeats must be >= 1 and warmup >= 0, got {self.repeats}, {self.warmup}")
        if self.verify_mask not in VERIFY_MASKS:
            raise ValueError(f"latency sweep: verify_mask must be one of {', '.join(VERIFY_MASKS)}, "
                             f"got {self.verify_mask!r}")


VERIFY_MASKS = ("causal", "tree")


def tree_parents(query: int) -> np.ndarray:
    """The draft tree a tree verify of `query` tokens times: token 0 is the root (the last verified token), token
    i > 0 hangs below token (i - 1) // 2 (a complete binary tree in breadth-first order). Any tree of q tokens
    costs the same dense attention; only the mask's pattern differs."""
    return (np.arange(query, dtype=np.int64) - 1) // 2


def tree_attention(parents: np.ndarray, context: int, batch: int, dtype, device):
    """A tree verify's 4-D additive mask [batch, 1, q, slots] over the timed cache's slots
    (kv_cache.cache_slots(context + q); each query token sees the context, its ancestors and itself) and its
    position ids [batch, q] (context + depth): the form transformers takes as a custom 4-D attention mask."""
    import torch

    from calibration.models.kv_cache import cache_slots

    parents = np.asarray(parents, dtype=np.int64)
    q = parents.size
    sees = np.zeros((q, q), dtype=bool)
    depth = np.zeros(q, dtype=np.int64)
    for i in range(q):  # parents come before children
        if parents[i] >= 0:
            if parents[i] >= i:
                raise ValueError(f"tree token {i}'s parent {parents[i]} must come before it")
            sees[i] = sees[parents[i]]
            depth[i] = depth[parents[i]] + 1
        sees[i, i] = True
    slots = cache_slots(context + q)
    allowed = torch.zeros((q, slots), dtype=torch.bool, device=device)
    allowed[:, :context] = True
    allowed[:, context:context + q] = torch.as_tensor(sees, device=device)
    mask = torch.zeros((q, slots), dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    pos = torch.as_tensor(context + depth, device=device)
    return mask.expand(batch, 1, q, slots), pos.unsqueeze(0).expand(batch, q)


def machine_load() -> float:
    """1-minute load average per core (1.0 = every core busy)."""
    return os.getloadavg()[0] / (os.cpu_count() or 1)


def time_repeats(fn: Callable[[], Any], warmup: int, repeats: int, sync: Callable[[], None] = lambda: None
                 ) -> tuple[float, float, list[float]]:
    """Median and spread (p90 - p10)/2 of `repeats` timed calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    arr = np.asarray(times)
    return float(np.median(arr)), float((np.percentile(arr, 90) - np.percentile(arr, 10)) / 2), times


def replayable(step: Callable[[], Any], device: Any) -> tuple[Callable[[], Any], str]:
    """What to time for `step`: on CUDA one CUDA-graph replay of it (the GPU's time without the host's launch
    cost, as a serving engine replays its captured steps), else `step` itself; and which of the two ("cuda-graph",
    "eager"). A step that cannot be captured is timed eagerly."""
    import torch

    if getattr(device, "type", str(device)) != "cuda":
        return step, "eager"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture (torch's CUDA-graph recipe)
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            step()
    except RuntimeError:
        torch.cuda.synchronize()
        return step, "eager"
    return graph.replay, "cuda-graph"


def measure_model_step(model, batch: int, query: int, context: int, cfg: SweepConfig, vocab: int) -> Measurement:
    """Time one forward of `query` new tokens per sequence over a cached context of `context` tokens (a static
    cache of random keys and values, written in place: calibration/models/kv_cache.py)."""
    import torch

    from calibration.models.kv_cache import cache_argument, check_written, random_static_cache, rewind

    dev = next(model.parameters()).device
    gen = torch.Generator().manual_seed(cfg.seed)
    q_ids = torch.randint(0, vocab, (batch, query), generator=gen).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        cache = random_static_cache(model, batch, context, room=query, seed=cfg.seed)
        cache_kw = {cache_argument(model): cache}
        pos = torch.arange(context, context + query, device=dev).unsqueeze(0).expand(batch, -1)
        parents = tree_parents(query)
        dtype = next(model.parameters()).dtype
        if not dtype.is_floating_point:
            dtype = torch.float32

        def forward():
            if cfg.verify_mask == "tree":
                mask, tree_pos = tree_attention(parents, context, batch, dtype, dev)
                model(input_ids=q_ids, use_cache=True, position_ids=tree_pos, attention_mask=mask, **cache_kw)
            else:
                model(input_ids=q_ids, use_cache=True, position_ids=pos, **cache_kw)

        def step():
            forward()
            rewind(cache, query)  # drop the query tokens again: their slots are overwritten next time

        where = f"latency sweep (batch {batch}, query {query}, context {context})"
        forward()
        check_written(cache, context + query, where)
        rewind(cache, query)
        timed, launch = replayable(step, dev)
        load_before = machine_load()
        med, spread, _ = time_repeats(timed, cfg.warmup, cfg.repeats, sync)
        check_written(cache, context, where)
        del cache, cache_kw, timed
    return Measurement(num_seqs=batch, batched_tokens=batch * query, kv_tokens=batch * (context + query),
                       seconds=med, spread=spread, repeats=cfg.repeats, load=round(max(load_before, machine_load()), 3),
                       extra={"query_tokens": query, "context_len": context, "threads": cfg.threads,
                              "mask": cfg.verify_mask, "launch": launch})


def sweep_model(model, cfg: SweepConfig, *, query_tokens: list[int] | None = None, progress: bool = True,
                desc: str = "latency") -> list[Measurement]:
    """Measure every grid point of one model (query_tokens overrides the config's, e.g. [1] for drafters)."""
    import torch
    from tqdm import tqdm

    from calibration.models.gqa_attention import timed_attention

    torch.set_num_threads(cfg.threads)
    vocab = int(model.config.vocab_size)
    grid = [(b, q, c) for b in cfg.batch_sizes for q in (query_tokens or cfg.query_tokens) for c in cfg.context_lens]
    with timed_attention(model):
        return [measure_model_step(model, b, q, c, cfg, vocab)
                for b, q, c in tqdm(grid, desc=desc, disable=not progress)]


def sweep_ngram(ngram, cfg: SweepConfig) -> list[Measurement]:
    """Time the n-gram proposer for a batch of sequences (CPU lookups, one per sequence)."""
    rng = np.random.default_rng(cfg.seed)
    out = []
    for b in cfg.batch_sizes:
        for c in cfg.context_lens:
            ctxs = [rng.integers(0, 500, size=c) for _ in range(b)]
            med, spread, _ = time_repeats(lambda: [ngram.propose(x) for x in ctxs], cfg.warmup, cfg.repeats)
            out.append(Measurement(num_seqs=b, batched_tokens=b, kv_tokens=b * c, seconds=med, spread=spread,
                                   repeats=cfg.repeats, load=round(machine_load(), 3),
                                   extra={"context_len": c, "threads": 1}))
    return out


def provenance(backend: str, device: str, dtype: str, notes: str = "") -> Provenance:
    """Where a measured profile came from, with library versions and the machine."""
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        import torch
        import transformers

        versions.update(torch=str(torch.__version__), transformers=str(transformers.__version__))
        if device.startswith("cuda") and torch.cuda.is_available():
            device = f"{device} ({torch.cuda.get_device_name(0)})"
    except ImportError:
        pass
    if device == "cpu":
        device = f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return Provenance(source="measured", backend=backend, device=device, dtype=dtype,
                      date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), versions=versions,
                      notes=notes)


@dataclass
class FittedProfiles:
    """Linear and table profiles of one model, with the fit report."""

    linear: LinearProfile
    table: TableProfile
    report: dict[str, Any]


def fit_profiles(name: str, model_name: str, measurements: list[Measurement], prov: Provenance) -> FittedProfiles:
    """Fit linear (all terms) and table profiles; report MAPE overall and when each term is left out."""
    from simulator.costs.latency import TERMS, mape

    full = fit_linear(name, measurements, model=model_name, provenance=prov)
    without = {}
    for t in TERMS:
        rest = tuple(x for x in TERMS if x != t)
        without[t] = round(fit_linear(name, measurements, rest).mape, 3)
    report = {"mape_percent": round(full.mape, 3), "term_share": {k: round(v, 4) for k, v in full.per_term_share.items()},
              "mape_percent_without_term": without, "points": len(measurements),
              "median_load_per_core": float(np.median([m.load for m in measurements if m.load is not None] or [np.nan]))}
    full.profile.fit.update({"mape_percent_without_term": without})
    table = TableProfile(name=f"{name}-table", measurements=list(measurements), model=model_name, provenance=prov,
                         fit={"kind": "table", "fallback": "linear fit of the same points"})
    report["table_mape_percent"] = round(mape(table, measurements), 3)
    return FittedProfiles(full.profile, table, report)


def calibrate_latency(target: str, drafter_specs: list[str], cfg: SweepConfig, out_dir: str | Path,
                      name: str | None = None, *, dtype: str = "float32", device: str = "cpu",
                      progress: bool = True) -> list[tuple[str, Any]]:
    """`draftsim calibrate latency`: sweep the target's verify step and each drafter's step, fit linear and table
    profiles, save them as `<name>[-<drafter>][-table].yaml` in `out_dir`; returns (profile name, fit) pairs."""
    from calibration.models.drafters import LookupDrafter, int8_kernel_copy
    from calibration.models.loading import load_target
    from simulator.costs.latency import save_profile

    loaded = load_target(target, drafter_specs, dtype=dtype, device=device, threads=cfg.threads)
    lm = loaded.lm
    name = name or f"{lm.name}-{device.split(':')[0]}"
    out = Path(out_dir)
    verify = "target verify step" + (" (tree verify: the query tokens form a complete binary draft tree in "
                                      "breadth-first order, one 4-D tree-attention mask built per step)"
                                      if cfg.verify_mask == "tree" else "")
    jobs = [(name, lm.model, cfg.query_tokens, verify)]
    ngrams = []
    for d in loaded.drafters.values():
        if isinstance(d, LookupDrafter):
            ngrams.append(d)
        elif d.kind == "int8" and device == "cpu":
            jobs.append((f"{name}-{d.name}", int8_kernel_copy(lm.model), [1],
                         f"drafter {d.name} step (one token per sequence), timed with torch dynamic int8 kernels "
                         "(fbgemm); the traces use per-token W8A8 numerics of the same weights"))
        else:
            jobs.append((f"{name}-{d.name}", d.model, [1], f"drafter {d.name} step (one token per sequence)"))
    rows = []
    for prof_name, model, queries, what in jobs:
        job_cfg = cfg if queries is cfg.query_tokens else dataclasses.replace(cfg, verify_mask="causal")
        ms = sweep_model(model, job_cfg, query_tokens=queries, progress=progress, desc=prof_name)
        prov = provenance("hf", device, dtype, notes=f"{what}; threads={cfg.threads}; "
                          f"warmup={cfg.warmup}; repeats={cfg.repeats}; static KV cache of random keys and values, "
                          "grouped-query attention reading each KV head once; draftsim calibrate latency")
        fitted = fit_profiles(prof_name, lm.name, ms, prov)
        save_profile(fitted.linear, out / f"{prof_name}.yaml")
        save_profile(fitted.table, out / f"{prof_name}-table.yaml")
        rows.append((prof_name, fitted))
    for d in ngrams:
        prof_name = f"{name}-{d.name}"
        ms = sweep_ngram(d.ngram, cfg)
        prov = provenance("python", "cpu", "int64", notes=f"n-gram proposer {d.params}; one lookup per sequence")
        fitted = fit_profiles(prof_name, lm.name, ms, prov)
        save_profile(fitted.linear, out / f"{prof_name}.yaml")
        rows.append((prof_name, fitted))
    return rows
