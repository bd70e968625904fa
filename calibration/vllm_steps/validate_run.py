"""`draftsim validate`: its config, the prompts and Poisson offsets it sends, and one vLLM run per mode.

Each mode runs in ONE engine (calibration/vllm_steps/loadgen.py): a warm-up, calibration groups on their own
prompts (profiles + acceptance for the predictive simulation, and the measured capacity), then a Poisson
stream per load level at `fraction x capacity` requests/s on disjoint prompts. Prompts are MT-Bench/Vicuna
chat, HumanEval and HumanEval code edits interleaved (calibration/prompts.py), each used once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from calibration.vllm_steps.backend import run_under_vllm
from calibration.vllm_steps.calibrate import Mode, calibration_groups, parse_mode, warmup_group

DEFAULT_TOLERANCES = {
    "replay": {"ttft_mean_s": 15.0, "tpot_mean_s": 5.0, "e2e_mean_s": 5.0, "throughput_tok_s": 5.0},
    "predictive": {"ttft_mean_s": 10.0, "tpot_mean_s": 10.0, "e2e_mean_s": 10.0, "throughput_tok_s": 10.0},
}


from traces.config_base import StrictModel as _Strict  # noqa: E402


class CalibrationPart(_Strict):
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1,
                                   description="requests submitted together, one group each (measures capacity)")
    staggered: list[int] = Field(default_factory=list, description=(
        "groups of this many requests sent one every gap_s seconds: single-prompt prefills mixed into decode "
        "steps, the step shape of a served stream, which batched groups never show"))
    gap_s: float = Field(0.2, gt=0, le=60)
    gaps_s: list[float] | None = Field(None, description=(
        "one gap per staggered group (overrides gap_s): different gaps give different mixes of prompts joining "
        "decodes, like a load run's arrivals"))
    gap_steps: list[float] | None = Field(None, description=(
        "one gap per staggered group in units of the batch-1 group's seconds per output token (measured just "
        "before in the same engine; overrides gap_s and gaps_s): gaps that scale with the machine's speed"))
    max_tokens: int = Field(32, ge=1)

    @model_validator(mode="after")
    def _gaps(self) -> "CalibrationPart":
        if self.gap_steps is not None and (len(self.gap_steps) != len(self.staggered)
                                           or any(not 0 < g <= 1000 for g in self.gap_steps)
                                           or 1 not in self.batch_sizes):
            raise ValueError(f"calibration.gap_steps: expected {len(self.staggered)} numbers in (0, 1000] (one per "
                             f"staggered group) and a batch size of 1 to measure them on, got {self.gap_steps}")
        if self.gaps_s is not None and (len(self.gaps_s) != len(self.staggered)
                                        or any(not 0 < g <= 60 for g in self.gaps_s)):
            raise ValueError(f"calibration.gaps_s: expected {len(self.staggered)} gaps in (0, 60] s (one per "
                             f"staggered group), got {self.gaps_s}")
        return self

    def stagger_gaps(self) -> list[float]:
        return list(self.gaps_s) if self.gaps_s is not None else [self.gap_s] * len(self.staggered)


class LoadPart(_Strict):
    fractions: list[float] = Field(min_length=3, description="load levels as fractions of the measured capacity")
    requests: int = Field(12, ge=2, description="requests per load level")
    max_tokens: int = Field(32, ge=1, description="cap on output tokens (requests may stop earlier at EOS)")
    min_tokens: int = Field(0, ge=0, description="EOS is ignored before this many output tokens")
    pause_s: float = Field(2.0, ge=0, le=600, description="idle seconds before each level")

    @model_validator(mode="after")
    def _fractions(self) -> "LoadPart":
        if any(not (0 < f <= 2) for f in self.fractions):
            raise ValueError(f"load.fractions: expected numbers in (0, 2], got {self.fractions}")
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"load.min_tokens: expected at most max_tokens ({self.max_tokens}), got {self.min_tokens}")
        return self


class ValidateConfig(_Strict):
    """What `draftsim validate CONFIG` runs and the errors it tolerates (percent, per kind and metric)."""

    target: str = "smollm2-135m-instruct"
    dtype: str = "float32"
    modes: list[str] = Field(min_length=1, description="ar, ngram:K, draft_model:K:PATH or draft_model:K:layers:N")
    workloads: list[str] = Field(default_factory=lambda: ["chat", "code", "code-edit"], min_length=1)
    max_num_seqs: int = Field(8, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=1)
    max_model_len: int = Field(1024, ge=16)
    memory_utilization: float = Field(0.3, gt=0, le=1)
    min_n: int = Field(2, ge=1, description="n-gram prompt_lookup_min")
    max_n: int = Field(4, ge=1, description="n-gram prompt_lookup_max")
    seed: int = 0
    timeout_s: int = Field(1800, ge=10, description="per mode, engine start included")
    calibration: CalibrationPart = Field(default_factory=CalibrationPart)
    load: LoadPart
    step_model: Literal["structured", "linear"] = Field("structured", description=(
        "target step-time model fitted on the recorded steps: structured (prefill, decode, verify, per-sequence "
        "and KV-read terms, simulator/costs/step_model.py) or the one linear profile"))
    tolerances: dict[str, dict[str, float]] = Field(default_factory=lambda: DEFAULT_TOLERANCES)

    @model_validator(mode="after")
    def _check(self) -> "ValidateConfig":
        for i, m in enumerate(self.modes):
            try:
                parse_mode(m)
            except ValueError as e:
                raise ValueError(f"modes.{i}: {e}") from None
        for kind, tol in self.tolerances.items():
            if kind not in ("replay", "predictive"):
                raise ValueError(f"tolerances.{kind}: expected replay or predictive")
            for metric, v in tol.items():
                if v <= 0:
                    raise ValueError(f"tolerances.{kind}.{metric}: expected a percentage > 0, got {v}")
        return self

    def parsed_modes(self) -> list[Mode]:
        return [parse_mode(m) for m in self.modes]


def load_config(path: str | Path) -> ValidateConfig:
    """The validated config; errors name the file and the key."""
    from traces.parsing import load_yaml_file

    from traces.config_base import validate_document

    return validate_document(ValidateConfig, load_yaml_file(Path(path)), str(path), "validate config")


def poisson_unit_offsets(n: int, rng: np.random.Generator) -> list[float]:
    """Send offsets of a unit-rate Poisson stream, first at 0 (divided by the rate inside the run)."""
    gaps = rng.exponential(1.0, size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def interleaved(pools: list[list[Any]]) -> list[Any]:
    """Round-robin over the workloads' prompt lists (each used once), until all run out."""
    out = []
    for i in range(max(len(p) for p in pools)):
        out += [p[i] for p in pools if i < len(p)]
    return out


