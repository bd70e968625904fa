"""The smallest honest writers of the client result formats draftsim imports, from their documented fields
(traces/importers/vllm_bench.py and guidellm.py name the source files they were read from): for tests that
round-trip a run through them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class ClientRecord:
    """One request as a client recorded it: send time, lengths and the time of every streamed chunk (s)."""

    send: float
    prompt_len: int
    output_len: int
    chunk_times: list[float]
    spec: dict[str, Any] | None = field(default=None)  # vLLM's per-request spec-decode metrics, when recorded


def bench_document(records: list[ClientRecord], *, perf_offset: float = 0.0, model_id: str = "m",
                   request_rate: float | str = "inf", counters: dict[str, Any] | None = None) -> dict[str, Any]:
    """`vllm bench serve --save-result --save-detailed` JSON of these requests (send times on the client's
    perf_counter clock: wall time minus `perf_offset`); `counters` {num_drafts, draft_tokens, accepted_tokens,
    accepted_per_pos} adds the spec_decode_* fields as vLLM's Prometheus deltas give them."""
    doc: dict[str, Any] = {
        "backend": "vllm", "model_id": model_id, "request_rate": request_rate, "burstiness": 1.0,
        "max_concurrency": None, "num_prompts": len(records), "completed": len(records), "failed": 0,
        "start_times": [r.send - perf_offset for r in records], "input_lens": [r.prompt_len for r in records],
        "output_lens": [r.output_len for r in records], "ttfts": [r.chunk_times[0] - r.send for r in records],
        "itls": [np.diff(r.chunk_times).tolist() for r in records],
        "latencies": [r.chunk_times[-1] - r.send for r in records], "errors": ["" for _ in records]}
    if counters:
        d, a = counters["num_drafts"], counters["accepted_tokens"]
        doc.update(spec_decode_num_drafts=d, spec_decode_draft_tokens=counters["draft_tokens"],
                   spec_decode_accepted_tokens=a, spec_decode_acceptance_length=1 + a / d,
                   spec_decode_acceptance_rate=100 * a / counters["draft_tokens"],
                   spec_decode_per_position_acceptance_rates=[x / d for x in counters["accepted_per_pos"]])
    return doc


def counters_of(records: list[ClientRecord], k: int) -> dict[str, Any]:
    """vLLM's spec-decode counters over these requests, summed from their per-request metrics."""
    steps = [np.asarray(r.spec["per_step_accepted"], dtype=int) for r in records]
    acc = np.concatenate(steps) if steps else np.zeros(0, dtype=int)
    return {"num_drafts": int(acc.size), "draft_tokens": int(sum(sum(r.spec["per_step_drafted"]) for r in records)),
            "accepted_tokens": int(acc.sum()), "accepted_per_pos": [int((acc > i).sum()) for i in range(k)]}


def guidellm_report(benchmarks: list[tuple[dict[str, Any], list[ClientRecord]]], *, version: str = "0.8.1"
                    ) -> dict[str, Any]:
    """A GuideLLM 0.8.1 benchmarks report (`GenerativeBenchmarksReport.model_dump(mode="json")`, the fields the
    importer reads): per benchmark its strategy ({type_, rate?, streams?}) and successful requests with
    `info.timings` (epoch s: request_start, first/last_token_iteration, request_end, token_iterations = the
    streamed chunks), prompt/output tokens and, when a record has them, vLLM's per-request metrics as
    `response_metrics.speculative_decoding`."""
    out = []
    for j, (strategy, records) in enumerate(benchmarks):
        reqs = []
        for i, r in enumerate(records):
            q: dict[str, Any] = {
                "type_": "generative_request_stats", "request_id": f"b{j}-r{i}",
                "info": {"request_id": f"b{j}-r{i}", "status": "completed",
                         "timings": {"request_start": r.send, "first_token_iteration": r.chunk_times[0],
                                     "last_token_iteration": r.chunk_times[-1], "request_end": r.chunk_times[-1],
                                     "token_iterations": len(r.chunk_times)}},
                "prompt_tokens": r.prompt_len, "output_tokens": r.output_len, "response_metrics": None}
            if r.spec is not None:
                q["response_metrics"] = {"speculative_decoding": {
                    k: r.spec[k] for k in ("acceptance_histogram", "num_spec_tokens", "num_spec_steps",
                                           "num_accepted_draft_tokens", "num_draft_tokens") if k in r.spec}}
            reqs.append(q)
        out.append({"type_": "generative_benchmark", "config": {"strategy": strategy},
                    "requests": {"successful": reqs, "errored": [], "incomplete": []}})
    return {"metadata": {"version": 2, "guidellm_version": version}, "config": {}, "benchmarks": out}
