"""vLLM spec-decode metrics: Prometheus text and get_metrics() JSON."""
import json

import pytest

from traces.errors import TraceFormatError
from traces.importers.vllm_metrics import load_vllm_metrics, parse_metrics_json, parse_prometheus

PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 45.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 25.0
vllm:num_requests_running{model_name="m"} 2.0
"""


def test_prometheus_rates():
    s = parse_prometheus(PROM)
    assert s.acceptance_rate == pytest.approx(0.5)
    assert s.mean_acceptance_length == pytest.approx(2.5)
    assert s.per_pos_rate == pytest.approx([0.8, 0.45, 0.25])
    assert s.conditional_rate == pytest.approx([0.8, 45 / 80, 25 / 45])


def test_label_sets_are_summed():
    doubled = PROM + PROM.replace('engine="0"', 'engine="1"')
    assert parse_prometheus(doubled).num_drafts == 200


def test_get_metrics_json_matches_prometheus(tmp_path):
    doc = [{"name": "vllm:spec_decode_num_drafts", "labels": {}, "value": 100},
           {"name": "vllm:spec_decode_num_draft_tokens", "value": 300},
           {"name": "vllm:spec_decode_num_accepted_tokens", "value": 150},
           {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "values": [80, 45, 25]},
           {"name": "vllm:generation_tokens", "value": 999}]
    p = tmp_path / "m.json"
    p.write_text(json.dumps(doc))
    got = load_vllm_metrics(p).to_dict()
    assert got.pop("generation_tokens") == 999 and got["finished_requests"] is None  # no request count: no rate
    want = parse_prometheus(PROM).to_dict()
    want.pop("generation_tokens")
    assert got == want


def test_proposal_rate_from_generation_tokens_and_finished_requests():
    """100 drafts accepted 150 tokens; 10 requests finished (two finish reasons summed) with 460 output tokens:
    decode steps = 460 - 10 - 150 = 300, so a third of them proposed; up to k = 3 accepted tokens per request
    may have been trimmed past the end: the lower bound is 100 / (300 + 30)."""
    text = PROM + ('vllm:generation_tokens_total{model_name="m"} 460.0\n'
                   'vllm:generation_tokens_created{model_name="m"} 1.7e9\n'
                   'vllm:request_success_total{finished_reason="length",model_name="m"} 7.0\n'
                   'vllm:request_success_total{finished_reason="stop",model_name="m"} 3.0\n')
    s = parse_prometheus(text)
    assert (s.generation_tokens, s.finished_requests) == (460, 10)
    p = s.proposal()
    assert (p.decode_steps, p.rate) == (300, pytest.approx(1 / 3))
    assert p.rate_low == pytest.approx(100 / 330)
    assert parse_prometheus(PROM).proposal() is None


def test_missing_counters_and_bad_lines(tmp_path):
    with pytest.raises(TraceFormatError, match="was speculative decoding enabled"):
        parse_prometheus('vllm:num_requests_running{model_name="m"} 2.0\n')
    with pytest.raises(TraceFormatError, match="line 2"):
        parse_prometheus(PROM.splitlines()[0] + "\nthis is not prometheus\n")
    with pytest.raises(TraceFormatError, match="gaps"):
        parse_prometheus(PROM.replace('position="1"', 'position="5"'))
    with pytest.raises(TraceFormatError, match="expected a number"):
        parse_metrics_json([{"name": "vllm:spec_decode_num_drafts", "value": "many"}])
    with pytest.raises(TraceFormatError, match="absent.txt: cannot be read: No such file"):
        load_vllm_metrics(tmp_path / "absent.txt")
