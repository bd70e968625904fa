"""Latency sweep on a tiny random model: grid, timing discipline, fit and profile files."""
import pytest

torch = pytest.importorskip("torch")

from calibration.latency_sweep import (SweepConfig, fit_profiles, provenance, sweep_model, sweep_ngram,  # noqa: E402
                                       time_repeats)
from calibration.models.ngram import NgramDrafter  # noqa: E402
from simulator.costs.latency import load_profile, save_profile  # noqa: E402


def test_time_repeats_counts_calls():
    calls = []
    med, spread, times = time_repeats(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(calls) == 5 and len(times) == 3 and med >= 0 and spread >= 0


def test_sweep_grid_and_measurement_fields(tiny_llama):
    cfg = SweepConfig(batch_sizes=[1, 2], query_tokens=[1, 3], context_lens=[8, 16], warmup=1, repeats=2)
    ms = sweep_model(tiny_llama, cfg, progress=False)
    assert len(ms) == 8
    m = [x for x in ms if x.num_seqs == 2 and x.extra["query_tokens"] == 3 and x.extra["context_len"] == 16][0]
    assert m.batched_tokens == 6 and m.kv_tokens == 2 * 19 and m.repeats == 2
    assert m.seconds > 0 and m.load is not None and m.extra["threads"] == 1


def test_sweep_config_rejects_bad_grid():
    with pytest.raises(ValueError, match="batch_sizes"):
        SweepConfig(batch_sizes=[])
    with pytest.raises(ValueError, match="repeats"):
        SweepConfig(repeats=0)


def test_fit_and_round_trip(tiny_llama, tmp_path):
    cfg = SweepConfig(batch_sizes=[1, 2], query_tokens=[1, 2], context_lens=[8, 32], warmup=1, repeats=2)
    ms = sweep_model(tiny_llama, cfg, progress=False)
    fitted = fit_profiles("tiny-cpu", "tiny", ms, provenance("hf", "cpu", "float32"))
    assert set(fitted.report["mape_percent_without_term"]) == {"kv_tokens", "batched_tokens", "num_seqs", "const"}
    for prof in (fitted.linear, fitted.table):
        path = save_profile(prof, tmp_path / f"{prof.name}.yaml")
        back = load_profile(path)
        assert back.provenance.source == "measured" and back.provenance.versions["torch"]
        assert len(back.measurements) == len(ms)
        assert back.step_time(1, 1, 9) == pytest.approx(prof.step_time(1, 1, 9))


def test_ngram_sweep():
    ms = sweep_ngram(NgramDrafter(), SweepConfig(batch_sizes=[1, 4], context_lens=[32], warmup=0, repeats=2))
    assert [m.num_seqs for m in ms] == [1, 4] and all(m.seconds > 0 for m in ms)
