"""Where sweep points run: in this process (`serial`), on a local process pool (`pool`, the default) or on
Ray (`ray`: a local Ray started on demand, or a running cluster given by address). Every backend calls the
same module-level function on the same payloads and hands back (index, result) pairs as they finish; the
caller orders them by index, so results never depend on which backend ran them or in what order.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
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


PARENT_POLL_S = 0.5  # how often a worker checks that its parent still lives (besides PDEATHSIG on Linux)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """Pool worker initializer: the worker ends when the process that started it ends, however it ends.

    On Linux the kernel sends SIGKILL to the worker when its parent dies (prctl PDEATHSIG, which also covers
    kill -9); everywhere a daemon thread polls the parent's pid, and the parent's death before either was in
    place is caught by the first check. Ctrl-C reaches the whole process group: workers ignore it and the
    parent stops them, so an interrupt prints one line, not one traceback per worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="draftsim-parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(1)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (an interrupt or an error must not wait for points in flight)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:
        proc.join(timeout=5)


def run_pool(evaluate: Evaluate, payloads: Sequence[dict[str, Any]], workers: int) -> Iterator[tuple[int, Any]]:
    """A process pool; at most 2 x workers points in flight so an interrupt loses little work. The workers die
    with this process (die_with_parent) and are killed when it is interrupted or a point fails."""
    if workers < 1:
        raise ValueError(f"--workers: expected an integer >= 1, got {workers}")
    pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        yield from _drain(pool, evaluate, payloads, workers)
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)


def _drain(pool: ProcessPoolExecutor, evaluate: Evaluate, payloads: Sequence[dict[str, Any]],
           workers: int) -> Iterator[tuple[int, Any]]:
    """(index, result) of every payload as it finishes, with at most 2 x workers in flight."""
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
