"""vLLM general plugin: record every engine step of the V1 scheduler (see records.py for the format).

Registered as the `vllm.general_plugins` entry point `draftsim_steps` (pyproject.toml), so it runs inside
`EngineCore.__init__`, in the engine-core process of `LLM(...)` and of `vllm serve` alike. It does nothing
unless DRAFTSIM_VLLM_STEPS names the output file (one engine core per run: data-parallel engines would
share the path). Files are created on the first step, so processes without a scheduler or model runner
(the API server) write nothing.

Wrapped: `Scheduler.schedule()` (timing starts; per-request context and proposal lengths are read, the
latter before schedule() clears them), `Scheduler.update_from_output()` (emitted tokens are read before
the original trims them at a stop; timing ends after it) and `Scheduler.shutdown()` (closes the file);
in the worker (its own process on CPU), `GPUModelRunner.execute_model()` + `sample_tokens()` (forward
time) and `propose_draft_token_ids()` (drafter time), to PATH.worker.PID, synchronised on CUDA.
With async scheduling the next schedule() overlaps this step's execution, so durations are only
engine-step times with it off; the header records which.
"""
from __future__ import annotations

import atexit
import os
import time
from typing import Any

from calibration.vllm_steps.records import STEPS_ENV, JsonlWriter, RequestStep, StepRecord

_state: dict[str, Any] = {"writer": None, "step": 0, "pending": {}, "worker": None, "entry": None, "seen": set()}


def register() -> None:
    """Entry point: install the wrappers when DRAFTSIM_VLLM_STEPS is set (zero cost otherwise)."""
    path = os.environ.get(STEPS_ENV)
    if not path or _state.get("installed"):
        return
    _state["installed"] = True
    _state["path"] = path
    from vllm.v1.core.sched.scheduler import Scheduler

    _wrap_scheduler(Scheduler)
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:  # a platform without the GPU model runner: no drafter timing
        return
    _wrap_model_runner(GPUModelRunner)


def _writer(sched: Any) -> JsonlWriter:
    w = _state["writer"]
    if w is None:
        import vllm

        from calibration.vllm_steps.launch import installed_vllm

        cfg = sched.vllm_config
        spec = cfg.speculative_config
        header = {"vllm_version": getattr(vllm, "__version__", "?"), "distribution": installed_vllm()[0],
                  "pid": os.getpid(), "model": cfg.model_config.model, "dtype": str(cfg.model_config.dtype),
                  "max_num_seqs": cfg.scheduler_config.max_num_seqs,
                  "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
                  "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
                  "block_size": cfg.cache_config.block_size,
                  "spec_method": None if spec is None else spec.method,
                  "num_speculative_tokens": None if spec is None else spec.num_speculative_tokens,
                  "threads": os.environ.get("OMP_NUM_THREADS") or os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
                  "torch_threads": _torch_threads(), "cpu_count": os.cpu_count(),
                  "load_at_start": os.getloadavg()[0]}
        w = _state["writer"] = JsonlWriter(_state["path"], header)
        atexit.register(w.close)
    return w


def _kv_blocks(sched: Any) -> tuple[int | None, int | None]:
    pool = getattr(getattr(sched, "kv_cache_manager", None), "block_pool", None)
    if pool is None:
        return None, None
    total = int(pool.num_gpu_blocks)
    return total - int(pool.get_num_free_blocks()), total


