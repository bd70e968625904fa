"""Draft cost models: how long one drafter's drafting phase takes for its own sub-batch.

- `autoregressive`: a draft model runs k forward steps of its latency profile, one token per
  sequence each (a small model, an int8 or layer-truncated copy).
- `whole_proposal`: one profile evaluation prices the whole phase, batched_tokens = tokens
  proposed (the published EAGLE-3 fit).
- `fraction_of_verify`: a fixed fraction of the same step's verify time (prompt lookup n-gram).
- `constant`: fixed seconds per drafting phase (bounds experiments, tests).
- `engine_step`: vLLM V1's proposer, run once per engine step after the forward over every token the
  step scheduled (prefill chunks included: a draft model prefills the prompt there) for the requests
  that sampled; priced profile(sampling sequences, step tokens, step KV tokens) whether or not anything
  is proposed (what `draftsim validate` fits from vLLM's step records). Charged by the kernels once per SD step.
Every kind but `engine_step` may add `host_s`: host-side seconds per drafting phase that proposes anything (the
proposer's CPU work beside its GPU forwards; a measured-ops drafter's profile prices only the forwards,
calibration/op_drafter.py). A drafter that proposes nothing this step costs nothing. `prefill_time` prices the drafter's own pass
over a prompt (a draft model or EAGLE head runs one; prompt lookup and constant costs have none).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from simulator.costs.latency import LatencyProfile
from simulator.costs.profile_spec import ProfileSpec
from simulator.costs.roofline import profile_from_ref
from simulator.engine.rules.pricing import DRAFT_KIND_CODES, DraftTerms, draft_time, engine_step_time, prefill_time
from traces.config_base import StrictModel, validate_model

DRAFT_COST_KINDS = ("autoregressive", "whole_proposal", "fraction_of_verify", "constant", "engine_step")


class DraftCostConfig(StrictModel):
    """One entry of an experiment's `drafters:` section: how a drafter's drafting phase is priced (validated once,
    at load; `cost` builds its DraftCost once, so an inline roofline resolves its model and GPU once)."""

    kind: Literal[DRAFT_COST_KINDS]
    profile: Annotated[str, Field(min_length=1)] | ProfileSpec | None = Field(None, description=(
        "a profile name or file, or an inline profile (simulator/costs/profile_spec.py), e.g. {kind: roofline, "
        "model, gpu, tp}: the draft model on its own GPU"))
    fraction: float = Field(0.0, ge=0, le=1000, description="fraction_of_verify: share of the verify time")
    seconds: float = Field(0.0, ge=0, le=3600, description="constant: seconds per drafting phase")
    host_s: float = Field(0.0, ge=0, le=60, allow_inf_nan=False,
                          description="host-side seconds per drafting phase that proposes anything")

    _cost: "DraftCost | None" = PrivateAttr(None)

    @model_validator(mode="after")
    def _needs(self) -> "DraftCostConfig":
        if self.kind in ("autoregressive", "whole_proposal", "engine_step") and not self.profile:
            raise ValueError(f"kind {self.kind!r} needs a latency profile (key 'profile')")
        if self.kind == "engine_step" and self.host_s:
            raise ValueError("kind 'engine_step' prices the proposer's whole per-step work with its profile; "
                             "host_s applies to the other kinds")
        return self

    def cost(self, where: str = "drafter cost") -> "DraftCost":
        """The DraftCost this entry prices with, built on first use and kept (errors name `where` and the key)."""
        if self._cost is None:
            profile = profile_from_ref(self.profile, f"{where}.profile") if self.profile else None
            self._cost = DraftCost(kind=self.kind, profile=profile, fraction=self.fraction, seconds=self.seconds,
                                   host_s=self.host_s)
        return self._cost


@dataclass
class DraftCost:
    """Prices one drafting phase of one drafter over the sequences it drafts for."""

    kind: str
    profile: LatencyProfile | None = None
    fraction: float = 0.0
    seconds: float = 0.0
    host_s: float = 0.0  # host seconds per drafting phase that proposes (not with engine_step)

    def __post_init__(self) -> None:
        if self.kind not in DRAFT_COST_KINDS:
            raise ValueError(f"unknown draft cost kind {self.kind!r}; expected one of {DRAFT_COST_KINDS}")
        if self.kind in ("autoregressive", "whole_proposal", "engine_step") and self.profile is None:
            raise ValueError(f"draft cost kind {self.kind!r} needs a latency profile")
        if self.kind == "engine_step" and self.host_s:
            raise ValueError("draft cost kind 'engine_step' takes no host_s (its profile prices the whole step)")
        for name in ("fraction", "seconds", "host_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= v < float("inf")):
                raise ValueError(f"draft cost {name}: expected a finite number >= 0, got {v!r}")
        self.terms = DraftTerms(DRAFT_KIND_CODES[self.kind], float(self.seconds), float(self.fraction),
                                self.profile is not None and self.kind != "engine_step", float(self.host_s))

    def draft_time(self, num_seqs: int, proposed_tokens: int, k_max: int, kv_tokens: int,
                   verify_time: float) -> float:
        """Seconds to draft for `num_seqs` sequences proposing `proposed_tokens` in all (up to k_max each)."""
        return draft_time(self.terms, self.profile, num_seqs, proposed_tokens, k_max, kv_tokens, verify_time)

    def engine_step_time(self, sampling_seqs: int, step_tokens: int, kv_tokens: int) -> float:
        """`engine_step` kind: the proposer's seconds in one engine step (0 for other kinds or no sampling)."""
        return engine_step_time(self.terms, self.profile, sampling_seqs, step_tokens, kv_tokens)

    def prefill_time(self, num_seqs: int, prompt_tokens: int, kv_tokens: int) -> float:
        """Seconds for the drafter's own prefill of `prompt_tokens` over `num_seqs` sequences (`engine_step` drafters
        price the prompt inside their per-step cost, so none here)."""
        return prefill_time(self.terms, self.profile, num_seqs, prompt_tokens, kv_tokens)


def draft_cost_from_config(spec: "DraftCostConfig | dict[str, Any]", where: str = "drafter cost") -> DraftCost:
    """Build a DraftCost from a validated `DraftCostConfig` (or a mapping, validated here); errors name the key."""
    if not isinstance(spec, DraftCostConfig):
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: expected a mapping with 'kind', got {spec!r}")
        spec = validate_model(DraftCostConfig, spec, where)
    return spec.cost(where)
