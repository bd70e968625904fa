"""The suffix-cost sweep measures the grid it is given, records load and provenance, and writes a loadable profile
(no wall-clock value is asserted)."""
from __future__ import annotations

from calibration.latency_sweep import SweepConfig
from calibration.suffix_cost import calibrate_suffix_cost, sweep_suffix
from simulator.costs.latency import load_profile
from traces.suffix_decoding import SuffixConfig


def test_one_point_per_grid_cell_with_load_and_proposals():
    cfg = SweepConfig(batch_sizes=[1, 3], context_lens=[16, 40], warmup=0, repeats=1)
    ms = sweep_suffix(cfg, SuffixConfig(max_tree_depth=6))
    assert [(m.num_seqs, m.kv_tokens) for m in ms] == [(1, 16), (1, 40), (3, 48), (3, 120)]
    assert all(m.load is not None and m.repeats == 1 for m in ms)
    assert all(0 <= m.batched_tokens <= m.num_seqs * 6 for m in ms)  # k defaults to the depth
    assert any(m.batched_tokens > 0 for m in ms)  # a 32-token alphabet recurs: the proposer walks paths


def test_writes_a_measured_profile(tmp_path):
    cfg = SweepConfig(batch_sizes=[1, 2], context_lens=[16, 32], warmup=0, repeats=1)
    path, report = calibrate_suffix_cost(cfg, SuffixConfig(max_tree_depth=4), tmp_path / "s.yaml", "s-cpu")
    prof = load_profile(path)
    assert prof.name == "s-cpu" and prof.provenance.source == "measured"
    assert "suffix-decoding proposer" in prof.provenance.notes and report["points"] == 4


def test_an_unknown_or_missing_backend_is_refused_before_timing(monkeypatch):
    import sys

    import pytest

    cfg = SweepConfig(batch_sizes=[1], context_lens=[8], warmup=0, repeats=1)
    with pytest.raises(ValueError, match="expected one of python, arctic"):
        sweep_suffix(cfg, SuffixConfig(), backend="cpp")
    monkeypatch.setitem(sys.modules, "arctic_inference", None)  # not importable
    monkeypatch.setitem(sys.modules, "arctic_inference.suffix_decoding", None)
    with pytest.raises(ValueError, match="arctic_inference"):
        sweep_suffix(cfg, SuffixConfig(), backend="arctic")
