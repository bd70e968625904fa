"""Run one function in a forked child process while this process goes on, and take its result or its error back.

The results folder draws its plots this way beside writing its tables (experiments/report.py): on two cores the
two take the wall time of the longer, not of both. The child is a fork, so it sees this process's data as it is
when it starts (nothing is pickled but the result and the late arguments) and writes the same bytes this process
would. A job started with `late=True` first runs `prepare` (the plots: importing matplotlib) and then waits for
the rest of its arguments (`send`), so that work overlaps what this process does before it can send them. Where
fork is not available (not Linux) the function runs in this process when its arguments are complete, so the
outputs are the same either way.
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
    """True where a child is forked (Linux, from a process that may have children: a daemonic multiprocessing worker
    may not); elsewhere the function runs in this process."""
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)


def _child(conn, late_conn, fn: Callable[..., Any], args: tuple, kwargs: dict, prepare: Callable[[], Any] | None,
           parent_pid: int) -> None:
    """The child's whole life: `prepare`, the late arguments (when the job takes them), then `fn`; it sends
    ("ok", result) or ("error", exception, its traceback text)."""
    from experiments.sweep.backends import die_with_parent  # the pool workers' rule: die with the parent

    gc.freeze()  # the parent's objects: a collection here would walk them and copy every page it touches
    die_with_parent(parent_pid)
    try:
        if prepare is not None:
            prepare()
        if late_conn is not None:
            more_args, more_kwargs = late_conn.recv()
            args, kwargs = args + more_args, {**kwargs, **more_kwargs}
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
    its exception (the child's traceback as a note); `stop()` kills it (this process failed, its work is moot).
    With `late=True` the child runs `prepare()` at once and `fn` only once `send` gives the rest of its arguments."""

    def __init__(self, what: str, fn: Callable[..., T], *args: Any, prepare: Callable[[], Any] | None = None,
                 late: bool = False, **kwargs: Any):
        self.what = what  # what the child does, for the error when it dies without an answer
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._proc = None
        self._conn = None
        self._late_conn = None
        self._waiting = late  # for the late arguments
        self._done: tuple | None = None
        if not can_fork():
            if not late:
                self._run_here(args, kwargs)
            return
        ctx = multiprocessing.get_context("fork")
        self._conn, child_end = ctx.Pipe(duplex=False)
        late_end = None
        if late:
            late_end, self._late_conn = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(child_end, late_end, fn, args, kwargs, prepare, os.getpid()),
                                 name=f"draftsim-{what}", daemon=True)
        self._proc.start()
        child_end.close()
        if late_end is not None:
            late_end.close()

    def _run_here(self, args: tuple, kwargs: dict) -> None:
        try:
            self._done = ("ok", self._fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001  raised by result(), where the forked one's would be
            self._done = ("error", exc, None)

    def send(self, *args: Any, **kwargs: Any) -> None:
        """The rest of `fn`'s arguments (after those given at the start), for a job started with `late=True`."""
        if not self._waiting:
            raise RuntimeError(f"{self.what}: takes no late arguments, or was given them already")
        self._waiting = False
        if self._proc is None:
            self._run_here(self._args + args, {**self._kwargs, **kwargs})
            return
        try:
            self._late_conn.send((args, kwargs))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child ended before reading them: result() says how
        finally:
            self._late_conn.close()

    def result(self) -> T:
        """The function's value; its exception raised here when it failed."""
        if self._waiting:
            raise RuntimeError(f"{self.what}: waits for its late arguments (send) before it can finish")
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
        self._waiting = False
        if self._proc is not None and self._done is None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
            if self._late_conn is not None:
                self._late_conn.close()
        if self._done is None:
            self._done = ("error", RuntimeError(f"{self.what}: stopped"), None)
