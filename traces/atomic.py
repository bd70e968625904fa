"""Atomic file writes: write to a temp file in the same folder, fsync, then rename."""
from __future__ import annotations

import gzip
import io
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, compress: bool | None = None) -> Iterator[IO]:
    """Open `path` for writing so readers see either the old file or the complete new one.

    `mode` is "w" (text, UTF-8) or "wb"; `compress` defaults to True when the name ends in `.gz`.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
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
