"""experiments/sweep/backends.py: a stopped process pool leaves no thread of its own behind."""
from __future__ import annotations

import threading
import time
from concurrent.futures import process as futures_process

from experiments.sweep.backends import WorkerPool


def _slow(payload: dict) -> int:
    time.sleep(payload["seconds"])
    return 0


def test_a_stopped_pool_has_joined_its_manager_thread():
    """stop() kills the workers and waits for the pool's manager thread to end: left running, it closed its wake-up
    pipe while the interpreter's exit wrote to it (a SIGTERM's one line followed by "Exception ignored in:
    <module 'threading'> ... Bad file descriptor")."""
    pool = WorkerPool(2)
    results = pool.run(_slow, [{"seconds": 0.0}] + [{"seconds": 60.0}] * 3)
    assert next(results) == (0, 0)
    pool.stop()
    managers = [t for t in threading.enumerate() if isinstance(t, futures_process._ExecutorManagerThread)]
    assert managers == [], managers
