"""Progress shows as plain lines when the output is not a terminal, as a rich bar when it is."""
from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from experiments.progress import PlainProgress, make_progress
from experiments.run import run_experiment
from tests.experiments.test_sweep_spec import BASE


def test_a_log_gets_one_line_per_tenth_and_a_terminal_gets_the_bar():
    buf = io.StringIO()
    bar = make_progress(Console(file=buf, width=80), "requests")
    assert isinstance(bar, PlainProgress)
    with bar:
        t = bar.add_task("AR", total=200)
        for done in range(0, 201, 7):
            bar.update(t, completed=done)
        bar.update(t, completed=200)
    lines = buf.getvalue().splitlines()
    sent = [*range(0, 201, 7), 200]
    first_past = [next(n for n in sent if n >= 20 * j) for j in range(1, 11)]  # first update in each tenth
    assert [ln.split(" requests")[0] for ln in lines] == [f"AR: {n}/200" for n in first_past]
    assert isinstance(make_progress(Console(file=io.StringIO(), force_terminal=True), "points"), Progress)


def test_run_experiment_progress_in_a_log():
    buf = io.StringIO()
    run_experiment(BASE, progress=True, console=Console(file=buf, width=80))
    lines = buf.getvalue().splitlines()
    assert lines[-1].startswith("sd: 12/12 requests (100%)") and any(ln.startswith("AR: 12/12") for ln in lines)
