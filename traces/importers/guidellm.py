"""GuideLLM benchmark report (benchmarks.json / .yaml) -> one measured run per benchmark in it.

Schema read from guidellm 0.8.1 (the PyPI wheel: src/guidellm/benchmark/schemas/report.py,
schemas/base/request_stats.py, schemas/base/info.py, backends/openai/request_handlers.py; the same fields as
vllm-project/guidellm @ ee7a7745, v0.7.3-12, plus `response_metrics`): `GenerativeBenchmarksReport` =
{metadata: {version: 2, guidellm_version, ...}, config, benchmarks: [GenerativeBenchmark]}; saved with
`model_dump(mode="json")`, so computed fields are in the file. A benchmark has `config.strategy` ({type_:
synchronous | concurrent | throughput | constant | poisson | trace, rate?, streams?}) and `requests` =
{successful, errored, incomplete} lists of `GenerativeRequestStats`: `request_id`, `prompt_tokens`,
`output_tokens`, `info.timings` (`request_start`, `first_token_iteration`, `last_token_iteration`,
`request_end`, `token_iterations`; epoch seconds) and `response_metrics`: vLLM's per-request `metrics`
object passed through as received, whose `speculative_decoding` ({acceptance_histogram, num_spec_tokens,
num_spec_steps, num_accepted_draft_tokens?, num_draft_tokens?}) is read into the run's spec-decode counters
(the same block `vllm bench serve` gives, with the proposal rate) and per-request histograms.

GuideLLM keeps only the first and last token times of a request, not every chunk's: each request's inter-token
gaps are stored as its mean gap (last - first) / (token_iterations - 1), repeated; the pooled mean ITL is
exact, ITL percentiles are not (run.json says so; `compare` leaves them out). GuideLLM's `time_per_output_token`
is (last token - request start) / output tokens, the first token included; draftsim's TPOT (vLLM's) is
(request end - first token) / (output tokens - 1): run.json gives both means, from the per-request times.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from traces.errors import TraceFormatError
from traces.measured_run import (MeasuredRequest, MeasuredRun, arrival_check, check_request, cold_first_request,
                                 number)
from traces.parsing import load_yaml_file, parse_json, read_text

READ_AT = "guidellm 0.8.1 (PyPI wheel) src/guidellm/benchmark/schemas/report.py, schemas/base/request_stats.py"
ITL_NOTE = "per-request mean gap repeated (GuideLLM keeps first and last token times only): mean exact, no percentiles"
TPOT_DEFINITIONS = {"draftsim": "(request end - first token) / (output tokens - 1), vLLM's definition",
                    "guidellm": "(last token - request start) / output tokens: the first token included"}
SPEC_KEYS = ("acceptance_histogram", "num_spec_tokens", "num_spec_steps")


def _get(doc: Any, key: str, where: str, fld: str, kind: type | tuple = dict) -> Any:
    if not isinstance(doc, dict) or key not in doc:
        raise TraceFormatError(where, "missing", field=fld)
    v = doc[key]
    if not isinstance(v, kind) or isinstance(v, bool):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TraceFormatError(where, f"expected {want}, got {type(v).__name__}", field=fld)
    return v


def _spec(doc: Any, where: str, fld: str) -> dict[str, Any] | None:
    """A request's vLLM `speculative_decoding` metrics (from `response_metrics`), checked; None when absent."""
    rm = doc.get("response_metrics") if isinstance(doc, dict) else None
    if rm is None:
        return None
    if not isinstance(rm, dict):
        raise TraceFormatError(where, f"expected an object, got {type(rm).__name__}", field=f"{fld}.response_metrics")
    sd = rm.get("speculative_decoding")
    if sd is None:
        return None
    f = f"{fld}.response_metrics.speculative_decoding"
    if not isinstance(sd, dict) or any(k not in sd for k in SPEC_KEYS):
        raise TraceFormatError(where, f"expected an object with {', '.join(SPEC_KEYS)}", field=f)
    h, k, n = sd["acceptance_histogram"], sd["num_spec_tokens"], sd["num_spec_steps"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or not isinstance(h, list) or len(h) != k + 1 or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in h) or sum(h) != n:
        raise TraceFormatError(where, f"expected num_spec_tokens k >= 1 and an acceptance_histogram of k + 1 counts "
                               f"summing to num_spec_steps ({n!r}), got k {k!r}, histogram {h!r}", field=f)
    accepted = sum(j * c for j, c in enumerate(h))
    if sd.get("num_accepted_draft_tokens", accepted) != accepted:
        raise TraceFormatError(where, f"num_accepted_draft_tokens {sd['num_accepted_draft_tokens']!r} differs from the "
                               f"histogram's {accepted}", field=f"{f}.num_accepted_draft_tokens")
    drafted = sd.get("num_draft_tokens", n * k)
    if isinstance(drafted, bool) or not isinstance(drafted, int) or not accepted <= drafted <= n * k:
        raise TraceFormatError(where, f"expected draft tokens in [{accepted}, {n * k}], got {drafted!r}",
                               field=f"{f}.num_draft_tokens")
    return {"k": k, "histogram": list(h), "steps": n, "accepted": accepted, "drafted": drafted}


