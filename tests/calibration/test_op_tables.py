"""Measured op tables (calibration/op_tables.py): lookups on hand-made grids and parquet files, no package needed;
the shipped aiconfigurator-core tables only when the optional extra is installed."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from calibration.op_tables import Grid, fill_along, grid_from_rows, load_op_tables


def test_grid_reproduces_a_bilinear_surface_inside_and_continues_it_outside():
    xs, ys = np.array([1.0, 2.0, 4.0]), np.array([10.0, 20.0])
    f = lambda x, y: 3.0 + 2.0 * x + 0.5 * y + 0.1 * x * y  # bilinear: multilinear interpolation is exact
    g = Grid((xs, ys), np.array([[f(x, y) for y in ys] for x in xs]))
    for x, y in ((1.5, 12.0), (3.0, 19.0), (4.0, 10.0)):
        assert g(x, y) == pytest.approx(f(x, y))
    # beyond x = 4 the last segment (2 -> 4) continues: still the same bilinear function
    assert g(6.0, 15.0) == pytest.approx(f(6.0, 15.0))


def test_grid_never_cheaper_beyond_the_last_point_nor_dearer_before_the_first():
    g = Grid((np.array([1.0, 2.0, 3.0]),), np.array([1.0, 5.0, 4.0]))  # noisy fall at the end
    assert g(10.0) == pytest.approx(4.0)  # the line would fall to -3: held at the last measured value
    assert g(0.5) == pytest.approx(0.0)  # 1 - 0.5 * 4 = -1: never below zero
    g2 = Grid((np.array([1.0, 2.0]),), np.array([3.0, 2.0]))
    assert g2(0.0) == pytest.approx(3.0)  # the line gives 4: never dearer than the first point


def test_fill_along_continues_each_lines_last_two_points():
    v = np.array([[1.0, 2.0, np.nan, np.nan], [1.0, 3.0, 5.0, np.nan]])
    out = fill_along(np.array([1.0, 2.0, 3.0, 5.0]), v, 1, "t")
    assert out[0].tolist() == pytest.approx([1.0, 2.0, 3.0, 5.0])
    assert out[1].tolist() == pytest.approx([1.0, 3.0, 5.0, 9.0])


def test_fill_along_refuses_a_gap_inside_a_line():
    v = np.array([[1.0, np.nan, 3.0, np.nan]])
    with pytest.raises(ValueError, match="t: a line .* gap"):
        fill_along(np.array([1.0, 2.0, 3.0, 4.0]), v, 1, "t")


def test_grid_from_rows_drops_a_value_whose_lines_cannot_be_filled():
    rows = [dict(b=b, s=s, latency=float(b * s)) for b in (1, 2, 4) for s in (1, 2, 4)]
    rows = [r for r in rows if not (r["b"] == 4 and r["s"] > 1)]  # batch 4: one point only, cannot be extended
    g = grid_from_rows(pd.DataFrame(rows), ["b", "s"], "t", fill_axis="s")
    assert g.axes[0].tolist() == [1.0, 2.0]
    assert g(2, 4) == pytest.approx(8.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=2, max_size=6), st.floats(0.0, 12.0))
def test_one_axis_grid_is_monotone_when_its_points_are(steps, x):
    vals = np.cumsum(steps) + 1.0
    g = Grid((np.arange(1.0, len(vals) + 1.0),), vals)
    assert g(x) <= g(x + 0.5) + 1e-9


def _write(root, system, folder, version, table, frame):
    d = root / system / folder / "vllm" / version
    d.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(d / f"{table}_perf.parquet")


def _hand_tables(root, comm_version="0.1.0"):
    gemm = pd.DataFrame([dict(m=m, n=n, k=k, gemm_dtype=dt, latency=1e-3 * m * n * k / 64 + (dt == "fp8"),
                              kernel_source="torch", device="Toy GPU")
                         for m in (1, 8) for n in (16, 32) for k in (16, 32) for dt in ("bfloat16", "fp8")])
    _write(root, "toy", "gemm", "0.2.0", "gemm", gemm)
    gen = pd.DataFrame([dict(batch_size=b, isl=1, step=s - 1, num_heads=h, num_key_value_heads=2, head_dim=64,
                             kv_cache_dtype="bfloat16", window_size=0, latency=0.01 * b * s + 0.001 * h)
                        for b in (1, 4) for s in (2, 8) for h in (2, 8)])
    _write(root, "toy", "attention", "0.2.0", "generation_attention", gen)
    ctx = pd.DataFrame([dict(batch_size=b, isl=s, num_heads=h, num_key_value_heads=2, head_dim=64,
                             kv_cache_dtype="bfloat16", window_size=0, latency=0.02 * b * s * h)
                        for b in (1, 2) for s in (16, 64) for h in (2, 8)])
    _write(root, "toy", "attention", "0.2.0", "context_attention", ctx)
    ar = pd.DataFrame([dict(num_gpus=g, message_size=e, allreduce_dtype="bfloat16", backend=kind,
                            latency=0.001 * g + e * (1e-6 if kind == "vllm_graph" else 2e-6))
                       for g in (2, 4) for e in (128, 1024) for kind in ("vllm_graph", "vllm_eager")])
    _write(root, "toy", "comm", comm_version, "custom_allreduce", ar)


def test_load_op_tables_reads_hand_made_parquet_and_answers_in_seconds(tmp_path):
    _hand_tables(tmp_path)
    t = load_op_tables("toy", "0.2.0", root=tmp_path)
    assert t.files["custom_allreduce"] == "toy/comm/vllm/0.1.0/custom_allreduce_perf.parquet"  # older version filled in
    assert t.device == "Toy GPU"
    assert t.gemm_s(8, 32, 16) == pytest.approx(1e-6 * 8 * 32 * 16 / 64)  # bf16 rows only (fp8 adds 1 ms)
    # kv_len = isl + step = s; 0.01 b s + 0.001 h, in ms
    assert t.generation_attention_s(4, 8, 8, 2, 64) == pytest.approx(1e-3 * (0.01 * 4 * 8 + 0.001 * 8))
    assert t.context_attention_s(2, 64, 8, 2, 64) == pytest.approx(1e-3 * 0.02 * 2 * 64 * 8)
    assert t.allreduce_s(1024, 4) == pytest.approx(1e-3 * (0.004 + 1024e-6))
    assert t.allreduce_s(1024, 4, graph=False) == pytest.approx(1e-3 * (0.004 + 2048e-6))
    with pytest.raises(ValueError, match="no all-reduce measured on 8 GPUs"):
        t.allreduce_s(1024, 8)
    with pytest.raises(ValueError, match="no rows for 4 KV heads of dimension 64"):
        t.generation_attention_s(1, 8, 8, 4, 64)


def test_load_op_tables_names_what_is_missing(tmp_path):
    _hand_tables(tmp_path, comm_version="0.3.0")  # only newer than asked
    with pytest.raises(FileNotFoundError, match="no custom_allreduce_perf.parquet at version 0.2.0 or older"):
        load_op_tables("toy", "0.2.0", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no system 'nope'"):
        load_op_tables("nope", "0.2.0", root=tmp_path)


def test_shipped_h100_tables_read():
    pytest.importorskip("aiconfigurator_core")
    t = load_op_tables("h100_sxm", "0.24.0")
    assert "H100" in t.device and (8, 128) in t.generation_attention and 2 in t.allreduce
    # a batch-1 GEMM reading the 4096 x 6144 bf16 QKV weight (50 MB) cannot beat the 3.35 TB/s datasheet bandwidth
    assert t.gemm_s(1, 6144, 4096) > 2 * 4096 * 6144 / 3.35e12
