"""Golden check against a published real-GPU measurement (DESIGN "Golden reproductions"): the SpecDecode-Bench
release's own 8B/H100 fits and traces predict the paper's measured EAGLE speedup at batch 128 on GSM8K (1.21x,
vLLM 0.10.1.1) within 10%. Skips without the reference traces (../shared/reference-traces, read-only)."""
from __future__ import annotations

import pytest

from benchmarks.bench_published_gpu import REFERENCE, _records, _speedup, table, Row


@pytest.mark.skipif(not (REFERENCE / "combined_gsm8k.jsonl").is_file(), reason=f"reference traces absent: {REFERENCE}")
def test_batch_128_gsm8k_speedup_within_10_percent_of_the_measured_1_21x():
    s = _speedup(_records("gsm8k"), "gsm8k", 128, requests=100)
    assert abs(s / 1.21 - 1) < 0.10, s


def test_row_errors_and_table():
    r = Row("x", "src", 1.21, "x", predicted={"a": 1.331})
    assert r.errors()["a"] == pytest.approx(10.0)
    p = Row("y", "src", -4.3, "%", predicted={"a": -16.0})
    assert p.errors()["a"] == pytest.approx(-11.7)
    assert "-11.7 pp" in table([p], markdown=True) and "+10%" in table([r])
