"""An inline latency profile in a config (`server.target_profile`, a drafter's `profile`) as a typed spec.

`ProfileSpec` is a union discriminated by `kind`: `roofline` (a catalog model on a catalog GPU) or a measured
profile written out (`linear`, `table`, `structured`). A spec types its keys when the config loads and dumps back as
given (traces/config_given.py: hashes, `--set` and a plan's candidate documents read that dump);
`roofline.profile_from_ref(spec)` builds the LatencyProfile, its loaders (`roofline_from_config`,
`latency.profile_from_dict`) the one home of the value rules (required keys, ranges, terms, catalog names).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Tag

from traces.config_given import GivenModel

Number = int | float  # a number stays as the config wrote it (1 stays 1: the dump is what hashes read)


class InlineProfile(GivenModel):
    """The base of every inline profile spec: its document as given."""

    def given(self) -> dict[str, Any]:
        """The mapping the config wrote (what the profile loaders read)."""
        return self.model_dump(mode="json")



class RooflineSpec(InlineProfile):
    """`{kind: roofline, model, gpu, tp?, mfu?, ...}`: the roofline model of a catalog model on a catalog GPU (a
    plan's drafter may leave `gpu` to each candidate's GPU type); unset knobs are RooflineProfile's defaults."""

    kind: Literal["roofline"]
    model: str | None = None
    gpu: str | None = None
    tp: int | None = None
    mfu: Number | None = None
    bandwidth_util: Number | None = None
    allreduce_latency_s: Number | None = None
    floor_s: Number | None = None
    host_s: Number | None = None
    overlap: str | None = None
    name: str | None = None


class _MeasuredSpec(InlineProfile):
    """The keys every measured profile document shares (simulator/costs/latency.py profile_to_dict)."""

    name: str | None = None
    model: str | None = None
    provenance: dict[str, Any] | None = None
    fit: dict[str, Any] | None = None
    measurements: list[dict[str, Any]] | None = None


class LinearSpec(_MeasuredSpec):
    """`{kind: linear, coefficients: {term: seconds}, ...}`: seconds per step as a sum of terms."""

    kind: Literal["linear"]
    coefficients: dict[str, Number] | None = None


class TableSpec(_MeasuredSpec):
    """`{kind: table, measurements: [...], ...}`: interpolated between measured steps."""

    kind: Literal["table"]


class StructuredSpec(_MeasuredSpec):
    """`{kind: structured, form, coefficients, ...}`: a step model of named terms (simulator/costs/step_model.py)."""

    kind: Literal["structured"]
    form: str | None = None
    coefficients: dict[str, Number] | None = None


KINDS = ("roofline", "linear", "table", "structured")


def _kind(value: Any) -> Any:
    """The tag of an inline profile: its `kind` (a mapping's key, a spec's field)."""
    return value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)


ProfileSpec = Annotated[
    Union[Annotated[RooflineSpec, Tag("roofline")], Annotated[LinearSpec, Tag("linear")],
          Annotated[TableSpec, Tag("table")], Annotated[StructuredSpec, Tag("structured")]],
    Discriminator(_kind, custom_error_type="profile_kind",
                  custom_error_message=f"expected an inline profile whose kind is one of {KINDS}")]
