"""Published real-GPU SD measurements kept as data (benchmarks/data/published_gpu_rows.yaml) and draftsim's
serving-mode prediction of each from the row's own inputs.

A row holds the measured output throughput without and with speculation (its speedup is their ratio, as its source
computes it; a source that publishes only the speedup states it) and the setup: serving engine, catalog model, GPU
and tensor parallelism, concurrency and request count, mean lengths, the drafter (vLLM method, model, k) and the
acceptance length the same source measured. draftsim replays it as the
benchmark ran: `concurrency` closed-loop clients, `requests` requests of the row's mean lengths, acceptance i.i.d.
at the rate whose expected tokens per step at k equal the stated length (traces/acceptance_levels.iid_rate), and
speedup = SD over AR whole-run output throughput (first arrival to last completion, `vllm bench serve`'s
"Output token throughput"). Inputs the source does not give are named per row in `borrowed`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from simulator.reproductions.specbench import EAGLE_DRAFT_PROFILE as EAGLE_HEAD_PROFILE  # the only public head fit
from simulator.reproductions.specbench import STEP_OVERHEAD_S  # the release's fitted per-step overhead (vLLM 0.10.1)
from traces.config_base import StrictModel, error_lines
from traces.errors import TraceFormatError

ROWS_FILE = Path(__file__).resolve().parent / "data" / "published_gpu_rows.yaml"
MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's chunked-prefill token budget in the sources' server logs
KV_CAPACITY_TOKENS = 1_000_000  # no row nears it: at most 32 requests of ~300 tokens each are resident


class Drafter(StrictModel):
    """The speculative method as the source ran it: vLLM's `method`, the draft model and k."""

    method: Literal["draft_model", "eagle", "eagle3"]
    model: str
    k: int = Field(ge=1, le=16)
    tp: int | None = Field(None, ge=1)  # draft_model: the draft model's tensor parallelism (vLLM: the target's)


class PublishedRow(StrictModel):
    """One published measurement and the inputs draftsim replays it from."""

    claim: str
    source: str
    model: str
    gpu: str
    tp: int = Field(ge=1)
    dataset: str
    concurrency: int = Field(ge=1)
    requests: int = Field(ge=1)
    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=2)
    drafter: Drafter
    acceptance_length: float = Field(ge=1)
    engine: Literal["vllm", "sglang"] = "vllm"  # the serving engine the source measured
    throughput_ar_tok_s: float | None = Field(None, gt=0)
    throughput_sd_tok_s: float | None = Field(None, gt=0)
    stated_speedup: float | None = Field(None, gt=0)  # only where the source gives no throughputs
    borrowed: list[str] = Field(default_factory=list)
    note: str = ""  # what explains a disagreement: the input the source does not give

    @model_validator(mode="after")
    def _one_measurement(self) -> "PublishedRow":
        both = self.throughput_ar_tok_s is not None and self.throughput_sd_tok_s is not None
        either = self.throughput_ar_tok_s is not None or self.throughput_sd_tok_s is not None
        if either and not both:
            raise ValueError("give both throughput_ar_tok_s and throughput_sd_tok_s, or neither")
        if both == (self.stated_speedup is not None):
            raise ValueError("give either the two throughputs or stated_speedup (when the source gives no "
                             "throughputs), not both")
        return self

    @property
    def speedup(self) -> float:
        """The measured speedup: SD over AR output throughput, or the source's stated figure."""
        if self.stated_speedup is not None:
            return self.stated_speedup
        return self.throughput_sd_tok_s / self.throughput_ar_tok_s


class RowsFile(StrictModel):
    rows: list[PublishedRow] = Field(min_length=1)


def load_rows(path: str | Path = ROWS_FILE) -> list[PublishedRow]:
    """The rows of a data file; a bad file raises TraceFormatError naming the file and the key."""
    from traces.catalog import get_gpu, get_model
    from traces.parsing import load_yaml_file

    doc = load_yaml_file(path)
    if not isinstance(doc, dict):
        raise TraceFormatError(str(path), f"expected a mapping with key 'rows', got {type(doc).__name__}")
    try:
        rows = RowsFile.model_validate(doc).rows
    except ValidationError as e:
        loc, msg = error_lines(e, model=RowsFile)[0]
        raise TraceFormatError(str(path), msg, field=loc) from None
    for i, r in enumerate(rows):
        for key, lookup in (("model", get_model), ("gpu", get_gpu)):
            try:
                lookup(getattr(r, key))
            except (KeyError, ValueError) as e:
                raise TraceFormatError(str(path), f"not in the catalog: {e}", field=f"rows[{i}].{key}") from None
        if r.drafter.method == "draft_model":
            try:
                get_model(r.drafter.model)
            except (KeyError, ValueError) as e:
                raise TraceFormatError(str(path), f"a draft_model drafter must be a catalog model: {e}",
                                       field=f"rows[{i}].drafter.model") from None
        if r.acceptance_length > r.drafter.k + 1:
            raise TraceFormatError(str(path), f"acceptance length {r.acceptance_length} exceeds k + 1 = "
                                   f"{r.drafter.k + 1}", field=f"rows[{i}].acceptance_length")
    return rows


