"""GuideLLM benchmark report (benchmarks.json / .yaml) -> one measured run per benchmark in it.

Schema read from vllm-project/guidellm at commit ee7a77457ba668b4b5ccb40f110518829893b36a (v0.7.3-12):
`GenerativeBenchmarksReport` (src/guidellm/benchmark/schemas/report.py) = {metadata: {version: 2, guidellm_version,
...}, config, benchmarks: [GenerativeBenchmark]}; saved with `model_dump(mode="json")`, so computed fields are in
the file. A benchmark (schemas/benchmark.py) has `config.strategy` ({type_: synchronous | concurrent | throughput
| constant | poisson | trace, rate?, streams?}) and `requests` = {successful, errored, incomplete} lists of
`GenerativeRequestStats` (src/guidellm/schemas/request_stats.py): `request_id`, `prompt_tokens`, `output_tokens`,
and `info.timings` (src/guidellm/schemas/info.py: `request_start`, `first_token_iteration`,
`last_token_iteration`, `request_end`, `token_iterations`; epoch seconds).

GuideLLM keeps only the first and last token times of a request, not every chunk's: each request's inter-token
gaps are stored as its mean gap (last - first) / (token_iterations - 1), repeated; the pooled mean ITL is
exact, ITL percentiles are of per-request means (run.json says so).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from traces.errors import TraceFormatError
from traces.measured_run import MeasuredRequest, MeasuredRun, check_request, number
from traces.parsing import load_yaml_file, parse_json, read_text

READ_AT = "vllm-project/guidellm src/guidellm/benchmark/schemas/report.py @ ee7a7745 (v0.7.3-12)"
ITL_NOTE = "per-request mean gap repeated (GuideLLM keeps first and last token times only)"


def _get(doc: Any, key: str, where: str, fld: str, kind: type | tuple = dict) -> Any:
    if not isinstance(doc, dict) or key not in doc:
        raise TraceFormatError(where, "missing", field=fld)
    v = doc[key]
    if not isinstance(v, kind) or isinstance(v, bool):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TraceFormatError(where, f"expected {want}, got {type(v).__name__}", field=fld)
    return v


def _request(doc: Any, where: str, fld: str) -> MeasuredRequest:
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
    return r


def benchmark_run(b: Any, where: str, j: int, meta: dict[str, Any]) -> MeasuredRun:
    """One benchmark of the report; errored and incomplete requests are counted, not simulated."""
    fld = f"benchmarks[{j}]"
    strategy = _get(_get(b, "config", where, f"{fld}.config"), "strategy", where, f"{fld}.config.strategy")
    reqs_doc = _get(b, "requests", where, f"{fld}.requests")
    ok = _get(reqs_doc, "successful", where, f"{fld}.requests.successful", list)
    if not ok:
        raise TraceFormatError(where, "no successful requests", field=f"{fld}.requests.successful")
    reqs = [_request(q, where, f"{fld}.requests.successful[{i}]") for i, q in enumerate(ok)]
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
            "left_out": {f"{k}_requests": v for k, v in left.items()}, "itl": ITL_NOTE, "spec_decode": None}
    rate = strategy.get("rate", strategy.get("streams", ""))
    return MeasuredRun(f"guidellm-{j}-{kind}{'' if rate == '' else f'-{rate}'}", reqs, info)


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
