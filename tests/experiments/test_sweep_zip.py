"""The sweep block's `zip:` keys move together and cross the grid."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from experiments.sweep.spec import SweepSpec, expand


def test_zip_keys_move_together_and_cross_the_grid():
    spec = SweepSpec.model_validate({"grid": {"a": [1, 2]}, "zip": {"b": [3, 4, 5], "c": [6, 7, 8]}})
    points = expand(spec, 0)
    assert len(points) == 2 * 3
    assert all(p["c"] - p["b"] == 3 for p in points)
    assert {(p["a"], p["b"]) for p in points} == {(a, b) for a in (1, 2) for b in (3, 4, 5)}


@pytest.mark.parametrize("doc, match", [
    ({"zip": {"b": [3, 4], "c": [6]}}, "same number of values"),
    ({"grid": {"b": [1]}, "zip": {"b": [3]}}, "both grid and zip"),
    ({"zip": {"b": []}}, "sweep.zip.b: expected a non-empty list"),
])
def test_bad_zip_blocks_are_refused(doc, match):
    with pytest.raises(ValidationError, match=match):
        SweepSpec.model_validate(doc)
