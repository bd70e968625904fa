"""Run one function in a forked child process while this process goes on, and take its result or its error back.

The results folder draws its plots this way beside writing its tables (experiments/report.py): on two cores the
two take the wall time of the longer, not of both. The child is a fork, so it sees this process's data as it is
at `start` (nothing is pickled but the result) and writes the same bytes this process would. Where fork is not
available (not Linux), `start` runs the function at once in this process, so the outputs are the same either way.
"""
from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def can_fork() -> bool:
    """True where a child is forked (Linux); elsewhere the function runs in this process."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def _child(conn, fn: Callable[..., Any], args: tuple, kwargs: dict, parent_pid: int) -> None:
    """The child's whole life: run `fn`, send ("ok", result) or ("error", exception, its traceback text)."""
    from experiments.sweep.backends import die_with_parent  # the pool workers' rule: die with the parent

    gc.freeze()  # the parent's objects: a collection here would walk them and copy every page it touches
    die_with_parent(parent_pid)
    try:
        message = ("ok", fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001  every error goes back to the parent, which raises it
        text = traceback.format_exc()
        try:
            pickle.loads(pickle.dumps(exc))
            message = ("error", exc, text)
        except Exception:  # noqa: BLE001  an exception that does not pickle back: its text stands in for it
            message = ("error", RuntimeError(f"{type(exc).__name__}: {exc}"), text)
    conn.send(message)
    conn.close()


class Beside(Generic[T]):
    """`fn(*args, **kwargs)` running beside this process: `result()` waits for it and returns its value or raises
    its exception (the child's traceback as a note); `stop()` kills it (this process failed, its work is moot)."""

    def __init__(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any):
        self.what = what  # what the child does, for the error when it dies without an answer
        self._proc = None
        self._conn = None
        self._done: tuple | None = None
        if not can_fork():
            try:
                self._done = ("ok", fn(*args, **kwargs))
            except Exception as exc:  # noqa: BLE001  raised by result(), where the forked one's would be
                self._done = ("error", exc, None)
            return
        ctx = multiprocessing.get_context("fork")
        self._conn, child_end = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(child_end, fn, args, kwargs, os.getpid()),
                                 name=f"draftsim-{what}", daemon=True)
        self._proc.start()
        child_end.close()

    def result(self) -> T:
        """The function's value; its exception raised here when it failed."""
        if self._done is None:
            try:
                self._done = self._conn.recv()
            except EOFError:  # the child ended without an answer: killed (out of memory, a signal) or exited
                self._proc.join()
                self._done = ("error", RuntimeError(
                    f"{self.what}: the child process doing it ended with exit code {self._proc.exitcode} before "
                    "it finished; nothing of it was kept"), None)
            finally:
                self._conn.close()
            self._proc.join()
        if self._done[0] == "ok":
            return self._done[1]
        _, exc, text = self._done
        if text:
            exc.add_note(f"(raised in the child process doing {self.what}:)\n{text.rstrip()}")
        raise exc

    def stop(self) -> None:
        """Kill the child and wait for it (nothing it wrote is used); a no-op once its result was taken."""
        if self._proc is not None and self._done is None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
            self._done = ("error", RuntimeError(f"{self.what}: stopped"), None)
