"""One error type for every bad input file, naming file, line, field and what was expected."""
from __future__ import annotations


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
