"""Progress for long commands: a rich bar on a terminal, plain lines elsewhere (a log, a pipe, CI).

rich draws nothing live when its console is not a terminal, so a redirected `draftsim run` would be silent
until the end; `PlainProgress` prints one line per tenth of each task instead (and one when it completes),
with the same calls (`add_task`, `update`, start/stop as a context manager)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class _Task:
    description: str
    total: float
    completed: float = 0.0
    shown: int = -1  # last tenth printed
    started: float = field(default_factory=time.perf_counter)


class PlainProgress:
    """The part of rich.progress.Progress draftsim uses, printing plain lines to `console`."""

    def __init__(self, console, unit: str, steps: int = 10):
        self.console, self.unit, self.steps = console, unit, steps
        self.tasks: list[_Task] = []

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def start(self) -> None:
        """Nothing to draw up front (rich's Progress API)."""

    def stop(self) -> None:
        """Nothing to clear (rich's Progress API)."""

    def add_task(self, description: str, total: float | None = None, **_) -> int:
        self.tasks.append(_Task(description, float(total or 0)))
        return len(self.tasks) - 1

    def update(self, task_id: int, *, completed: float | None = None, advance: float | None = None,
               total: float | None = None, **_) -> None:
        t = self.tasks[task_id]
        if total is not None:
            t.total = float(total)
        if completed is not None:
            t.completed = float(completed)
        if advance is not None:
            t.completed += float(advance)
        tenth = int(self.steps * t.completed / t.total) if t.total > 0 else self.steps
        if tenth > t.shown and tenth > 0:
            t.shown = tenth
            pct = 100.0 * t.completed / t.total if t.total > 0 else 100.0
            self.console.print(f"{t.description}: {t.completed:,.0f}/{t.total:,.0f} {self.unit} ({pct:.0f}%), "
                               f"{time.perf_counter() - t.started:.1f} s", markup=False, highlight=False,
                               soft_wrap=True)


def make_progress(console, unit: str, description_width: int | None = None, transient: bool = False):
    """A rich progress bar on a terminal console, else `PlainProgress` (plain lines)."""
    if console is None:
        from rich.console import Console

        console = Console()
    if not console.is_terminal:
        return PlainProgress(console, unit)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    desc = f"[bold]{{task.description:<{description_width}}}" if description_width else "[bold]{task.description}"
    return Progress(TextColumn(desc), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn(),
                    console=console, transient=transient)
