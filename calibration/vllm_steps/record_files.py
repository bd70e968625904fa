"""The one reader of the files a vLLM calibration or validation run leaves in its folder (result.json,
load.json, plan.json, calibration.json, the step-record header): regular files only, at most
traces.limits.MAX_TEXT_BYTES, parsed by traces/parsing.py, checked against a typed model, every error naming the
file and the field. A half-written or empty file (an interrupted run) is said to be one, not reported as a JSON
syntax error at column 1.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from traces.config_base import validate_document
from traces.errors import TraceFormatError
from traces.limits import MAX_NUM_REQUESTS, MAX_TOKENS_PER_REQUEST
from traces.parsing import parse_json, read_text

_RECORD = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)  # other keys: kept for provenance
TokenId = Annotated[int, Field(ge=0, lt=2**31)]
Seconds = Annotated[float, Field(ge=0)]


class ClientRecord(BaseModel):
    """One request as the client recorded it: its id and prompt and output token ids."""

    model_config = _RECORD
    id: str | int
    prompt_token_ids: list[TokenId] = Field(max_length=MAX_TOKENS_PER_REQUEST)
    output_token_ids: list[TokenId] = Field(max_length=MAX_TOKENS_PER_REQUEST)
    spec_decode_metrics: dict[str, Any] | None = None


class GroupRecord(BaseModel):
    """One group of requests sent together (a calibration group, a warm-up, a load level)."""

    model_config = _RECORD
    name: str | None = None
    wall_start: Seconds | None = None
    requests: list[ClientRecord] = Field(max_length=MAX_NUM_REQUESTS)


class RunResult(BaseModel):
    """A mode's result.json: its groups (`calibration` from the load generator, `groups` from the offline
    backend), the load levels of a validation run, and the measured capacity."""

    model_config = _RECORD
    calibration: list[GroupRecord] | None = None
    groups: list[GroupRecord] | None = None
    levels: list[GroupRecord] | None = None
    capacity_req_s: Seconds | None = None
    dtype: str | None = None

    @model_validator(mode="after")
    def _one_group_list(self) -> "RunResult":
        if (self.calibration is None) == (self.groups is None):
            raise ValueError("calibration: expected exactly one of `calibration` (load generator) and `groups` "
                             "(offline backend)")
        return self


class StepHeader(BaseModel):
    """The first line of a step-record file: the engine settings the fits and the written config use."""

    model_config = _RECORD
    record_version: int
    max_num_seqs: int | None = Field(default=None, ge=1, le=1 << 20)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_REQUEST)
    block_size: int | None = Field(default=None, ge=1, le=1 << 16)
    vllm_version: str | None = None
    distribution: str | None = None
    cpu_count: int | None = Field(default=None, ge=1)


def read_json_record(path: str | Path, what: str = "record") -> Any:
    """A run folder's JSON file, bounded and parsed (traces/parsing.py); an empty file is an interrupted run."""
    text = read_text(path)
    if not text.strip():
        raise TraceFormatError(str(path), f"empty {what} (the run that writes it was interrupted, or is still "
                               "running); rerun it without --analyse-only")
    try:
        return parse_json(text, str(path))
    except TraceFormatError as e:
        if "Expecting" in str(e) or "Unterminated" in str(e):
            raise TraceFormatError(str(path), f"incomplete or not JSON ({str(e).split(': ', 1)[-1]}); a {what} "
                                   "cut short by an interrupted run; rerun it without --analyse-only") from None
        raise


def read_run_result(path: str | Path) -> dict[str, Any]:
    """result.json, checked against RunResult (types, bounds, one group list) before any field is used."""
    doc = read_json_record(path, "run result")
    validate_document(RunResult, doc, str(path), "run result")
    return doc


ENGINE_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "block_size")


def check_step_header(header: Any, path: str | Path) -> dict[str, Any]:
    """A step-record header checked against StepHeader; the header itself, for provenance."""
    validate_document(StepHeader, header, f"{path}, line 1, field 'header'", "step-record header")
    return header


def require_engine_settings(header: dict[str, Any], path: str | Path) -> None:
    """The engine settings a fit or a written config reads from the header are present (their types and bounds
    were checked on load)."""
    for key in ENGINE_SETTINGS:
        if header.get(key) is None:
            raise TraceFormatError(str(path), "missing: the engine setting the step recorder writes",
                                   line=1, field=f"header.{key}")


__all__ = ["ClientRecord", "GroupRecord", "RunResult", "StepHeader", "check_step_header", "read_json_record",
           "read_run_result", "require_engine_settings"]