def _wrap_scheduler(cls: Any) -> None:
    orig_schedule, orig_update, orig_shutdown = cls.schedule, cls.update_from_output, cls.shutdown

    def schedule(self, *args, **kwargs):
        t0, wall = time.perf_counter(), time.time()
        proposed = {r.request_id: len(r.spec_token_ids) for r in self.running if r.spec_token_ids}
        out = orig_schedule(self, *args, **kwargs)
        reqs = {}
        for rid, n in out.num_scheduled_tokens.items():
            r = self.requests[rid]
            reqs[rid] = (r, n, r.num_computed_tokens - n, r.num_tokens, r.num_prompt_tokens, proposed.get(rid, 0),
                         len(out.scheduled_spec_decode_tokens.get(rid, ())))
        _state["pending"][id(out)] = (t0, wall, reqs)  # keyed: with async scheduling two steps are in flight
        return out

    def update_from_output(self, scheduler_output, model_runner_output):
        pending = _state["pending"].pop(id(scheduler_output), None)
        if pending is None:  # scheduled before the plugin was installed
            return orig_update(self, scheduler_output, model_runner_output)
        t0, wall, reqs = pending
        sampled = model_runner_output.sampled_token_ids
        index = model_runner_output.req_id_to_index
        emitted, before = {}, {}
        for rid, (r, *_rest) in reqs.items():
            i = index.get(rid)
            emitted[rid] = len(sampled[i]) if sampled and i is not None else 0
            before[rid] = r.num_output_tokens
        result = orig_update(self, scheduler_output, model_runner_output)
        t1 = time.perf_counter()
        steps, seen = [], _state["seen"]
        for rid, (r, n, computed, num_tokens, prompt_len, prop, drafted) in reqs.items():
            e = emitted[rid]
            first = rid not in seen  # its first step: its temperature and arrival time
            sp = getattr(r, "sampling_params", None)
            steps.append(RequestStep(id=rid, scheduled=n, computed_before=computed, num_tokens=num_tokens,
                                     prompt_len=prompt_len, proposed=prop, drafted=drafted,
                                     accepted=max(e - 1, 0) if drafted and e else 0, emitted=e,
                                     kept=r.num_output_tokens - before[rid], finished=r.is_finished(),
                                     temperature=float(sp.temperature) if first and sp is not None else None,
                                     arrival=float(r.arrival_time) if first else None))
            seen.add(rid)
            if r.is_finished():
                seen.discard(rid)
        used, total = _kv_blocks(self)
        rec = StepRecord(step=_state["step"], wall_start=wall, duration=t1 - t0, num_running=len(self.running),
                         num_waiting=len(self.waiting), kv_blocks_used=used, kv_blocks_total=total,
                         draft_seconds=None, load=os.getloadavg()[0], requests=steps)
        if steps:
            _state["step"] += 1
            w = _writer(self)
            w.add(rec.to_dict())
            if self.get_num_unfinished_requests() == 0:
                w.flush()  # idle: every finished request's steps are on disk
        return result

    def shutdown(self, *args, **kwargs):
        try:
            return orig_shutdown(self, *args, **kwargs)
        finally:
            if _state["writer"] is not None:
                _state["writer"].close()

    cls.schedule, cls.update_from_output, cls.shutdown = schedule, update_from_output, shutdown


def _worker_writer() -> JsonlWriter:
    w = _state["worker"]
    if w is None:
        w = _state["worker"] = JsonlWriter(f"{_state['path']}.worker.{os.getpid()}", {"pid": os.getpid()}, batch=1)
        atexit.register(_close_worker)
    return w


def _write_entry() -> None:
    entry, _state["entry"] = _state["entry"], None
    if entry is not None and entry["scheduled"] > 0:  # the engine records only steps that scheduled tokens
        _worker_writer().add(entry)


def _close_worker() -> None:
    _write_entry()
    if _state["worker"] is not None:
        _state["worker"].close()


def _wrap_model_runner(cls: Any) -> None:
    """Time each engine step in the worker: execute_model + sample_tokens, and the drafter's propose call.
    One line per step, written when sample_tokens ends (or when the next execute_model starts)."""
    orig_execute, orig_sample, orig_propose = cls.execute_model, cls.sample_tokens, cls.propose_draft_token_ids

    def timed(orig, key):
        def wrapper(self, *args, **kwargs):
            sync = _device_sync(self)
            if orig is orig_execute:
                _write_entry()  # an execute_model that returned its output without a sample_tokens call
                so = args[0] if args else kwargs["scheduler_output"]
                _state["entry"] = {"scheduled": int(so.total_num_scheduled_tokens), "forward_seconds": 0.0,
                                   "draft_seconds": None}
            entry = _state["entry"]
            sync()
            t0 = time.perf_counter()
            try:
                return orig(self, *args, **kwargs)
            finally:
                sync()  # on CUDA calls only enqueue kernels: wait so the time is the work's
                if entry is not None:
                    entry[key] = (entry[key] or 0.0) + time.perf_counter() - t0
                if orig is orig_sample:
                    _write_entry()
        return wrapper

    cls.execute_model = timed(orig_execute, "forward_seconds")
    cls.sample_tokens = timed(orig_sample, "forward_seconds")
    cls.propose_draft_token_ids = timed(orig_propose, "draft_seconds")
    _wrap_worker_shutdown()


def _wrap_worker_shutdown() -> None:
    """Close the worker file when the worker shuts down (the GPU worker, which the CPU worker extends)."""
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except ImportError:
        return
    orig = Worker.shutdown

    def shutdown(self, *args, **kwargs):
        try:
            return orig(self, *args, **kwargs)
        finally:
            _close_worker()

    Worker.shutdown = shutdown


def _device_sync(runner: Any):
    device = getattr(runner, "device", None)
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _torch_threads() -> int | None:
    try:
        import torch

        return int(torch.get_num_threads())
    except ImportError:
        return None
