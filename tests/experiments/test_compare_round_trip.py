"""Round trip: a simulated AR run written as a `vllm bench serve` JSON and as a GuideLLM report (the formats'
smallest writers, tests/traces/client_writers.py), imported back and compared with the same config gives error 0
on every metric the files carry. A simulated run keeps each request's first and last token times and its chunk
count, not every chunk's time, so the writers space a request's chunks evenly: the pooled ITL mean survives,
ITL percentiles do not (GuideLLM's are left out by compare; the bench's are not compared here)."""
from __future__ import annotations

import json

import pytest

from experiments.cli.compare import compare
from experiments.run import run_experiment
from tests.traces.client_writers import ClientRecord, bench_document, guidellm_report
from traces.importers.guidellm import import_guidellm
from traces.importers.vllm_bench import import_vllm_bench
from traces.measured_run import save_measured

OVR = ["workload.num_requests=60", "workload.arrival.rate=20"]


def _records(res, name):
    out = []
    for q in res.requests[res.requests.run == name].itertuples():
        n = int(q.decode_steps)
        chunks = [q.first_token_time + (q.finish_time - q.first_token_time) * i / n for i in range(n + 1)] \
            if n else [q.first_token_time]
        out.append(ClientRecord(float(q.arrival_time), int(q.prompt_len), int(q.output_len), [float(c) for c in chunks]))
    return out


@pytest.mark.parametrize("fmt", ["vllm-bench", "guidellm"])
def test_simulated_run_through_a_client_format_compares_with_error_zero(tmp_path, fmt):
    res = run_experiment("default", overrides=OVR)
    recs = _records(res, "AR")
    p = tmp_path / "client.json"
    if fmt == "vllm-bench":
        p.write_text(json.dumps(bench_document(recs, perf_offset=-1000.0, request_rate=20.0)))
        (run,) = import_vllm_bench(p)
    else:
        p.write_text(json.dumps(guidellm_report([({"type_": "poisson", "rate": 20.0}, recs)])))
        (run,) = import_guidellm(p)
    save_measured(run, tmp_path / "m")
    report = compare(str(tmp_path / "m"), "default", OVR, repeats=1, names=["AR"])
    rows = [r for r in report.rows if not r["metric"].startswith("itl_p")]
    assert {"ttft_mean_s", "ttft_p99_s", "tpot_p90_s", "e2e_mean_s", "itl_mean_s", "throughput_tok_s"} <= \
        {r["metric"] for r in rows}
    for r in rows:
        assert r["error_pct"] == 0.0, r
    if fmt == "guidellm":
        assert not any(r["metric"].startswith("itl_p") for r in report.rows)
    s = res.summary["AR"]  # and the measured side is the run's own numbers
    by = {r["metric"]: r["measured"] for r in rows}
    for m in ("ttft_mean_s", "tpot_p50_s", "e2e_p90_s", "itl_mean_s"):
        assert by[m] == pytest.approx(s[m], rel=1e-3), m
