"""benchmarks/bench_published_gpu.py's serving options and its table in docs/accuracy.md's layout."""
from __future__ import annotations

import pytest

from benchmarks.bench_published_gpu import OPS_BOTH, PAPER, Row, requests_by_batch, serving_table


def test_serving_requests_parse_per_batch_size_and_name_a_bad_pair():
    assert requests_by_batch("1=15000,32=600000,128=15000") == {1: 15000, 32: 600000, 128: 15000}
    for bad in ("1=x", "32", "0=5", "1=0", "1=5,,2=3"):
        with pytest.raises(SystemExit, match="--serving-requests: expected BATCH=REQUESTS"):
            requests_by_batch(bad)


def test_the_serving_table_puts_each_target_in_its_column_with_its_error_and_dataset():
    r = Row("EAGLE speedup at batch 1, Llama-3-70B", PAPER, 2.0, "x",
            predicted={"gsm8k traces": 2.2, f"serving, gsm8k, {OPS_BOTH}": 1.9,
                       "serving, instructcoder, roofline op": 2.1},
            borrowed=["acceptance from the 8B target"], aiconfigurator="2.40x (+20%, gsm8k) [how it was made]")
    change = Row("EAGLE speedup change, batch 1 -> 32, Llama-3-70B, ShareGPT", PAPER, -14.0, "%",
                 predicted={"serving, gsm8k, measured-ops profile": -19.5})
    other = Row("a row of another source", "elsewhere", 1.0, "x", predicted={"serving, gsm8k, roofline op": 1.0})
    lines = serving_table([r, change, other]).splitlines()
    assert len(lines) == 4  # header, rule, the paper's two rows
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells == ["EAGLE speedup at batch 1, Llama-3-70B", "2.00x", "2.20x (+10%, gsm8k traces)", "-", "-",
                     "1.90x (-5%, gsm8k)", "2.10x (+5%, instructcoder)", "2.40x (+20%, gsm8k)",
                     "acceptance from the 8B target"]
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    assert cells[4] == "-19.5% (-5.5 pp, gsm8k)" and cells[2] == "-"


def test_aiconfigurator_figures_for_the_papers_rows_take_each_rows_model_batch_and_dataset(tmp_path):
    """Each row at its own model (8B TP 1 or 70B TP 4), batch (128, 1, or the 1 -> 32 change) and dataset: the
    bundle's mean prompt and output lengths and the acceptance length its serving runs measured."""
    pytest.importorskip("aiconfigurator_core")
    from benchmarks.bench_published_gpu import aiconfigurator_rows
    from benchmarks.published_rows import aiconfigurator_speedup_at
    from tests.traces.test_workload import small_bundle
    from traces.bundle import save_bundle

    path = save_bundle(small_bundle(5), tmp_path / "gsm8k")  # prompts 10..14, outputs 3..7: means 12 and 5
    rows = [Row("EAGLE speedup at batch 128, Llama-3.1-8B, GSM8K", PAPER, 1.21, "x"),
            Row("EAGLE speedup change, batch 1 -> 32, Llama-3-70B, ShareGPT", PAPER, -14.0, "%")]
    aiconfigurator_rows(rows, {"gsm8k": path}, {("gsm8k", 128): 2.5, ("gsm8k", 1): 2.0, ("gsm8k", 32): 2.2})

    def at(model, tp, batch, accepted):
        return aiconfigurator_speedup_at(model, "h100-80gb", "vllm", tp, batch, 12.0, 5.0, "eagle3", 3, accepted)[0]

    s = at("llama3.1-8b", 1, 128, 2.5)
    assert rows[0].aiconfigurator.startswith(f"{s:.2f}x ({100 * (s - 1.21) / 1.21:+.0f}%, gsm8k) [")
    change = 100 * (at("llama3.3-70b", 4, 32, 2.2) / at("llama3.3-70b", 4, 1, 2.0) - 1)
    assert rows[1].aiconfigurator.startswith(f"{change:+.1f}% ({change + 14.0:+.1f} pp, gsm8k) [")
    assert "nextn = 3" in rows[1].aiconfigurator


def test_without_an_aiconfigurator_figure_every_paper_row_says_why(tmp_path, monkeypatch):
    """aiconfigurator-core absent (or no figure for the model): each row gets the reason, none a partial figure."""
    import benchmarks.published_rows as pr
    from benchmarks.bench_published_gpu import aiconfigurator_rows
    from tests.traces.test_workload import small_bundle
    from traces.bundle import save_bundle

    monkeypatch.setattr(pr, "aiconfigurator_speedup_at", lambda *a: (None, "not run: aiconfigurator-core is absent"))
    path = save_bundle(small_bundle(5), tmp_path / "gsm8k")
    rows = [Row("EAGLE speedup at batch 128, Llama-3.1-8B, GSM8K", PAPER, 1.21, "x"),
            Row("EAGLE speedup change, batch 1 -> 32, Llama-3-70B, ShareGPT", PAPER, -14.0, "%")]
    aiconfigurator_rows(rows, {"gsm8k": path}, {("gsm8k", 128): 2.5, ("gsm8k", 1): 2.0, ("gsm8k", 32): 2.2})
    assert [r.aiconfigurator for r in rows] == ["not run: aiconfigurator-core is absent"] * 2