def drafter_cost(row: PublishedRow, bandwidth_util: float | None = None) -> dict[str, Any]:
    """The drafter's price: a draft model by the catalog roofline on the row's GPU at its tensor parallelism
    (vLLM's default: the target's; `bandwidth_util` as the target's when given); an EAGLE or EAGLE-3 head by the
    8B release's EAGLE-3 fit (borrowed: no other head fit is public)."""
    d = row.drafter
    if d.method == "draft_model":
        prof = {"kind": "roofline", "model": d.model, "gpu": row.gpu, "tp": d.tp or row.tp}
        return {"kind": "autoregressive", "profile": prof if bandwidth_util is None
                else {**prof, "bandwidth_util": bandwidth_util}}
    return {"kind": "whole_proposal", "profile": EAGLE_HEAD_PROFILE}


def ops_drafter_cost(row: PublishedRow, folder: Path, version: str = "0.24.0") -> dict[str, Any]:
    """The drafter priced from aiconfigurator-core's measured op tables (calibration/op_drafter.py: a draft model as
    itself, an EAGLE / EAGLE-3 head as one layer of the target's shape, at the row's tensor parallelism) plus the
    stated host term per drafting phase; the profile written into `folder`. Needs the optional extra."""
    from calibration.op_drafter import build_drafter_profile, drafter_cost as op_cost
    from simulator.costs.latency import save_profile

    d = row.drafter
    tp = (d.tp or row.tp) if d.method == "draft_model" else row.tp
    label = d.model if d.method == "draft_model" else f"{d.method}-head-{row.model}"
    path = folder / f"{label.replace('/', '_')}-{row.gpu}-tp{tp}-ops.yaml"
    if not path.exists():
        save_profile(build_drafter_profile(d.method, row.model, row.gpu, tp, version,
                                           drafter=d.model if d.method == "draft_model" else None), path)
    return op_cost(str(path))


def row_config(row: PublishedRow, target: Any, seed: int = 0, drafter_bandwidth_util: float | None = None,
               sd: bool = True, drafter: dict[str, Any] | None = None) -> dict[str, Any]:
    """The experiment that replays `row` with `target` as the target's profile: AR and (`sd`) SD at the row's k;
    `drafter` replaces the drafter's default price (drafter_cost)."""
    from traces.acceptance_levels import iid_rate

    d = row.drafter
    rate = iid_rate(row.acceptance_length, d.k)
    return {
        "name": "published-row", "seed": seed,
        "traces": {"synthetic": {
            "target": row.model, "dataset": row.dataset, "num_requests": row.requests,
            "description": f"{row.claim}: mean lengths, i.i.d. acceptance at the stated length",
            "drafters": {"d": {"kind": "draft_model" if d.method == "draft_model" else "eagle",
                               "cost_model": d.model}},
            "categories": {"all": {"weight": 1.0,
                                   "prompt": {"dist": "constant", "value": row.prompt_tokens},
                                   "output": {"dist": "constant", "value": row.output_tokens},
                                   "acceptance": {"d": {"model": "iid", "rate": rate, "max_acc": d.k + 1}}}}}},
        "workload": {"num_requests": row.requests, "arrival": {"kind": "closed_loop", "clients": row.concurrency}},
        "server": {"target_profile": target, "step_overhead_s": STEP_OVERHEAD_S,
                   "max_num_seqs": max(256, row.concurrency), "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
                   "block_size": 16, "kv_capacity_tokens": KV_CAPACITY_TOKENS, "num_target_gpus": row.tp},
        "drafters": {"d": drafter or drafter_cost(row, drafter_bandwidth_util)},
        "runs": [{"name": "AR", "mode": "ar"}] + ([{"name": "SD", "mode": "sd",
                                                    "policy": {"name": "fixed", "drafter": "d", "k": d.k}}] if sd else []),
        "baseline": "AR",
    }


def predicted_speedup(row: PublishedRow, target: Any, seed: int = 0,
                      drafter_bandwidth_util: float | None = None, drafter: dict[str, Any] | None = None) -> float:
    """draftsim's speedup for `row`: SD over AR whole-run output throughput."""
    from experiments.run import run_experiment

    res = run_experiment(row_config(row, target, seed, drafter_bandwidth_util, drafter=drafter), plots=False)
    ar, sd = res.summary["AR"]["throughput_tok_s"], res.summary["SD"]["throughput_tok_s"]
    return sd / ar


