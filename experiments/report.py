"""The comparison table printed after a run, and the results folder a run writes.

Results folder (complete or absent: built in a hidden temp sibling, renamed into place at the end):
    .draftsim-results      marker: only a folder holding it (or an empty one) is ever replaced
    config.yaml            resolved experiment config
    requests.parquet       per-request table of every run, `run` column first (or .csv)
    steps.parquet          per-step table of every run, `run` column first (or .csv)
    summary.json           {run name: summary metrics} in run order (simulator.measure.metrics.summarize);
                           a run that does not fit appears here only
    timeline.json          Chrome trace JSON, one process per run (open in ui.perfetto.dev)
    plots/*.png            experiments.plots.PLOT_FILES
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import yaml

from experiments.beside import Beside
from experiments.plots import PLOT_FILES, load_matplotlib, write_plots
from experiments.tables import print_table, run_table
from simulator.engine.records import REQUEST_COLUMNS, STEP_COLUMNS, stack_tables
from simulator.measure.timeline import to_chrome_trace, write_chrome_trace
from traces.atomic import atomic_open, atomic_write_text
from traces.parsing import resolved_path

if TYPE_CHECKING:  # rich loads where a table is printed: `draftsim run --json` and the writers do without it
    from rich.console import Console
    from rich.table import Table

MARKER = ".draftsim-results"
RESULT_ENTRIES = frozenset(
    {MARKER, "config.yaml", "summary.json", "timeline.json", "plots",
     "requests.parquet", "steps.parquet", "requests.csv", "steps.csv"}
)
TABLE_FORMATS = ("parquet", "csv")


def comparison_table(summary_by_run: Mapping[str, Mapping], baseline: str, *, title: str | None = None) -> Table:
    """The `draftsim run` comparison (experiments/tables.py convention): throughput and its gain over
    `baseline`, mean-TPOT gain, TTFT/TPOT p50/p99 (ms), E2E p50/p99 (s), acceptance length, goodput (% of the
    offered requests meeting the SLO); per-GPU throughput when the runs use different GPU counts."""
    return run_table(summary_by_run, baseline, title=title)


def print_comparison(summary_by_run: Mapping[str, Mapping], baseline: str, console: Console | None = None, *,
                     title: str | None = None) -> None:
    """Print the comparison table to the terminal (or the given console); natural width when not a terminal."""
    if console is None:
        from rich.console import Console

        console = Console()
    print_table(comparison_table(summary_by_run, baseline, title=title), console)


def _json_ready(v, where: str):
    """Plain JSON value: numpy scalars unwrapped, non-finite floats as null; anything else unknown is an error."""
    if isinstance(v, Mapping):
        return {str(k): _json_ready(x, f"{where}.{k}") for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_ready(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if v is None or isinstance(v, str):
        return v
    raise TypeError(f"summary {where}: {type(v).__name__} value {v!r} is not JSON data")


def summary_json(summary_by_run: Mapping[str, Mapping]) -> str:
    """Deterministic JSON text of the per-run summaries (run order and key order kept, NaN as null)."""
    return json.dumps({r: _json_ready(s, r) for r, s in summary_by_run.items()}, indent=2, allow_nan=False) + "\n"


def _with_run_column(df: pd.DataFrame, run: str, table: str) -> pd.DataFrame:
    """Copy of a table with `run` as its first column; an existing `run` column must already say `run`."""
    if "run" in df.columns:
        other = set(df["run"].astype(str)) - {run}
        if other:
            raise ValueError(f"{table} table of run {run!r} has rows of other run(s) {sorted(other)}")
        df = df.drop(columns="run")
    out = df.reset_index(drop=True)  # a new frame (pandas copies it, or copies on write): the insert leaves df as it was
    out.insert(0, "run", pd.Series([run] * len(out), dtype=object))
    return out


def _write_table(df: pd.DataFrame, path: Path, fmt: str) -> None:
    """One table as Parquet or CSV, atomically."""
    if fmt == "parquet":
        with atomic_open(path, "wb") as f:
            df.to_parquet(f, index=False, engine="pyarrow")
    else:
        with atomic_open(path, "w") as f:
            df.to_csv(f, index=False, lineterminator="\n")


def check_results_target(out: str | os.PathLike, entries: frozenset[str] | None = RESULT_ENTRIES,
                         inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """The resolved `out` if a results folder may be written there, else ValueError saying why.

    Allowed: a path that does not exist yet (its parent may be created), an empty folder, or a folder that
    draftsim wrote (it holds the `.draftsim-results` marker) and that holds nothing but `entries` (None: any
    names, for studies whose file names vary).
    A user's folder, e.g. the one holding the config (`draftsim run myexp/config.yaml --out myexp`), is
    never replaced; neither is `""` (the working folder), `/` or a symbolic link (its target may be anyone's),
    nor a folder that holds one of the command's `inputs`.
    """
    if not str(out).strip():
        raise ValueError("results folder: an empty path is not a folder; give the folder to write")
    given = Path(out).expanduser()
    if given.is_symlink():
        raise ValueError(f"results folder {given}: is a symbolic link; refusing to write through it (its target "
                         "may be a user's folder); give the folder itself")
    out = resolved_path(given)
    if out == Path(out.anchor):
        raise ValueError(f"results folder {out}: refusing to write into the root folder; choose another --out")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"results folder {out}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ValueError(f"results folder {out}: cannot write into {parent} (permission denied)")
            break
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise ValueError(f"results folder {out}: exists and is not a folder; choose another --out")
        names = {p.name for p in out.iterdir()}
        if names and MARKER not in names:
            raise ValueError(f"results folder {out}: exists, is not empty and was not written by draftsim (no "
                             f"{MARKER} file in it); refusing to replace it; choose another --out")
        for src in inputs:
            real = resolved_path(src)
            if out == real or out in real.parents:
                raise ValueError(f"results folder {out}: holds {src}, an input of this command; refusing to "
                                 "replace it; choose another --out")
        foreign = sorted(names - entries) if entries is not None else []
        if foreign:
            raise ValueError(f"results folder {out}: holds files a results folder does not ({foreign[:5]}); "
                             "refusing to replace it; move them or choose another --out")
    return out


_STAGING = re.compile(r"^\.(?P<name>.+)\.[^.]+\.(?P<pid>\d+)\.(?:partial|old)$")


def _owner_alive(folder: Path) -> bool:
    """True unless `folder`'s marker says it was made on this host by a process that has exited."""
    m = _STAGING.match(folder.name)
    try:
        host = (folder / MARKER).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return True  # not ours, or unreadable: leave it alone
    if m is None or host != socket.gethostname():
        return True
    try:
        os.kill(int(m["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_stale_staging(out: Path) -> list[Path]:
    """Remove `.<name>.*.<pid>.partial|old` siblings of `out` left by killed runs on this host; returns them."""
    removed = []
    if not out.parent.is_dir():
        return removed
    for p in out.parent.glob(f".{glob_escape(out.name)}.*"):
        m = _STAGING.match(p.name)
        if m and m["name"] == out.name and p.is_dir() and not p.is_symlink() and not _owner_alive(p):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def glob_escape(name: str) -> str:
    """`name` with glob metacharacters escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)


@contextmanager
def staged_results_folder(out_dir: str | os.PathLike,
                          entries: frozenset[str] | None = RESULT_ENTRIES) -> Iterator[Path]:
    """Yield a hidden temp folder beside `out_dir` to write results into; on success it replaces `out_dir`
    (complete or not at all), on any error or Ctrl-C it is removed. Stale temp folders of killed runs are
    cleaned first; see check_results_target for which `out_dir` may be replaced."""
    out = check_results_target(out_dir, entries)
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_staging(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=f".{os.getpid()}.partial", dir=out.parent))
    try:
        (tmp / MARKER).write_text(socket.gethostname() + "\n", encoding="utf-8")
        yield tmp
        _swap_into_place(tmp, out, entries)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_results_folder(
    out_dir: str | os.PathLike,
    *,
    config_dict: Mapping,
    runs: Mapping[str, tuple[pd.DataFrame | None, pd.DataFrame | None, Mapping]],
    timeline: bool | dict = True,
    timeline_max_steps: int | None = None,
    plots: bool = True,
    table_format: str = "parquet",
    plotting: PlotsChild | None = None,
) -> Path:
    """Write the results folder for `runs` ({name: (requests_df, steps_df, summary)}); returns its path.

    A run whose tables are None (a configuration that does not fit) appears in summary.json only.
    `timeline`: True builds the Chrome trace from the step tables (each run cut to its first
    `timeline_max_steps` steps when that is a positive number, and labelled so), a dict is written as
    given, False skips it.
    An existing results folder at `out_dir` is replaced (never a user's folder: see check_results_target);
    the new one appears whole or not at all.
    `plotting`: the plots' child started earlier by `plots_beside` with these runs' tables (run_experiment starts
    it before it summarizes, so matplotlib loads meanwhile); without it one is started here. It is stopped when
    anything here fails.
    """
    job = None if plotting is None else plotting.job
    try:
        if table_format not in TABLE_FORMATS:
            raise ValueError(f"table_format: expected one of {TABLE_FORMATS}, got {table_format!r}")
        if not runs:
            raise ValueError("write_results_folder: no runs to write")
        out = check_results_target(out_dir)
        config_text = yaml.safe_dump(dict(config_dict), sort_keys=False, allow_unicode=True)
        simulated = {n: (r, s) for n, (r, s, _) in runs.items() if r is not None and s is not None}
        requests = _stack([_with_run_column(r, n, "requests") for n, (r, _) in simulated.items()], REQUEST_COLUMNS)
        steps = _stack([_with_run_column(s, n, "steps") for n, (_, s) in simulated.items()], STEP_COLUMNS)
        summaries = {n: summ for n, (_, _, summ) in runs.items()}
        summary_text = summary_json(summaries)
        if plotting is not None and (not plots or plotting.runs != tuple(simulated)):
            raise ValueError(f"write_results_folder: the plots' child was started for runs {list(plotting.runs)}, "
                             f"the results folder writes {list(simulated) if plots else 'no plots'}")
        with staged_results_folder(out) as tmp:
            if plots and simulated:
                # drawn in a forked child while this process writes the rest (experiments/beside.py)
                if job is None:
                    job = plots_beside({n: r for n, (r, _) in simulated.items()},
                                       {n: s for n, (_, s) in simulated.items()}).job
                job.send(plot_dir=tmp / "plots", summary_by_run={n: summaries[n] for n in simulated},
                         baseline=config_dict.get("baseline"))
            atomic_write_text(tmp / "config.yaml", config_text)
            _write_table(requests, tmp / f"requests.{table_format}", table_format)
            _write_table(steps, tmp / f"steps.{table_format}", table_format)
            atomic_write_text(tmp / "summary.json", summary_text)
            if timeline is True and simulated:
                trace = to_chrome_trace(steps, process_name=out.name, max_steps=timeline_max_steps)
                write_chrome_trace(tmp / "timeline.json", trace=trace, built_here=True)
            elif isinstance(timeline, dict):
                write_chrome_trace(tmp / "timeline.json", trace=timeline)
            if job is not None:
                _plots_written(job)
    except BaseException:
        if job is not None:
            job.stop()  # before the staged folder is removed: the child writes into it
        raise
    return out


@dataclass(frozen=True)
class PlotsChild:
    """The plots' forked child (`plots_beside`) and the runs whose tables it holds."""

    runs: tuple[str, ...]
    job: Beside


def plots_beside(requests_by_run: Mapping[str, pd.DataFrame],
                 steps_by_run: Mapping[str, pd.DataFrame]) -> PlotsChild:
    """A forked child that loads matplotlib at once and draws the plots of these runs' tables once
    write_results_folder sends it the folder and the summaries (experiments/beside.py)."""
    job = Beside("the plots", write_plots, prepare=load_matplotlib, late=True, requests_by_run=dict(requests_by_run),
                 steps_by_run=dict(steps_by_run))
    return PlotsChild(tuple(requests_by_run), job)


def _plots_written(plotting: Beside) -> list[Path]:
    """Wait for the plots' child; its error is raised here (benchmarks/bench_process.py times this wait)."""
    return plotting.result()


def _stack(frames: list[pd.DataFrame], schema: Mapping) -> pd.DataFrame:
    """Concatenate per-run tables; with none, an empty table that still has the `run` + schema columns."""
    if frames:
        return stack_tables(frames)
    return pd.DataFrame({c: pd.Series(dtype=object if c == "run" or schema[c][0] == "str" else schema[c][0])
                         for c in ["run", *schema]})


def _swap_into_place(tmp: Path, out: Path, entries: frozenset[str] | None = RESULT_ENTRIES) -> None:
    """Rename the finished temp folder to `out`, moving a previous results folder aside and deleting it."""
    # mkdtemp and the atomic writes create owner-only modes; results are meant to be shared.
    for p in [tmp, *tmp.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    if out.exists():
        check_results_target(out, entries)  # again: it may have changed while the run simulated
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=f".{os.getpid()}.old", dir=out.parent))
        os.rmdir(old)
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)


__all__ = [
    "MARKER", "PLOT_FILES", "PlotsChild", "RESULT_ENTRIES", "check_results_target", "comparison_table", "plots_beside",
    "print_comparison", "staged_results_folder", "summary_json", "write_results_folder",
]
