"""The tables' row buffer: rows appended one by one and as column blocks come out typed, in append order."""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.engine.records import STEP_COLUMNS, ColumnBuffer


def _row(step: int, phase: str) -> dict:
    return {c: (phase if c == "phase" else "target" if c == "device" else "" if t == "str" else step)
            for c, (t, _) in STEP_COLUMNS.items()}


def test_column_buffer_merges_rows_and_blocks_in_append_order():
    block = [_row(2, "verify"), _row(3, "draft"), _row(3, "verify")]
    mixed, plain = ColumnBuffer(STEP_COLUMNS), ColumnBuffer(STEP_COLUMNS)
    for r in (_row(0, "prefill"), _row(1, "draft"), _row(1, "verify")):
        mixed.append(**r)
    mixed.append_columns({c: np.array([r[c] for r in block], dtype=object if t == "str" else t)
                          for c, (t, _) in STEP_COLUMNS.items()})
    mixed.append(**_row(4, "mixed"))
    for r in (_row(0, "prefill"), _row(1, "draft"), _row(1, "verify"), *block, _row(4, "mixed")):
        plain.append(**r)
    assert len(mixed) == 7
    pd.testing.assert_frame_equal(mixed.frame(), plain.frame(), check_exact=True)
    assert list(mixed.frame().phase) == ["prefill", "draft", "verify", "verify", "draft", "verify", "mixed"]
