"""Output folders of commands that write more than one file (`sweep --out`, `plan --out`): the rules `run`
follows (experiments/report.check_results_target) for folders that fill up point by point.

A folder is used only when it does not exist, is empty, or was made by draftsim for this kind of output
(it holds the `.draftsim-results` marker and nothing but that output's own names). A user's folder is never
written into. The marker is written first, so a folder draftsim started is recognised on the next run (a
sweep resumes from its point cache); every file in it is written atomically (temp file + rename), so an
interrupted command leaves the previous version or the new one, never half a file. The claiming process
holds an exclusive lock on the marker until it exits, so a second command writing into the same folder at the
same time is refused instead of mixing its files with the first one's.
"""
from __future__ import annotations

import atexit
import os
import socket
from pathlib import Path
from typing import IO

from experiments.report import MARKER, check_results_target
from traces.atomic import atomic_write_text

SWEEP_ENTRIES = frozenset({MARKER, "points", "sweep.json", "table.csv"})
PLAN_ENTRIES = frozenset({MARKER, "points", "plan.json", "curves.png", "pareto.png", "pareto_user_gpu.png"})
_HELD: dict[Path, IO] = {}  # folder -> its open, locked marker, for as long as this process lives


def claim_output_folder(out: str | os.PathLike, entries: frozenset[str] | None) -> Path:
    """The resolved `out`, created with the marker, if draftsim may write `entries` there (None: any names, for
    studies); else ValueError saying why (a file, a foreign non-empty folder, a draftsim folder of another
    kind, no permission)."""
    path = check_results_target(out, entries)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not (path / MARKER).is_file():
            atomic_write_text(path / MARKER, socket.gethostname() + "\n")
    except OSError as e:
        raise ValueError(f"output folder {path}: cannot be created ({e.strerror or e})") from None
    _lock(path)
    return path


def _lock(path: Path) -> None:
    """Hold an exclusive lock on `path`'s marker until this process exits; ValueError if another process holds it."""
    if path in _HELD:
        return
    try:
        import fcntl
    except ImportError:  # no flock on this platform: the marker rules still apply
        return
    f = open(path / MARKER, "rb")  # noqa: SIM115 - kept open: the lock lives as long as the process
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise ValueError(f"output folder {path}: another draftsim command is writing into it now; wait for it "
                         "to finish or choose another --out") from None
    _HELD[path] = f
    atexit.register(f.close)  # released when the process exits (the OS would too; this keeps exit quiet)