def spec_block(specs: list[dict[str, Any]], reqs: list[MeasuredRequest], where: str, fld: str) -> dict[str, Any]:
    """The run's spec-decode counters summed from its requests' metrics, in the block `vllm bench serve` gives
    (traces/importers/vllm_bench.py), with the proposal rate and the per-request histograms."""
    from traces.importers.vllm_bench import proposal_block

    k = specs[0]["k"]
    if any(s["k"] != k for s in specs):
        raise TraceFormatError(where, f"requests differ in num_spec_tokens ({sorted({s['k'] for s in specs})})",
                               field=fld)
    tot = np.sum([s["histogram"] for s in specs], axis=0)
    drafts = int(tot.sum())
    accepted = int(sum(s["accepted"] for s in specs))
    drafted = int(sum(s["drafted"] for s in specs))
    per_pos = [float(tot[i + 1:].sum() / drafts) if drafts else 0.0 for i in range(k)]
    out: dict[str, Any] = {"acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
                           "acceptance_rate_pct": 100.0 * accepted / drafted if drafted else 0.0,
                           "num_drafts": float(drafts), "draft_tokens": float(drafted),
                           "accepted_tokens": float(accepted), "per_position_acceptance_rates": per_pos,
                           "from": "per-request response_metrics.speculative_decoding, summed",
                           "requests": [{"id": r.id, "k": k, "histogram": s["histogram"]} for r, s in zip(reqs, specs)]}
    if drafts:
        out.update(proposal_block(out, reqs, fld))
    return out


def _request(doc: Any, where: str, fld: str) -> tuple[MeasuredRequest, float]:
    """The request and GuideLLM's own TPOT of it ((last token - request start) / output tokens)."""
    rid = _get(doc, "request_id", where, f"{fld}.request_id", str)
    t = _get(_get(doc, "info", where, f"{fld}.info"), "timings", where, f"{fld}.info.timings")
    tf = f"{fld}.info.timings"
    start = number(t, "request_start", where, f"{tf}.request_start")
    first = number(t, "first_token_iteration", where, f"{tf}.first_token_iteration")
    last = number(t, "last_token_iteration", where, f"{tf}.last_token_iteration")
    end = number(t, "request_end", where, f"{tf}.request_end")
    iters = int(number(t, "token_iterations", where, f"{tf}.token_iterations", minimum=1, integer=True))
    if not start <= first <= last <= end:
        raise TraceFormatError(where, f"timings out of order: request_start {start} <= first_token_iteration "
                               f"{first} <= last_token_iteration {last} <= request_end {end} expected", field=tf)
    out_len = int(number(doc, "output_tokens", where, f"{fld}.output_tokens", minimum=1, integer=True))
    prompt = int(number(doc, "prompt_tokens", where, f"{fld}.prompt_tokens", integer=True))
    itl = np.full(iters - 1, (last - first) / (iters - 1)) if iters > 1 else np.zeros(0)
    r = MeasuredRequest(rid, start, prompt, out_len, first - start, end - start, itl)
    check_request(r, where, fld)
    return r, (last - start) / out_len