def ar_throughput(row: PublishedRow, target: Any, seed: int = 0) -> float:
    """draftsim's AR whole-run output throughput for `row`'s workload."""
    from experiments.run import run_experiment

    return run_experiment(row_config(row, target, seed, sd=False), plots=False).summary["AR"]["throughput_tok_s"]


def ar_matched_bandwidth_util(row: PublishedRow, seed: int = 0, rel_tol: float = 0.002, max_iter: int = 8) -> float:
    """The roofline `bandwidth_util` at which draftsim's AR throughput equals the row's measured AR throughput
    (secant steps on log throughput against log util, from the stated default 0.8). One number fitted to the
    source's own baseline run: the SD figure is then a prediction of the speedup given the baseline's speed."""
    import math

    if row.throughput_ar_tok_s is None:
        raise ValueError(f"{row.claim}: the source gives no AR throughput to fit the bandwidth to")

    def log_gap(u: float) -> float:
        t = {"kind": "roofline", "model": row.model, "gpu": row.gpu, "tp": row.tp, "bandwidth_util": u}
        return math.log(ar_throughput(row, t, seed) / row.throughput_ar_tok_s)

    u0, g0 = 0.8, log_gap(0.8)
    u1 = min(1.0, u0 * math.exp(-g0))
    for _ in range(max_iter):
        g1 = log_gap(u1)
        if abs(g1) < rel_tol:
            return u1
        slope = (g1 - g0) / (math.log(u1) - math.log(u0)) if u1 != u0 else 1.0
        u0, g0 = u1, g1
        u1 = min(1.0, u1 * math.exp(-g1 / (slope if slope > 0.05 else 1.0)))
    raise RuntimeError(f"{row.claim}: no bandwidth_util in (0, 1] matches the measured AR throughput "
                       f"{row.throughput_ar_tok_s} tok/s within {rel_tol:.1%} after {max_iter} steps")


# aiconfigurator-core's model configs by catalog name (Llama-3.3-70B has Llama-3.1-70B's architecture)
AIC_MODELS = {"llama3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
              "llama3.3-70b": "meta-llama/Meta-Llama-3.1-70B", "qwen3-8b": "Qwen/Qwen3-8B"}
# the table versions used per engine: vLLM's is the one calibration/op_profile.py uses; SGLang's is h100_sxm's
# "current" slot (0.5.14; the older 0.5.6.post2 set is outside its queryable slots)
AIC_VERSIONS = {"vllm": "0.24.0", "sglang": "0.5.14"}


def aiconfigurator_speedup(row: PublishedRow) -> tuple[float | None, str]:
    """AIConfigurator's own speedup for `row` and how it was made, or None and why it cannot make one
    (`aiconfigurator_speedup_at` at the row's setup)."""
    return aiconfigurator_speedup_at(row.model, row.gpu, row.engine, row.tp, row.concurrency, row.prompt_tokens,
                                     row.output_tokens, row.drafter.method, row.drafter.k, row.acceptance_length)


def aiconfigurator_speedup_at(model: str, gpu: str, engine: str, tp: int, concurrency: int, prompt_tokens: float,
                              output_tokens: float, method: str, k: int,
                              acceptance_length: float) -> tuple[float | None, str]:
    """AIConfigurator's own speedup for one setup and how it was made, or None and why it cannot make one.

    aiconfigurator-core 0.12.0 models speculation only as MTP: `nextn` extra decoder layers of the target's shape
    per decode iteration, the accepted tokens applied above it. An EAGLE head is one such layer run k times, so
    an EAGLE drafter is priced as nextn = k: speedup = acceptance length x t_decode(nextn 0) / t_decode(nextn k),
    at the concurrency and mean lengths. A separate draft model is outside that path."""
    from calibration.op_profile import SYSTEMS

    if method not in ("eagle", "eagle3"):
        return None, f"none: a separate {method} drafter is outside its speculative path (MTP only)"
    if model not in AIC_MODELS or gpu not in SYSTEMS:
        return None, f"none: no aiconfigurator-core model config or system for {model} on {gpu}"
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ModuleNotFoundError:
        return None, "not run: aiconfigurator-core is not installed (optional extra `aiconfigurator`)"

    def step(nextn: int) -> float:
        h = EngineHandle.compile(AIC_MODELS[model], SYSTEMS[gpu], engine, backend_version=AIC_VERSIONS[engine],
                                 tp_size=tp, nextn=nextn)
        return h.decode_step_latency(concurrency, prompt_tokens, output_tokens)

    s = acceptance_length * step(0) / step(k)
    return s, (f"{s:.2f}x (aiconfigurator-core 0.12.0, {engine} {AIC_VERSIONS[engine]} {SYSTEMS[gpu]} tables, "
               f"{AIC_MODELS[model]}, EAGLE head as nextn = {k})")
