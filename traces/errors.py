"""One error type for every bad input file, naming file, line, field and what was expected; and the one way a
value read from an input appears in an error (`shorten`)."""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

MAX_SHOWN = 80  # characters of a given value quoted in an error message


def shorten(value: Any, limit: int = MAX_SHOWN) -> str:
    """How a value read from an input appears in an error: a number, boolean or None as written (cut to `limit`
    characters); text, lists and mappings by kind and size, never quoted. A path that names the wrong file, or a
    link to another file (a config's profile pointing at a credentials file), must not print that file's content."""
    if value is None or isinstance(value, (bool, int, float, numbers.Number)):
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - a value whose repr fails is still named by its type
            text = f"<{type(value).__name__}>"
        return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"
    if isinstance(value, (str, bytes)):
        return f"text of {len(value):,} characters" if value else "empty text"
    if isinstance(value, Mapping):
        return f"a mapping of {len(value):,} keys"
    if isinstance(value, (list, tuple, set, frozenset)):
        return f"a list of {len(value):,} values"
    return f"a {type(value).__name__} value"


def key_names(keys: Any, limit: int = MAX_SHOWN) -> str:
    """Mapping keys named in an error (an unknown key is what the user must fix), sorted, cut to `limit` characters;
    their values are never shown (see shorten)."""
    text = repr(sorted(str(k) for k in keys))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(keys):,} keys)"


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
