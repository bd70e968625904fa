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


def test_counters_without_per_position_totals_give_k_from_drafted_tokens(tmp_path):
    """600 draft tokens over 200 drafts: every draft proposed 3, so k = 3 needs no --k; 610 over 200 is no whole k,
    and the k must then be given."""
    text = "\n".join(line for line in PROM.splitlines() if "per_pos" not in line) + "\n"
    (tmp_path / "m.txt").write_text(text)
    assert main(["import", "vllm-acceptance", str(tmp_path / "m.txt"), str(tmp_path / "a.yaml")]) == 0
    src = load_source(tmp_path / "a.yaml")
    assert src.measured_k == 3 and src.mean_length == pytest.approx(1 + 330 / 200)
    (tmp_path / "odd.txt").write_text(text.replace("} 600.0", "} 610.0"))
    assert main(["import", "vllm-acceptance", str(tmp_path / "odd.txt"), str(tmp_path / "b.yaml")]) != 0
    assert main(["import", "vllm-acceptance", str(tmp_path / "odd.txt"), str(tmp_path / "c.yaml"), "--k", "4"]) == 0


def test_counters_with_run_totals_carry_the_proposal_rate(tmp_path, capsys):
    """200 drafts, 330 accepted; 20 requests finished with 750 tokens: 750 - 20 - 330 = 400 decode steps, half
    proposed; the replay's tokens per decode step is 1 + 0.5 * 1.65."""
    text = PROM + 'vllm:generation_tokens_total{model_name="m"} 750\nvllm:request_success_total{model_name="m"} 20\n'
    (tmp_path / "metrics.txt").write_text(text)
    assert main(["import", "vllm-acceptance", str(tmp_path / "metrics.txt"), str(tmp_path / "a.yaml")]) == 0
    src = load_source(tmp_path / "a.yaml")
    assert src.proposal_rate == pytest.approx(0.5) and src.source["proposal_rate"]["decode_steps"] == 400
    assert "proposed on 50.0% of decode steps; 1.825 tokens per decode step" in capsys.readouterr().out
    (tmp_path / "plain.txt").write_text(PROM)
    assert main(["import", "vllm-acceptance", str(tmp_path / "plain.txt"), str(tmp_path / "b.yaml")]) == 0
    assert load_source(tmp_path / "b.yaml").proposal_rate is None
    assert "proposal rate unknown" in capsys.readouterr().out


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


def test_every_run_of_a_multi_run_bench_file_gets_its_counters_acceptance_with_the_proposal_rate(tmp_path, capsys):
    """`--append-result`: two runs in one file, each folder gets acceptance.yaml. Run 0: 2 requests, 42 output
    tokens, 3 drafts, 3 accepted: 42 - 2 - 3 = 37 decode steps, 3 proposed (8.1%), mean length 2 per proposing
    step; run 1: 1 request, 11 tokens, 4 drafts of which 0 accepted: 10 decode steps, 40%, length 1."""
    import json

    from tests.traces.client_writers import ClientRecord, bench_document, counters_of

    def rec(send, n, accepted):
        spec = {"per_step_accepted": accepted, "per_step_drafted": [3] * len(accepted)}
        return ClientRecord(send, 5, n, [send + 0.1 + 0.01 * i for i in range(n)], spec)

    runs = [[rec(0.0, 21, [2, 0]), rec(0.5, 21, [1])], [rec(10.0, 11, [0, 0, 0, 0])]]
    lines = [json.dumps(bench_document(r, request_rate=float(i + 1), counters=counters_of(r, 3)))
             for i, r in enumerate(runs)]
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["import", "vllm-bench", str(tmp_path / "b.jsonl"), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    folders = sorted(p for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert len(folders) == 2
    a, b = (load_source(f / "acceptance.yaml") for f in folders)
    assert a.mean_length == pytest.approx(2.0) and a.proposal_rate == pytest.approx(3 / 37)
    assert b.mean_length == pytest.approx(1.0) and b.proposal_rate == pytest.approx(0.4)
    assert "mean acceptance length 2.000 per proposing step at k = 3; drafter proposed on 8.1% of decode steps" in out
    assert "drafter proposed on 40.0% of decode steps" in out and "(nominal 1)" in out and "(nominal 2)" in out