def plan_prompt_count(cfg: ValidateConfig) -> int:
    """Distinct prompts a mode's plan uses: calibration groups, load levels and the warm-up."""
    return (sum(cfg.calibration.batch_sizes) + sum(cfg.calibration.staggered)
            + cfg.load.requests * len(cfg.load.fractions) + 1)


def build_plan(cfg: ValidateConfig, mode: Mode, model_folder: str, prompts: list[list[int]],
               categories: list[str] | None = None) -> dict[str, Any]:
    """The loadgen plan of one mode: calibration groups take the first prompts, load levels the next ones;
    each prompt's workload category rides along (the predictive simulation matches acceptance by it)."""
    need = plan_prompt_count(cfg) - 1
    if len(prompts) < need:
        raise ValueError(f"validate needs {need} distinct prompts, the workloads {cfg.workloads} give {len(prompts)}")
    cats = categories if categories is not None else [""] * len(prompts)
    if len(cats) != len(prompts):
        raise ValueError(f"{len(cats)} categories for {len(prompts)} prompts")
    groups, i = calibration_groups(prompts, cats, cfg.calibration.batch_sizes,
                                   list(zip(cfg.calibration.staggered, cfg.calibration.stagger_gaps())),
                                   cfg.calibration.max_tokens, gap_steps=cfg.calibration.gap_steps)
    groups = [warmup_group(prompts[-1], cats[-1])] + groups
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(len(cfg.load.fractions))]
    levels, level_cats, offsets = [], [], []
    for rng in rngs:
        levels.append(prompts[i:i + cfg.load.requests])
        level_cats.append(cats[i:i + cfg.load.requests])
        offsets.append(poisson_unit_offsets(cfg.load.requests, rng))
        i += cfg.load.requests
    return {"model": model_folder, "dtype": cfg.dtype, "spec": mode.spec(cfg.min_n, cfg.max_n),
            "max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "max_model_len": cfg.max_model_len, "memory_utilization": cfg.memory_utilization, "seed": cfg.seed,
            "calibration": groups,
            "load": {"fractions": list(cfg.load.fractions), "unit_offsets": offsets, "prompts": levels,
                     "categories": level_cats, "max_tokens": cfg.load.max_tokens,
                     "min_tokens": cfg.load.min_tokens, "pause_s": cfg.load.pause_s}}


def run_mode(cfg: ValidateConfig, mode: Mode, model_folder: str, prompts: list[list[int]], out: str | Path,
             *, categories: list[str] | None = None, python: str | None = None) -> dict[str, Any]:
    """One engine for `mode`: calibration groups, then the load levels (vLLM killed on any exit)."""
    return run_under_vllm("calibration.vllm_steps.loadgen", build_plan(cfg, mode, model_folder, prompts, categories),
                          Path(out) / mode.label, python=python, timeout_s=cfg.timeout_s,
                          timeout_key="`timeout_s` (seconds per mode) in the validate config")
