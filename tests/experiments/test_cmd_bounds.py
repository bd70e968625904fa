"""`draftsim bounds`: analytic output, JSON keys, frontier mode, plots, and engine-vs-analytic agreement."""
from __future__ import annotations

import argparse
import json

import pytest

from experiments.cli import bounds as cmd_bounds
from experiments.studies.bounds_sim import simulate_pipeline
from oracle.bounds import pipeline_gain, pipeline_saving


def _main(argv):
    parser = argparse.ArgumentParser(prog="draftsim")
    cmd_bounds.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bounds", *argv])
    return args.func(args)


def test_text_output(capsys):
    assert _main(["--draft-time", "0.01", "--verify-time", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "1.5000" in out and "33.33%" in out and "t/V = 0.5" in out


def test_json_output(capsys):
    assert _main(["--draft-time", "0.03", "--verify-time", "0.03", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["analytic_gain"] == 2.0 and doc["analytic_saving"] == 0.5 and doc["within_37_band"] is True


def test_missing_times_is_a_clear_error():
    with pytest.raises(ValueError, match="--draft-time"):
        _main(["--verify-time", "0.02"])
    with pytest.raises(ValueError, match="--alpha-v"):
        _main(["--frontier"])
    with pytest.raises(ValueError, match="verify time"):
        _main(["--draft-time", "0.01", "--verify-time", "-1"])


def test_frontier_text_json_and_plot(capsys, tmp_path):
    assert _main(["--frontier", "--alpha-v", "1.68"]) == 0
    out = capsys.readouterr().out
    assert "holds here" in out and "assumptions:" in out and "only for alpha*V in" in out
    png = tmp_path / "frontier.png"
    assert _main(["--frontier", "--alpha-v", "10", "--json", "--plot", str(png), "--range", "0.05", "50"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["point"]["meets_claim"] is False
    assert doc["summary"]["claim_holds_from"] < 10 and doc["summary"]["claim_holds_to"] < 10
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_analytic_plot(tmp_path):
    png = tmp_path / "saving.png"
    assert _main(["--draft-time", "1", "--verify-time", "2", "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("ratio", [0.1, 0.5, 1.0, 2.0, 10.0])
def test_simulated_matches_analytic_within_2_percent(ratio):
    """Saturated closed loop, constant step costs: the engine's PSD vs SD gain and E2E ratio agree
    with (t+V)/max(t,V) and 1 - min(t,V)/(t+V) within 2% (relative)."""
    v = 0.02
    s = simulate_pipeline(ratio * v, v, sub_batch=8, num_requests=300, seed=1)
    assert s.simulated_gain == pytest.approx(pipeline_gain(ratio * v, v), rel=0.02)
    assert 1 - s.simulated_saving == pytest.approx(1 - pipeline_saving(ratio * v, v), rel=0.02)
    assert s.psd_throughput_tok_s > s.sd_throughput_tok_s


def test_simulate_json_keys(capsys):
    assert _main(["--draft-time", "0.01", "--verify-time", "0.01", "--simulate", "--json", "--sub-batch", "4",
                  "--requests", "120"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("analytic_gain", "simulated_gain", "analytic_saving", "simulated_saving"):
        assert isinstance(doc[key], float)
    assert doc["simulated_gain"] == pytest.approx(2.0, rel=0.05)


def test_below_capacity_psd_is_slower_per_request():
    # Open load at half of SD's capacity: no queue to shorten, and each PSD request is verified every
    # other step, so PSD's E2E is longer (the analytic saving is a saturation figure).
    s = simulate_pipeline(0.002, 0.02, sub_batch=8, num_requests=300, load=0.5, seed=2)
    assert s.simulated_saving < 0
    assert s.simulated_gain == pytest.approx(1.0, abs=0.02)


def test_prefill_only_steps_lower_the_saturated_pipeline_gain():
    from experiments.studies.bounds_sim import simulate_pipeline

    mixed = simulate_pipeline(0.02, 0.02, num_requests=200, sub_batch=8)
    separate = simulate_pipeline(0.02, 0.02, num_requests=200, sub_batch=8, prefill="separate")
    assert "prefill separate" in separate.setup
    # prefill-only steps stall both sub-batches, so part of the drafting is no longer hidden
    assert 1.0 < separate.simulated_gain < mixed.simulated_gain
