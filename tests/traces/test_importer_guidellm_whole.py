"""GuideLLM 0.8.1 reports read whole: vLLM's per-request spec-decode metrics (response_metrics) summed into the
run's counters with the proposal rate and kept per request; both TPOT definitions; the delivered arrival rate
beside the nominal one, with a warning when they disagree beyond sampling."""
from __future__ import annotations

import json

import pytest

from experiments.cli import main
from tests.traces.client_writers import ClientRecord, guidellm_report
from traces.acceptance_levels import load_source
from traces.importers.guidellm import import_guidellm


def _spec(hist, k=3):
    return {"acceptance_histogram": hist, "num_spec_tokens": k, "num_spec_steps": sum(hist),
            "num_accepted_draft_tokens": sum(j * c for j, c in enumerate(hist)), "num_draft_tokens": k * sum(hist)}


def _records():
    """Two requests, by hand: A 10 tokens, histogram [1, 1, 0, 1] (3 proposing steps, 0 + 1 + 3 = 4 accepted) ->
    decode steps 10 - 1 - 4 = 5; B 6 tokens, [0, 0, 1, 0] (1 step, 2 accepted) -> 6 - 1 - 2 = 3 decode steps.
    Chunks: one per decode step plus the first token."""
    a = ClientRecord(100.0, 50, 10, [100.2, 100.3, 100.4, 100.5, 100.6, 100.8], _spec([1, 1, 0, 1]))
    b = ClientRecord(100.5, 40, 6, [100.6, 100.7, 100.8, 101.0], _spec([0, 0, 1, 0]))
    return [a, b]


def test_spec_decode_counters_proposal_rate_and_histograms(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps(guidellm_report([({"type_": "constant", "rate": 2.0}, _records())])))
    (run,) = import_guidellm(p)
    sd = run.info["spec_decode"]
    assert (sd["num_drafts"], sd["accepted_tokens"], sd["draft_tokens"]) == (4, 6, 12)
    assert sd["acceptance_length"] == pytest.approx(1 + 6 / 4)
    assert sd["per_position_acceptance_rates"] == pytest.approx([3 / 4, 2 / 4, 1 / 4])  # P(>= 1, 2, 3 accepted)
    assert (sd["decode_steps"], sd["proposal_rate"]) == (8, pytest.approx(0.5))
    assert [h["histogram"] for h in sd["requests"]] == [[1, 1, 0, 1], [0, 0, 1, 0]]
    # both TPOT definitions, from the per-request times: GuideLLM (last - start) / output, draftsim (end - first)
    # / (output - 1) (here the end is the last token)
    assert run.info["tpot_mean_s"]["guidellm"] == pytest.approx((0.8 / 10 + 0.5 / 6) / 2)
    assert run.info["tpot_mean_s"]["draftsim"] == pytest.approx((0.6 / 9 + 0.4 / 5) / 2)
    assert run.info["itl_percentiles"] is False
    # delivered 1 / 0.5 s = 2.0 req/s = the nominal constant rate: no warning
    assert run.info["delivered_rate"] == pytest.approx(2.0) and run.info["arrival_warnings"] == []


def test_import_vllm_acceptance_reads_a_guidellm_report(tmp_path, capsys):
    p = tmp_path / "g.json"
    recs = _records()
    p.write_text(json.dumps(guidellm_report([({"type_": "poisson", "rate": 1.0}, recs[:1]),
                                             ({"type_": "poisson", "rate": 2.0}, recs[1:])])))
    assert main(["import", "vllm-acceptance", str(p), str(tmp_path / "a.yaml")]) == 0
    src = load_source(tmp_path / "a.yaml")
    assert src.levels() == ["mean_length", "per_position", "per_request"]  # pooled over both benchmarks
    assert src.mean_length == pytest.approx(2.5) and src.proposal_rate == pytest.approx(0.5)
    assert [r.histogram for r in src.requests] == [[1, 1, 0, 1], [0, 0, 1, 0]]
    assert "pooled the spec-decode counters of 2 run(s)" in capsys.readouterr().out


def test_delivered_rate_far_from_the_nominal_one_is_warned(tmp_path, capsys):
    """21 requests 0.1 s apart: delivered 10 req/s against a nominal Poisson 4 req/s, 2.5x (GuideLLM 0.8.1's
    poisson with worker processes seeded alike delivered 2.6x); 3 standard errors over 20 gaps is 67%."""
    recs = [ClientRecord(0.1 * i, 20, 3, [0.1 * i + 0.05, 0.1 * i + 0.06, 0.1 * i + 0.07]) for i in range(21)]
    p = tmp_path / "g.json"
    p.write_text(json.dumps(guidellm_report([({"type_": "poisson", "rate": 4.0}, recs)])))
    (run,) = import_guidellm(p)
    assert run.info["delivered_rate"] == pytest.approx(10.0)
    (w,) = run.info["arrival_warnings"]
    assert "2.50x the nominal 4" in w
    assert main(["import", "guidellm", str(p), str(tmp_path / "m")]) == 0
    captured = capsys.readouterr()
    assert "2.50x the nominal" in captured.err and "delivered 10 req/s (nominal 4)" in captured.out
    assert "mean TPOT (guidellm:" in captured.out


def test_spec_metrics_on_some_requests_only_is_an_error(tmp_path):
    from traces.errors import TraceFormatError

    recs = _records()
    recs[1].spec = None
    p = tmp_path / "g.json"
    p.write_text(json.dumps(guidellm_report([({"type_": "constant", "rate": 2.0}, recs)])))
    with pytest.raises(TraceFormatError, match="expected all or none") as e:
        import_guidellm(p)
    assert str(p) in str(e.value)


def test_a_cold_first_request_is_flagged(tmp_path, capsys):
    """Six requests 1 s apart with TTFT 0.1 s, the first 3.1 s (the issue's cold vLLM): 31x the others' median."""
    recs = [ClientRecord(float(i), 20, 3, [i + 0.1, i + 0.2, i + 0.3]) for i in range(6)]
    recs[0] = ClientRecord(0.0, 20, 3, [3.1, 3.2, 3.3])
    p = tmp_path / "g.json"
    p.write_text(json.dumps(guidellm_report([({"type_": "constant", "rate": 1.0}, recs)])))
    (run,) = import_guidellm(p)
    assert "b0-r0" in run.info["cold_first_request"] and "31.0x" in run.info["cold_first_request"]
    recs[0] = ClientRecord(0.0, 20, 3, [0.25, 0.3, 0.4])  # 2.5x: not flagged
    p.write_text(json.dumps(guidellm_report([({"type_": "constant", "rate": 1.0}, recs)])))
    assert import_guidellm(p)[0].info["cold_first_request"] is None
