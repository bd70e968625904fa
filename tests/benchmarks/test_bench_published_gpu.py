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
            borrowed=["acceptance from the 8B target"])
    change = Row("EAGLE speedup change, batch 1 -> 32, Llama-3-70B, ShareGPT", PAPER, -14.0, "%",
                 predicted={"serving, gsm8k, measured-ops profile": -19.5})
    other = Row("a row of another source", "elsewhere", 1.0, "x", predicted={"serving, gsm8k, roofline op": 1.0})
    lines = serving_table([r, change, other]).splitlines()
    assert len(lines) == 4  # header, rule, the paper's two rows
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells == ["EAGLE speedup at batch 1, Llama-3-70B", "2.00x", "2.20x (+10%, gsm8k traces)", "-", "-",
                     "1.90x (-5%, gsm8k)", "2.10x (+5%, instructcoder)", "acceptance from the 8B target"]
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    assert cells[4] == "-19.5% (-5.5 pp, gsm8k)" and cells[2] == "-"
