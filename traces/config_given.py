"""A config block that dumps as it was given: only the keys the config set, in the config's order.

Typed blocks whose unset keys mean "the consumer's default" (a deployment's placement keys, a plan's roofline knobs
and scheduler grid) dump back to the mapping the config wrote, so hashes, `--set` and the documents built from them
read what they read when the block was a plain mapping.
"""
from __future__ import annotations

from typing import Any

from pydantic import PrivateAttr, model_serializer, model_validator

from traces.config_base import StrictModel


class GivenModel(StrictModel):
    """A strict config model whose dump holds only the keys given, in the given order (`given_keys`)."""

    _order: tuple[str, ...] = PrivateAttr(())

    @model_validator(mode="wrap")
    @classmethod
    def _record_order(cls, doc: Any, handler: Any) -> Any:
        model = handler(doc)
        if isinstance(doc, dict) and model is not doc:
            model._order = tuple(key for key in doc if key in cls.model_fields)
        return model

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any) -> dict[str, Any]:
        doc = handler(self)
        return {key: doc[key] for key in self._order if key in doc}

    def given_keys(self) -> tuple[str, ...]:
        """The keys the config set, in its order."""
        return self._order
