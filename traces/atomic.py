"""Atomic file writes: write to a temp file in the same folder, fsync, then rename; and the one rule for which
existing path a single-file output may replace (`check_output_file`)."""
from __future__ import annotations

import gzip
import io
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator


def check_output_file(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                      what: str = "output file") -> Path:
    """`path` if a single-file output may be written there, else ValueError saying why.

    Allowed: a path that does not exist yet, or an existing regular file that is none of the command's `inputs`.
    Refused: `""`, a folder, a device (`/dev/null`), a FIFO, a socket, a symbolic link (a rename would replace the
    link, a user's idea of the target would be lost either way) and a command's own input, so a rename never
    turns a device node into a file or destroys what the command reads."""
    if not str(path).strip():
        raise ValueError(f"{what}: an empty path is not a file name; give the file to write")
    p = Path(path)
    if os.path.islink(p):
        raise ValueError(f"{what} {p}: is a symbolic link; refusing to replace it; give a plain file path")
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return p
    except OSError as e:
        raise ValueError(f"{what} {p}: cannot be checked ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"{what} {p}: is a folder; give the file to write")
    if not stat.S_ISREG(mode):
        raise ValueError(f"{what} {p}: exists and is not a regular file (a device, FIFO or socket); refusing to "
                         "replace it; choose another path")
    for src in inputs:
        try:
            same = os.path.samefile(p, src)
        except OSError:
            continue
        if same:
            raise ValueError(f"{what} {p}: is also an input of this command ({src}); refusing to overwrite it; "
                             "choose another path")
    return p


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, compress: bool | None = None) -> Iterator[IO]:
    """Open `path` for writing so readers see either the old file or the complete new one.

    `mode` is "w" (text, UTF-8) or "wb"; `compress` defaults to True when the name ends in `.gz`. Only a new
    path or an existing regular file is replaced (check_output_file).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', got {mode!r}")
    path = check_output_file(path)
    if compress is None:
        compress = path.suffix == ".gz"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise _naming(e, path) from None
    os.close(fd)
    try:
        with open(tmp, "wb") as raw:
            if compress:
                # mtime=0 and no stored name keep compressed output byte-identical across runs.
                gz = gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0)
                f = gz if mode == "wb" else io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
            else:
                f = raw if mode == "wb" else io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
            with f:
                yield f
                f.flush()
                if compress:
                    gz.close()  # writes the gzip trailer into raw
                raw.flush()
                os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError) and not getattr(e, "filename", None):  # ENOSPC, EIO: say which file
            raise _naming(e, path) from None
        raise


def _naming(e: OSError, path: Path) -> OSError:
    """`e` with `path` as its filename, so the one-line error says which file could not be written."""
    err = OSError(e.errno, f"cannot write: {e.strerror or e}", str(getattr(e, "filename", None) or path))
    return err


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a whole text file atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)
