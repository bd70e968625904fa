"""Drive one vLLM engine (one mode) under open-loop Poisson load, in-process, with the step recorder on.

Runs under vLLM's interpreter (`python -m calibration.vllm_steps.loadgen PLAN.json OUT.json`, started by
calibration/vllm_steps/validate_run.py). One `AsyncLLM` (the engine `vllm serve` wraps, minus HTTP) serves:
a warm-up request, the calibration groups (disjoint prompts submitted together, one batch shape each; their
best requests/s is the measured capacity; staggered groups send one request every gap_s seconds instead), then one Poisson arrival stream per load level at
`fraction x capacity` requests/s. Each request is its own asyncio task that sleeps until its send time,
submits, and timestamps every streamed output (wall clock, comparable with the step records). AsyncLLM
rather than `vllm serve` + HTTP client: on 2 shared CPU cores a second process of JSON/HTTP work would
perturb the engine it measures; request arrival and scheduling inside the engine core are the same.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def spec_metrics_json(completion: Any) -> dict[str, Any] | None:
    """vLLM's per-request spec-decode metrics of one completion as a plain dict (None without them)."""
    sd = getattr(completion, "spec_decode_metrics", None)
    if sd is not None and not isinstance(sd, dict):
        sd = sd.to_dict() if hasattr(sd, "to_dict") else dict(vars(sd))
    return sd


async def _one(engine: Any, params: Any, rid: str, prompt: list[int], send_at: float | None) -> dict[str, Any]:
    """Submit at wall time `send_at` (now when None); every streamed output's time and token count."""
    if send_at is not None:
        await asyncio.sleep(max(0.0, send_at - time.time()))
    sent = time.time()
    times, counts, last = [], [], None
    async for out in engine.generate({"prompt_token_ids": prompt}, params, rid):
        c = out.outputs[0]
        if len(c.token_ids) > (counts[-1] if counts else 0):
            times.append(time.time())
            counts.append(len(c.token_ids))
        last = out
    c = last.outputs[0]
    return {"id": rid, "send_time": sent, "chunk_times": times, "chunk_tokens": counts,
            "prompt_token_ids": list(prompt), "output_token_ids": list(c.token_ids),
            "finish_reason": c.finish_reason, "spec_decode_metrics": spec_metrics_json(c)}


async def _drive(plan: dict[str, Any], progress: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Calibration groups, then the load levels; `progress` gets the phases finished so far after each one, so
    a run stopped by its time limit keeps what it measured."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    spec = plan["spec"]
    extra: dict[str, Any] = {}
    if spec is not None:
        extra = {"speculative_config": spec, "per_request_spec_decode_metrics": "detailed"}
    args = AsyncEngineArgs(model=plan["model"], dtype=plan["dtype"], max_model_len=plan["max_model_len"],
                           max_num_seqs=plan["max_num_seqs"], max_num_batched_tokens=plan["max_num_batched_tokens"],
                           seed=plan["seed"], enforce_eager=True, enable_prefix_caching=False,
                           async_scheduling=False, gpu_memory_utilization=plan["memory_utilization"],
                           disable_log_stats=True, **extra)
    engine = AsyncLLM.from_engine_args(args)
    try:
        def params(max_tokens: int, min_tokens: int = 0) -> Any:
            return SamplingParams(temperature=0.0, max_tokens=max_tokens, min_tokens=min_tokens, seed=plan["seed"])

        groups = []
        for g in plan["calibration"]:
            t0, wall0 = time.perf_counter(), time.time()
            p = params(g["max_tokens"], g["min_tokens"])
            gap = g.get("gap_s", 0.0)  # > 0: one request every gap_s seconds (prefills mixed into decodes)
            if g.get("gap_steps"):  # in units of the batch-1 group's seconds per output token
                one = next(x for x in groups if x["name"] == "batch1")
                gap = g["gap_steps"] * one["wall_seconds"] / one["max_tokens"]
            rows = await asyncio.gather(*(_one(engine, p, f"{g['name']}-{i}", ids, wall0 + i * gap if gap else None)
                                          for i, ids in enumerate(g["prompts"])))
            groups.append({"name": g["name"], "wall_start": wall0, "wall_seconds": time.perf_counter() - t0,
                           "gap_s": gap, "max_tokens": g["max_tokens"], "requests": rows})
            progress({"calibration": groups, "levels": []})
        measured = [len(g["requests"]) / g["wall_seconds"] for g in groups
                    if g["name"] != "warmup" and not g["gap_s"]]
        capacity = max(measured)
        levels = []
        load = plan["load"]
        for li, (fraction, unit_offsets) in enumerate(zip(load["fractions"], load["unit_offsets"])):
            rate = fraction * capacity
            await asyncio.sleep(load["pause_s"])
            start, load_before = time.time() + 0.05, os.getloadavg()[0]
            p = params(load["max_tokens"], load.get("min_tokens", 0))
            rows = await asyncio.gather(*(_one(engine, p, f"L{li}-{i}", ids, start + off / rate)
                                          for i, (ids, off) in enumerate(zip(load["prompts"][li], unit_offsets))))
            levels.append({"fraction": fraction, "rate": rate, "wall_start": start, "load_before": load_before,
                           "load_after": os.getloadavg()[0], "requests": rows})
            progress({"capacity_req_s": capacity, "calibration": groups, "levels": levels})
        return {"capacity_req_s": capacity, "capacity_by_group": measured, "calibration": groups, "levels": levels}
    finally:
        engine.shutdown()


def main(plan_path: str, out_path: str) -> int:
    from calibration.vllm_steps.launch import prepare_environment

    version = prepare_environment()
    from traces.atomic import atomic_write_text

    from calibration.vllm_steps.record_files import read_json_record

    plan = read_json_record(plan_path, "run plan")
    t0 = time.perf_counter()
    partial = Path(out_path).with_suffix(".partial.json")

    def progress(done: dict[str, Any]) -> None:
        atomic_write_text(partial, json.dumps({**done, "complete": False}))

    result = asyncio.run(_drive(plan, progress))
    result.update(vllm_version=version, spec=plan["spec"], dtype=plan["dtype"],
                  wall_seconds=time.perf_counter() - t0)
    atomic_write_text(Path(out_path), json.dumps(result))
    partial.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m calibration.vllm_steps.loadgen PLAN.json OUT.json  (internal: run under vLLM)")
    sys.exit(main(sys.argv[1], sys.argv[2]))
