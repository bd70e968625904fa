"""traces/config_given.py: a GivenModel dumps only the keys given, in the given order, however it is re-made."""
from __future__ import annotations

from traces.config_given import GivenModel


class Knobs(GivenModel):
    a: int = 1
    b: int | None = None
    c: str = "x"


def test_the_dump_is_the_mapping_given():
    knobs = Knobs.model_validate({"c": "y", "a": 2})
    assert list(knobs.model_dump()) == ["c", "a"] and knobs.model_dump() == {"c": "y", "a": 2}
    assert (knobs.a, knobs.b, knobs.c) == (2, None, "y")  # unset keys read their defaults
    assert knobs.given_keys() == ("c", "a")
    assert Knobs().model_dump() == {} and Knobs.model_validate({"b": None}).model_dump() == {"b": None}


def test_the_order_survives_revalidation_and_copies():
    knobs = Knobs.model_validate({"b": 3, "a": 2})
    assert Knobs.model_validate(knobs).given_keys() == ("b", "a")
    assert knobs.model_copy().model_dump() == {"b": 3, "a": 2}
    assert Knobs.model_validate(knobs.model_dump()) == knobs
