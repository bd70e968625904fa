"""vllm-bench and GuideLLM importers on files in their real formats (hand-written from their source), malformed
ones refused naming the file and field, and the measured-run folder round trip."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from traces.errors import TraceFormatError
from traces.importers.guidellm import import_guidellm
from traces.importers.vllm_bench import import_vllm_bench
from traces.measured_run import load_measured, save_measured

FIX = Path(__file__).parent / "fixtures"
VLLM, GUIDE = FIX / "vllm_bench_detailed.json", FIX / "guidellm_benchmarks.json"


def test_vllm_bench_reads_requests_settings_and_acceptance():
    (run,) = import_vllm_bench(VLLM)
    doc = json.loads(VLLM.read_text())
    assert [r.id for r in run.requests] == ["0", "1", "3"]  # the failed request (errors[2]) is left out, counted
    assert run.info["left_out"]["failed_requests"] == 1
    assert [r.send_time for r in run.requests] == pytest.approx([0.0, 0.4, 1.5])
    r0 = run.requests[0]
    assert (r0.prompt_len, r0.output_len, r0.ttft, r0.e2e) == (100, 8, 0.05, 0.2)
    assert r0.tpot == pytest.approx((0.2 - 0.05) / 7)
    assert np.array_equal(r0.itl, doc["itls"][0])
    assert run.info["request_rate"] == 2.0 and run.info["model_id"] == doc["model_id"]
    assert run.info["spec_decode"]["acceptance_length"] == 2.6
    assert run.info["spec_decode"]["per_position_acceptance_rates"] == [0.8, 0.5, 0.3]


def test_vllm_bench_proposal_rate_from_output_tokens(tmp_path):
    """Successful requests of 8, 6 and 5 tokens (19), counters 4 drafts / 6 accepted: decode steps
    19 - 3 - 6 = 10, 40% proposed. The shipped fixture's counters (10 drafts, 16 accepted) cannot come from 19
    tokens: the run still imports, with the reason and no rate."""
    doc = json.loads(VLLM.read_text())
    doc.update(spec_decode_num_drafts=4, spec_decode_draft_tokens=12, spec_decode_accepted_tokens=6,
               spec_decode_acceptance_length=2.5, spec_decode_per_position_acceptance_rates=[0.75, 0.5, 0.25])
    (tmp_path / "b.json").write_text(json.dumps(doc))
    (run,) = import_vllm_bench(tmp_path / "b.json")
    sd = run.info["spec_decode"]
    assert (sd["decode_steps"], sd["proposal_rate"]) == (10, pytest.approx(0.4))
    assert sd["proposal_rate_low"] == pytest.approx(4 / (10 + 3 * 3))
    (bad,) = import_vllm_bench(VLLM)
    assert bad.info["spec_decode"]["proposal_rate"] is None
    assert "cover requests other than these" in bad.info["spec_decode"]["proposal_rate_note"]


def test_vllm_bench_append_result_gives_one_run_per_line(tmp_path):
    doc = json.loads(VLLM.read_text())
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc) + "\n" + json.dumps({**doc, "request_rate": 4.0}))
    runs = import_vllm_bench(p)
    assert [r.info["request_rate"] for r in runs] == [2.0, 4.0]


@pytest.mark.parametrize("change, match", [
    (lambda d: d.pop("itls"), "field 'itls'.*--save-detailed"),
    (lambda d: d["ttfts"].pop(), "field 'start_times'.*differ in length"),
    (lambda d: d["ttfts"].__setitem__(1, "fast"), r"field 'ttfts\[1\]'.*expected a number"),
    (lambda d: d["ttfts"].__setitem__(0, 0.5), "TTFT 0.5 s is later"),
    (lambda d: d["output_lens"].__setitem__(0, 0), r"output_lens\[0\]"),
    (lambda d: d["itls"].__setitem__(0, [0.5]), "inter-token latencies sum"),
    (lambda d: d.__setitem__("spec_decode_per_position_acceptance_rates", [0.3, 0.5, 0.8]), "must not increase"),
    (lambda d: d.pop("spec_decode_num_drafts"), "spec_decode_num_drafts"),
    (lambda d: d.__setitem__("spec_decode_acceptance_length", 3.1), "is not 1 \\+ accepted"),
])
def test_vllm_bench_malformed(tmp_path, change, match):
    doc = json.loads(VLLM.read_text())
    change(doc)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=match) as e:
        import_vllm_bench(p)
    assert str(p) in str(e.value)


def test_vllm_bench_not_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        import_vllm_bench(p)


def test_guidellm_reads_each_benchmark():
    (run,) = import_guidellm(GUIDE)
    assert [r.id for r in run.requests] == ["req-0", "req-1"]
    r0, r1 = run.requests
    assert r0.ttft == pytest.approx(0.05) and r0.e2e == pytest.approx(0.26) and r0.output_len == 11
    assert r0.itl.size == 10 and r0.itl.sum() == pytest.approx(0.2)
    assert r1.send_time == pytest.approx(0.7)
    assert run.info["strategy"] == {"type_": "poisson", "rate": 1.5}
    assert run.info["left_out"] == {"errored_requests": 0, "incomplete_requests": 1}


@pytest.mark.parametrize("change, match", [
    (lambda d: d["metadata"].__setitem__("version", 1), "metadata.version"),
    (lambda d: d["benchmarks"][0]["requests"]["successful"][0]["info"]["timings"].pop("request_start"),
     r"successful\[0\].info.timings.request_start"),
    (lambda d: d["benchmarks"][0]["requests"]["successful"][1]["info"]["timings"].__setitem__(
        "first_token_iteration", 0.0), "out of order"),
    (lambda d: d["benchmarks"][0]["requests"]["successful"][0].__setitem__("output_tokens", None),
     r"successful\[0\].output_tokens"),
    (lambda d: d.__setitem__("benchmarks", []), "no benchmarks"),
])
def test_guidellm_malformed(tmp_path, change, match):
    doc = json.loads(GUIDE.read_text())
    change(doc)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=match):
        import_guidellm(p)


def test_measured_folder_round_trip_and_truncation(tmp_path):
    (run,) = import_vllm_bench(VLLM)
    save_measured(run, tmp_path / "m")
    back = load_measured(tmp_path / "m")
    assert [(r.id, r.send_time, r.ttft, r.e2e, r.output_len) for r in back.requests] == \
        [(r.id, r.send_time, r.ttft, r.e2e, r.output_len) for r in run.requests]
    assert [float(x) for x in (tmp_path / "m" / "arrivals.txt").read_text().split()] == \
        [r.send_time for r in run.requests]
    lines = (tmp_path / "m" / "requests.jsonl").read_text().splitlines()
    (tmp_path / "m" / "requests.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(TraceFormatError, match="incomplete"):
        load_measured(tmp_path / "m")
