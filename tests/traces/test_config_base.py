"""traces/config_base.py error_lines: the errors of a union at one key are one line; a member that took the value
and failed below it is the one reported (the other members' type mismatch at that key is left out)."""
from __future__ import annotations

from typing import Annotated, Literal, Union

import pytest
from pydantic import Field, ValidationError

from traces.config_base import StrictModel, error_lines


class A(StrictModel):
    kind: Literal["a"]
    n: int = 0


class B(StrictModel):
    kind: Literal["b"]


class Top(StrictModel):
    x: str | Annotated[Union[A, B], Field(discriminator="kind")] | None = None


def _lines(doc) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as err:
        Top.model_validate(doc)
    return error_lines(err.value, "", Top)


def test_a_value_no_member_takes_is_one_line_naming_every_member():
    ((loc, msg),) = _lines({"x": 5})
    assert loc == "x" and msg.startswith("expected a valid string, or ")


def test_a_member_that_took_the_value_says_what_is_wrong_below_it():
    assert _lines({"x": {"kind": "a", "n": "1"}}) == [("x.n", "expected a valid integer (got text of 1 characters)")]
    assert _lines({"x": {"kind": "b", "m": 1}}) == [("x.m", "unknown key")]
