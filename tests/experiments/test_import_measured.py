"""`draftsim import vllm-acceptance` (Prometheus text, a bench result, per-request metrics) and `import guidellm`
through the CLI: the acceptance source written matches vLLM's own arithmetic; bad input exits non-zero."""
from __future__ import annotations

from pathlib import Path

import pytest

from experiments.cli import main
from traces.acceptance_levels import load_source
from traces.measured_run import load_measured

FIX = Path(__file__).parents[1] / "traces" / "fixtures"
PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 200.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 600.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 330.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 110.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 70.0
"""


def test_prometheus_counters_to_acceptance_source(tmp_path):
    (tmp_path / "metrics.txt").write_text(PROM)
    assert main(["import", "vllm-acceptance", str(tmp_path / "metrics.txt"), str(tmp_path / "a.yaml"),
                 "--target", "llama3.1-8b", "--drafter-kind", "eagle"]) == 0
    src = load_source(tmp_path / "a.yaml")
    assert src.measured_k == 3 and src.mean_length == pytest.approx(1 + 330 / 200)
    assert src.per_position == pytest.approx([0.75, 0.55, 0.35]) and src.target == "llama3.1-8b"


def test_bench_result_and_guidellm_through_the_cli(tmp_path):
    assert main(["import", "vllm-acceptance", str(FIX / "vllm_bench_detailed.json"), str(tmp_path / "a.yaml")]) == 0
    assert load_source(tmp_path / "a.yaml").mean_length == pytest.approx(2.6)
    assert main(["import", "guidellm", str(FIX / "guidellm_benchmarks.json"), str(tmp_path / "g")]) == 0
    assert [r.id for r in load_measured(tmp_path / "g").requests] == ["req-0", "req-1"]


def test_bad_input_exits_nonzero_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"start_times": [1.0]}')
    assert main(["import", "vllm-bench", str(bad), str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert str(bad) in err and "--save-detailed" in err
    assert not (tmp_path / "o").exists()
