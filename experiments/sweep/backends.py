"""Where sweep points run: in this process (`serial`), on a local process pool (`pool`, the default) or on
Ray (`ray`: a local Ray started on demand, or a running cluster given by address). Every backend calls the
same module-level function on the same payloads and hands back (index, result) pairs as they finish; the
caller orders them by index, so results never depend on which backend ran them or in what order.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

BACKENDS = ("serial", "pool", "ray")

Evaluate = Callable[[dict[str, Any]], Any]


def default_workers() -> int:
    """Worker processes for the pool: the CPUs this process may use (2 on the CI machine class)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def run_serial(evaluate: Evaluate, payloads: Sequence[dict[str, Any]]) -> Iterator[tuple[int, Any]]:
    for i, payload in enumerate(payloads):
        yield i, evaluate(payload)


def run_pool(evaluate: Evaluate, payloads: Sequence[dict[str, Any]], workers: int) -> Iterator[tuple[int, Any]]:
    """A process pool; at most 2 x workers points in flight so an interrupt loses little work."""
    if workers < 1:
        raise ValueError(f"--workers: expected an integer >= 1, got {workers}")
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        pending: dict[Any, int] = {}
        todo = iter(enumerate(payloads))
        for i, payload in todo:
            pending[pool.submit(evaluate, payload)] = i
            if len(pending) >= 2 * workers:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield pending.pop(fut), fut.result()
            for i, payload in todo:
                pending[pool.submit(evaluate, payload)] = i
                if len(pending) >= 2 * workers:
                    break
    except BaseException:  # Ctrl-C (or a failed point): stop the workers now instead of finishing their points
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def run_ray(evaluate: Evaluate, payloads: Sequence[dict[str, Any]], address: str | None) -> Iterator[tuple[int, Any]]:
    """Ray tasks, one per point: `address` None starts a local Ray (stopped afterwards); "auto" or
    "ray://host:10001" joins a running cluster whose workers have draftsim installed."""
    try:
        import ray
    except ImportError:
        raise ValueError("--backend ray: Ray is not installed; pip install 'draftsim[ray]' (or use --backend pool)") \
            from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 **({} if address else {"num_cpus": default_workers()}))
    try:
        task = ray.remote(num_cpus=1)(evaluate)
        refs = {task.remote(payload): i for i, payload in enumerate(payloads)}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)
    finally:
        if started:
            ray.shutdown()


def execute(evaluate: Evaluate, payloads: Sequence[dict[str, Any]], backend: str = "pool", workers: int | None = None,
            address: str | None = None) -> Iterator[tuple[int, Any]]:
    """(index, result) for every payload, in completion order."""
    if backend not in BACKENDS:
        raise ValueError(f"--backend: expected one of {BACKENDS}, got {backend!r}")
    if address is not None and backend != "ray":
        raise ValueError("--address names a Ray cluster; use it with --backend ray")
    if not payloads:
        return iter(())
    if backend == "serial":
        return run_serial(evaluate, payloads)
    if backend == "pool":
        n = workers or default_workers()
        return run_serial(evaluate, payloads) if n == 1 else run_pool(evaluate, payloads, n)
    return run_ray(evaluate, payloads, address)
