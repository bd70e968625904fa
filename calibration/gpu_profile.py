"""One command to profile catalog models on a CUDA GPU: `python -m calibration.gpu_profile`.

Each model is built from its catalog architecture with random weights (`from_config`, bf16):
step latency does not depend on the weights, so nothing is downloaded. For every model that
fits in GPU memory it sweeps batch size, query tokens per sequence and context length, then
writes linear and table profiles with raw measurements and provenance, ready to commit.
Profiles describe the transformers (eager PyTorch) backend, not vLLM: slower per step at small
batches (Python and kernel-launch overhead), so treat them as an upper bound for serving engines.
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


def profile_models(specs: list[Any], *, device: str, dtype: str, sweep: Any, out_dir: Path,
                   progress: bool = True) -> list[dict[str, Any]]:
    """Sweep each model that fits; write `<model>-<device>-hf-<dtype>[-table].yaml`; return a summary row each."""
    import torch

    from calibration.models.hf_backend import model_from_config
    from calibration.latency_sweep import fit_profiles, provenance, sweep_model
    from simulator.costs.latency import save_profile

    rows = []
    slug = _device_slug(device)
    for spec in specs:
        free = torch.cuda.mem_get_info(torch.device(device))[0] if device.startswith("cuda") else float("inf")
        if not fits(spec, max(sweep.batch_sizes), max(sweep.context_lens) + max(sweep.query_tokens), free):
            print(f"gpu_profile: skipping {spec.name}: does not fit in {free / 2**30:.1f} GiB free", file=sys.stderr)
            rows.append({"model": spec.name, "skipped": "does not fit in memory"})
            continue
        model = model_from_config(hf_config_for(spec), dtype=dtype, device=device, seed=sweep.seed)
        try:
            ms = sweep_model(model, sweep, progress=progress, desc=spec.name)
        finally:
            del model
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        name = f"{spec.name}-{slug}-hf-{dtype}"
        prov = provenance("hf", device, dtype, notes=f"random weights from the catalog architecture of {spec.name}; "
                          f"transformers eager forward with DynamicCache; python -m calibration.gpu_profile")
        fitted = fit_profiles(name, spec.name, ms, prov)
        save_profile(fitted.linear, out_dir / f"{name}.yaml")
        save_profile(fitted.table, out_dir / f"{name}-table.yaml")
        rows.append({"model": spec.name, "profile": name, **fitted.report})
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
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_profile: no CUDA device here; run it on a GPU machine (or pass --device cpu for a dry run)",
              file=sys.stderr)
        return 2
    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    sweep = SweepConfig(batch_sizes=ints(args.batch_sizes), query_tokens=ints(args.query_tokens),
                        context_lens=ints(args.context_lens), warmup=args.warmup, repeats=args.repeats)
    specs = [get_model(m.strip()) for m in args.models.split(",") if m.strip()]
    rows = profile_models(specs, device=args.device, dtype=args.dtype, sweep=sweep, out_dir=Path(args.out_dir),
                          progress=not args.no_progress)
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
