"""One command to profile catalog models on a CUDA GPU: `python -m calibration.gpu_profile`.

Each model is built from its catalog architecture with random weights (`from_config`, bf16):
step latency does not depend on the weights, so nothing is downloaded. For every model that
fits in GPU memory it sweeps the verify-width surface (batch size x query tokens per sequence x
context length: q = 1 is a decode step, q = k + 1 a verify of k drafts) and lone prompts
(`--prefill-lens`), then writes linear and table profiles of the decode/verify surface and a
structured profile (simulator/costs/step_model.py: decode, verify and prefill priced apart) of all of it,
with raw measurements and provenance, ready to commit. `--drafters` models are swept at one query
token per sequence (a draft model's step) and written as drafter profiles.
On CUDA each step is captured once as a CUDA graph and the replays are timed (no host launch cost, as a
serving engine replays its captured steps; `extra.launch` says per point); the kernels are still
transformers' unfused ones, not vLLM's, so treat the profiles as an upper bound for serving engines.
The project never needs a GPU to build or test: tests run this module on CPU with tiny sizes.
"""
from __future__ import annotations

import argparse
import gc
import re
import sys
from pathlib import Path
from typing import Any

DEFAULT_MODELS = ["llama3.2-1b", "qwen3-0.6b", "llama3.1-8b", "qwen3-8b", "qwen3-32b"]
DEFAULT_DRAFTERS = ["llama3.2-1b", "qwen3-0.6b"]


def verify_shape(batch: int, query: int, context: int):
    """The step shape of `batch` sequences verifying `query` - 1 drafts each over `context` cached tokens."""
    from simulator.costs.step_model import StepShape

    return StepShape(decode_seqs=batch, draft_tokens=batch * (query - 1), decode_kv=batch * context)


def with_shapes(ms: list) -> list:
    """The sweep's measurements with their step shape in extra (what the structured fit reads)."""
    from dataclasses import asdict

    for m in ms:
        m.extra["shape"] = asdict(verify_shape(m.num_seqs, m.extra["query_tokens"], m.extra["context_len"]))
    return ms


def measure_prefill(model: Any, batch: int, tokens: int, sweep: Any) -> Any:
    """Time a lone prompt pass: `batch` prompts of `tokens` tokens from an empty cache (a prefill step)."""
    from dataclasses import asdict

    import torch
    from transformers import DynamicCache

    from calibration.latency_sweep import machine_load, replayable, time_repeats
    from calibration.models.gqa_attention import timed_attention
    from calibration.models.kv_cache import cache_argument
    from simulator.costs.latency import Measurement
    from simulator.costs.step_model import StepShape

    dev = next(model.parameters()).device
    gen = torch.Generator().manual_seed(sweep.seed)
    ids = torch.randint(0, int(model.config.vocab_size), (batch, tokens), generator=gen).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    cache_kw = cache_argument(model)
    with torch.inference_mode(), timed_attention(model):
        def step():
            model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_kw: DynamicCache(config=model.config)})

        timed, launch = replayable(step, dev)
        load_before = machine_load()
        med, spread, _ = time_repeats(timed, sweep.warmup, sweep.repeats, sync)
        del timed
    shape = StepShape(0, 0, 0, prefill_seqs=batch, prefill_tokens=batch * tokens, prefill_kv=batch * tokens,
                      prefill_attn=batch * tokens * tokens)
    return Measurement(num_seqs=batch, batched_tokens=batch * tokens, kv_tokens=batch * tokens, seconds=med,
                       spread=spread, repeats=sweep.repeats, load=round(max(load_before, machine_load()), 3),
                       extra={"prefill_len": tokens, "shape": asdict(shape), "launch": launch})


def hf_config_for(spec: Any) -> Any:
    """A transformers config with the catalog architecture (Llama or Qwen3 families)."""
    import transformers

    common = dict(hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
                  num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
                  num_key_value_heads=spec.num_kv_heads, head_dim=spec.head_dim, vocab_size=spec.vocab_size,
                  tie_word_embeddings=spec.tie_word_embeddings, max_position_embeddings=32768)
    name = spec.name.lower()
    if name.startswith("qwen3") and not spec.is_moe:
        return transformers.Qwen3Config(**common)
    if name.startswith(("llama", "vicuna", "smollm")):
        return transformers.LlamaConfig(**common)
    raise ValueError(f"gpu_profile: no transformers config mapping for {spec.name!r} (Llama and dense Qwen3 only)")


def fits(spec: Any, batch: int, context: int, free_bytes: float, reserve: float = 0.85) -> bool:
    """Weights + KV of the largest point (+ logits) within `reserve` of free memory."""
    kv = spec.kv_bytes_per_token() * batch * context
    logits = batch * 8 * spec.vocab_size * 4
    return spec.weight_bytes + kv + logits < reserve * free_bytes


