"""Run a batch of sweep points: skip the ones already cached, execute the rest on a backend, cache each
result as it arrives, and return all results in point order."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.sweep.backends import Evaluate, Executor
from experiments.sweep.cache import PointCache
from experiments.sweep.hashing import content_hash


@dataclass
class Point:
    """One unit of work: a JSON payload for `evaluate`; `key` is its content hash (cache file name)."""

    payload: dict[str, Any]

    @property
    def key(self) -> str:
        return content_hash(self.payload)


@dataclass
class RunStats:
    """How many points a batch computed and how many it read from the cache."""

    computed: int = 0
    cached: int = 0


class SweepRunner:
    """Executes batches of points with one backend, one cache folder and one progress bar over all batches. Use
    it as a with-block: its Executor's workers live from the first batch to the block's end (killed at once when
    the block ends in an error or an interrupt)."""

    def __init__(self, evaluate: Evaluate, cache_dir: str | Path | None, backend: str = "pool",
                 workers: int | None = None, address: str | None = None, progress=None):
        self.evaluate = evaluate
        self.cache = PointCache(cache_dir) if cache_dir is not None else None
        self.executor = Executor(backend, workers, address)
        self.progress = progress  # a rich Progress task wrapper with advance(n) or None
        self.stats = RunStats()

    def __enter__(self) -> "SweepRunner":
        return self

    def __exit__(self, *exc) -> bool:
        return self.executor.__exit__(*exc)

    def run(self, points: Sequence[Point]) -> list[Any]:
        """Results of `points`, in order; cached ones are not recomputed, duplicates are computed once."""
        keys = [p.key for p in points]
        results: dict[str, Any] = {}
        todo: dict[str, dict[str, Any]] = {}
        for key, point in zip(keys, points):
            if key in results or key in todo:
                self._advance(1)  # a duplicate is computed once but counts as done in the total
                continue
            hit = self.cache.get(key) if self.cache else None
            if hit is not None:
                results[key] = hit
                self.stats.cached += 1
                self._advance(1)
            else:
                todo[key] = point.payload
        todo_keys = list(todo)
        for i, result in self.executor.run(self.evaluate, [todo[k] for k in todo_keys]):
            key = todo_keys[i]
            if self.cache:
                self.cache.put(key, result)
            results[key] = result
            self.stats.computed += 1
            self._advance(1)
        return [results[k] for k in keys]

    def _advance(self, n: int) -> None:
        if self.progress is not None:
            self.progress.advance(n)


class ProgressBar:
    """One rich progress bar over every point of a sweep or plan (total may grow as batches are planned)."""

    PLAIN_EVERY_S = 10.0  # off a terminal: one plain line at most this often (and at the end)

    def __init__(self, description: str, total: int, console=None, enabled: bool = True):
        self.enabled = enabled
        self.total = total
        self.done = 0
        self.description = description
        self.plain = enabled and console is not None and not console.is_terminal
        self._console = console
        if not enabled or self.plain:
            import time

            self._t0 = self._last = time.monotonic()
            return
        from experiments.progress import make_progress

        self._bar = make_progress(console, "points")
        self._task = self._bar.add_task(description, total=total)

    def __enter__(self) -> "ProgressBar":
        if self.enabled and not self.plain:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> bool:
        if self.plain:
            self._line(force=True)
        elif self.enabled:
            self._bar.stop()
        return False

    def _line(self, force: bool = False) -> None:
        import time

        now = time.monotonic()
        if force or now - self._last >= self.PLAIN_EVERY_S:
            self._last = now
            self._console.print(f"{self.description}: {self.done}/{self.total} points, {now - self._t0:.0f} s",
                                highlight=False)

    def advance(self, n: int) -> None:
        self.done += n
        if self.plain:
            self._line()
        elif self.enabled:
            self._bar.update(self._task, advance=n)

    def add_total(self, n: int) -> None:
        self.total += n
        if self.enabled and not self.plain:
            self._bar.update(self._task, total=self.total)
