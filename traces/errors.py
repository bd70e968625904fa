"""One error type for every bad input file, naming file, line, field and what was expected."""
from __future__ import annotations

from typing import Any

MAX_SHOWN = 80  # characters of a given value quoted in an error message


def shorten(value: Any, limit: int = MAX_SHOWN) -> str:
    """repr of `value`, cut to `limit` characters (an error never echoes a whole file or a huge value)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class TraceFormatError(ValueError):
    """A trace, profile, catalog or config file is malformed.

    The message always names the file, and where known the line and field, and what was expected.
    """

    def __init__(self, path: str, message: str, *, line: int | None = None, field: str | None = None):
        self.path = str(path)
        self.line = line
        self.field = field
        where = self.path
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")