def _device_slug(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        raw = torch.cuda.get_device_name(torch.device(device))
        m = re.search(r"(H200|H100|A100|L40S|L4|A10G|B200|GH200|RTX ?\w+)", raw)
        return (m.group(1) if m else raw).lower().replace(" ", "")
    return "cpu"


def _outputs(out_dir: Path, name: str, drafter: bool) -> list[Path]:
    """The files one model's profiling writes."""
    if drafter:
        return [out_dir / f"{name}-drafter.yaml", out_dir / f"{name}-drafter-table.yaml"]
    return [out_dir / f"{name}.yaml", out_dir / f"{name}-table.yaml", out_dir / f"{name}-structured.yaml"]


def profile_models(specs: list[Any], *, device: str, dtype: str, sweep: Any, out_dir: Path,
                   progress: bool = True, prefill_lens: list[int] | tuple[int, ...] = (),
                   drafter_specs: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Sweep each model that fits; write `<model>-<device>-hf-<dtype>[-table|-structured].yaml` (targets) and
    `<model>-<device>-hf-<dtype>-drafter[-table].yaml` (drafters, one query token); return a summary row each."""
    import torch

    from calibration.models.hf_backend import model_from_config
    from calibration.latency_sweep import fit_profiles, provenance, sweep_model
    from simulator.costs.latency import save_profile

    from simulator.costs.step_model import phase_mape, select_form

    rows = []
    slug = _device_slug(device)
    jobs = [(spec, False) for spec in specs] + [(spec, True) for spec in drafter_specs]
    taken = [p for spec, drafter in jobs for p in _outputs(out_dir, f"{spec.name}-{slug}-hf-{dtype}", drafter)
             if p.exists()]
    if taken:  # checked before any measuring: a user's profiles are never overwritten
        raise FileExistsError(f"gpu_profile: {', '.join(map(str, taken))} exist(s); choose another --out-dir")
    for spec, drafter in jobs:
        free = torch.cuda.mem_get_info(torch.device(device))[0] if device.startswith("cuda") else float("inf")
        queries = [1] if drafter else sweep.query_tokens
        longest = max(max(sweep.context_lens) + max(queries), max(prefill_lens, default=0))
        if not fits(spec, max(sweep.batch_sizes), longest, free):
            print(f"gpu_profile: skipping {spec.name}: does not fit in {free / 2**30:.1f} GiB free", file=sys.stderr)
            rows.append({"model": spec.name, "skipped": "does not fit in memory"})
            continue
        model = model_from_config(hf_config_for(spec), dtype=dtype, device=device, seed=sweep.seed)
        try:
            ms = with_shapes(sweep_model(model, sweep, query_tokens=queries, progress=progress, desc=spec.name))
            pre = [] if drafter else [measure_prefill(model, 1, n, sweep) for n in prefill_lens]
        finally:
            del model
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        name = f"{spec.name}-{slug}-hf-{dtype}" + ("-drafter" if drafter else "")
        grid = (f"batch {sweep.batch_sizes} x query tokens {queries} x context {sweep.context_lens}"
                + (f"; lone prompts of {list(prefill_lens)} tokens" if pre else ""))
        prov = provenance("hf", device, dtype, notes=f"random weights from the catalog architecture of {spec.name}; "
                          "transformers eager forward over a static KV cache of random keys and values, "
                          "grouped-query attention reading each KV head once (calibration/models/gqa_attention.py), "
                          "timed as CUDA-graph replays where the step could be captured (extra.launch per point); "
                          f"python -m calibration.gpu_profile; "
                          f"{'drafter step (one query token per sequence); ' if drafter else ''}grid: {grid}; "
                          f"warmup {sweep.warmup}, median of {sweep.repeats}, seed {sweep.seed}")
        fitted = fit_profiles(name, spec.name, ms, prov)
        save_profile(fitted.linear, out_dir / f"{name}.yaml")
        save_profile(fitted.table, out_dir / f"{name}-table.yaml")
        row = {"model": spec.name, "profile": name, **fitted.report}
        if not drafter:
            structured, report = select_form(f"{name}-structured", ms + pre, seed=sweep.seed, model=spec.name,
                                             provenance=prov)
            save_profile(structured, out_dir / f"{name}-structured.yaml")
            row["structured"] = {"form": report["form"], "mape_percent_by_phase": phase_mape(structured, ms + pre)}
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    from calibration.latency_sweep import SweepConfig
    from traces.catalog import get_model

    p = argparse.ArgumentParser(prog="python -m calibration.gpu_profile", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="catalog model names, comma separated")
    p.add_argument("--out-dir", default="traces/data/profiles")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128")
    p.add_argument("--query-tokens", default="1,2,4,8")
    p.add_argument("--context-lens", default="256,1024,4096")
    p.add_argument("--prefill-lens", default="128,512,2048", help="lone prompt lengths (empty: none)")
    p.add_argument("--drafters", default=",".join(DEFAULT_DRAFTERS),
                   help="catalog models swept as draft models (one query token per sequence; empty: none)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    from calibration.models.hf_backend import require_device

    def ints(option: str) -> list[int]:
        text = getattr(args, option.replace("-", "_"))
        try:
            return [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--{option}: expected comma-separated integers, got {text!r}") from None

    try:  # bad input: one line naming it, exit 2
        require_device(args.device)
        sweep = SweepConfig(batch_sizes=ints("batch-sizes"), query_tokens=ints("query-tokens"),
                            context_lens=ints("context-lens"), warmup=args.warmup, repeats=args.repeats)
        specs = [get_model(m.strip()) for m in args.models.split(",") if m.strip()]
        drafters = [get_model(m.strip()) for m in args.drafters.split(",") if m.strip()]
        rows = profile_models(specs, device=args.device, dtype=args.dtype, sweep=sweep, out_dir=Path(args.out_dir),
                              progress=not args.no_progress, prefill_lens=ints("prefill-lens"),
                              drafter_specs=drafters)
    except (ValueError, FileExistsError) as e:
        print(f"gpu_profile: {e}", file=sys.stderr)
        return 2
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
