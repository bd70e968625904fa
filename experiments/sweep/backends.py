"""Where sweep points run: in this process (`serial`), on a local process pool (`pool`, the default) or on
Ray (`ray`: a local Ray started on demand, or a running cluster given by address). Every backend calls the
same module-level function on the same payloads and hands back (index, result) pairs as they finish; the
caller orders them by index, so results never depend on which backend ran them or in what order. One
Executor serves every batch of a plan or sweep, so its workers (or local Ray) start once per run, not per batch.
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
    """Kill the pool's workers now (an interrupt or an error must not wait for points in flight), then wait for the
    pool's own thread to see them gone and close its pipes: left running, it raced the interpreter's exit, whose
    wake-up write then met a closed pipe ("Exception ignored in: <module 'threading'> ... Bad file descriptor" after
    the one line a SIGTERM prints). The thread is taken before the first shutdown, which forgets it unjoined."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:
        proc.join(timeout=5)
    if manager is not None:  # the workers are dead: it sees the pool broken, closes its pipes and ends
        manager.join(timeout=30)


class WorkerPool:
    """One process pool for every batch of a plan or sweep: started at the first batch (not per batch, which
    re-imported everything, reloaded the compiled kernel and re-parsed the trace bundles in every fresh worker),
    at most 2 x workers points in flight so an interrupt loses little work. The workers die with this process
    (die_with_parent) and are killed when it is interrupted or a point fails; `close()` ends them once idle."""

    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"--workers: expected an integer >= 1, got {workers}")
        self.workers = workers
        self.started = 0  # executors created (one per session unless an error stopped the pool)
        self._pool: ProcessPoolExecutor | None = None

    def run(self, evaluate: Evaluate, payloads: Sequence[dict[str, Any]]) -> Iterator[tuple[int, Any]]:
        """(index, result) of every payload as it finishes, on this session's workers."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=die_with_parent,
                                             initargs=(os.getpid(),))
            self.started += 1
        try:
            yield from _drain(self._pool, evaluate, payloads, self.workers)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill the workers now (an interrupt or an error must not wait for points in flight)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            _stop_workers(pool)

    def close(self) -> None:
        """End the idle workers (every batch has been drained)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
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


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ValueError("--backend ray: Ray is not installed; pip install 'draftsim[ray]' (or use --backend pool)") \
            from None
    return ray


class Executor:
    """Batches of points on one backend for a whole plan or sweep: the process pool (WorkerPool) or a local Ray
    is started at the first batch that needs it and kept until `close()` (or `stop()` on an error or an
    interrupt); a with-block does either. Ray: `address` None starts a local Ray (shut down at the end), "auto" or
    "ray://host:10001" joins a running cluster whose workers have draftsim installed; a Ray already running in
    this process is used and left running."""

    def __init__(self, backend: str = "pool", workers: int | None = None, address: str | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"--backend: expected one of {BACKENDS}, got {backend!r}")
        if address is not None and backend != "ray":
            raise ValueError("--address names a Ray cluster; use it with --backend ray")
        self.backend, self.address = backend, address
        n = (workers or default_workers()) if backend == "pool" else 1
        self.pool = WorkerPool(n) if n != 1 else None  # pool of one worker: run in this process
        self._ray_started = False

    def run(self, evaluate: Evaluate, payloads: Sequence[dict[str, Any]]) -> Iterator[tuple[int, Any]]:
        """(index, result) for every payload, in completion order."""
        if not payloads:
            return iter(())
        if self.backend == "ray":
            return self._run_ray(evaluate, payloads)
        if self.pool is not None:
            return self.pool.run(evaluate, payloads)
        return run_serial(evaluate, payloads)

    def _run_ray(self, evaluate: Evaluate, payloads: Sequence[dict[str, Any]]) -> Iterator[tuple[int, Any]]:
        ray = _import_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                     **({} if self.address else {"num_cpus": default_workers()}))
            self._ray_started = True
        task = ray.remote(num_cpus=1)(evaluate)
        refs = {task.remote(payload): i for i, payload in enumerate(payloads)}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)

    def close(self) -> None:
        """Every batch is done: end the idle workers, shut down a Ray this executor started."""
        if self.pool is not None:
            self.pool.close()
        self._stop_ray()

    def stop(self) -> None:
        """An error or an interrupt: kill the workers now, shut down a Ray this executor started."""
        if self.pool is not None:
            self.pool.stop()
        self._stop_ray()

    def _stop_ray(self) -> None:
        if self._ray_started:
            self._ray_started = False
            _import_ray().shutdown()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close()
        else:
            self.stop()
        return False


def execute(evaluate: Evaluate, payloads: Sequence[dict[str, Any]], backend: str = "pool", workers: int | None = None,
            address: str | None = None) -> Iterator[tuple[int, Any]]:
    """(index, result) for every payload, in completion order, on an Executor of its own (one batch)."""
    return _one_batch(Executor(backend, workers, address), evaluate, payloads)


def _one_batch(ex: Executor, evaluate: Evaluate, payloads: Sequence[dict[str, Any]]) -> Iterator[tuple[int, Any]]:
    with ex:
        yield from ex.run(evaluate, payloads)