def benchmark_run(b: Any, where: str, j: int, meta: dict[str, Any]) -> MeasuredRun:
    """One benchmark of the report; errored and incomplete requests are counted, not simulated."""
    fld = f"benchmarks[{j}]"
    strategy = _get(_get(b, "config", where, f"{fld}.config"), "strategy", where, f"{fld}.config.strategy")
    reqs_doc = _get(b, "requests", where, f"{fld}.requests")
    ok = _get(reqs_doc, "successful", where, f"{fld}.requests.successful", list)
    if not ok:
        raise TraceFormatError(where, "no successful requests", field=f"{fld}.requests.successful")
    pairs = [_request(q, where, f"{fld}.requests.successful[{i}]") for i, q in enumerate(ok)]
    reqs = [r for r, _ in pairs]
    specs = [_spec(q, where, f"{fld}.requests.successful[{i}]") for i, q in enumerate(ok)]
    have = [s is not None for s in specs]
    if any(have) and not all(have):
        raise TraceFormatError(where, f"{have.count(False)} of {len(specs)} successful requests have no "
                               "response_metrics.speculative_decoding; expected all or none",
                               field=f"{fld}.requests.successful[{have.index(False)}].response_metrics")
    spec = spec_block(specs, reqs, where, f"{fld}.requests.successful") if all(have) else None

    if len({r.id for r in reqs}) != len(reqs):
        raise TraceFormatError(where, "request_id repeats", field=f"{fld}.requests.successful")
    t0 = min(r.send_time for r in reqs)
    for r in reqs:
        r.send_time -= t0
    reqs.sort(key=lambda r: (r.send_time, r.id))
    left = {k: len(reqs_doc.get(k) or []) for k in ("errored", "incomplete")}
    kind = strategy.get("type_", "unknown")
    info = {"source": {"format": "guidellm benchmarks report", "file": where, "benchmark": j, "read_from": READ_AT,
                       "guidellm_version": meta.get("guidellm_version")},
            "strategy": {k: strategy[k] for k in ("type_", "rate", "streams") if k in strategy},
            "request_rate": strategy.get("rate"), "max_concurrency": strategy.get("streams"),
            "left_out": {f"{k}_requests": v for k, v in left.items()}, "itl": ITL_NOTE, "itl_percentiles": False,
            "spec_decode": spec, "tpot_definitions": TPOT_DEFINITIONS,
            "tpot_mean_s": {"draftsim": float(np.nanmean([r.tpot for r in reqs])) if any(r.output_len > 1 for r in reqs)
                            else None, "guidellm": float(np.mean([t for _, t in pairs]))}}
    rate = strategy.get("rate", strategy.get("streams", ""))
    run = MeasuredRun(f"guidellm-{j}-{kind}{'' if rate == '' else f'-{rate}'}", reqs, info)
    if kind in ("poisson", "constant"):
        info.update(arrival_check(run, poisson=kind == "poisson"))
    else:
        info["delivered_rate"] = run.delivered_rate()
    info["cold_first_request"] = cold_first_request(run)
    return run


def import_guidellm(path: str | Path) -> list[MeasuredRun]:
    """Every benchmark in a GuideLLM report (JSON, or YAML by suffix)."""
    where = str(path)
    doc = load_yaml_file(path) if str(path).endswith((".yaml", ".yml")) else parse_json(read_text(path), where)
    meta = _get(doc, "metadata", where, "metadata")
    if meta.get("version") != 2:
        raise TraceFormatError(where, f"report schema version {meta.get('version')!r}; this reader knows version 2 "
                               f"({READ_AT})", field="metadata.version")
    benches = _get(doc, "benchmarks", where, "benchmarks", list)
    if not benches:
        raise TraceFormatError(where, "no benchmarks in the report", field="benchmarks")
    return [benchmark_run(b, where, j, meta) for j, b in enumerate(benches)]
