"""`draftsim placement`: fit / no-fit printed as results, JSON, catalog listing, clear errors."""
from __future__ import annotations

import argparse
import json

import pytest

from experiments.cli import placement as cmd_placement
def _main(argv):
    parser = argparse.ArgumentParser(prog="draftsim")
    cmd_placement.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["placement", *argv])
    return args.func(args)


def test_sd_does_not_fit_psd_does(capsys):
    base = ["--target", "qwen3-32b", "--gpu", "l40s", "--tp", "4", "--drafter", "qwen3-8b", "--util", "0.65", "--json"]
    assert _main(base + ["--drafter-tp", "1"]) == 0
    sd = json.loads(capsys.readouterr().out)
    assert sd["fits"] is False and sd["message"].startswith("does not fit: needs")
    assert _main(base + ["--placement", "dedicated"]) == 0
    psd = json.loads(capsys.readouterr().out)
    assert psd["fits"] is True and psd["total_gpus"] == 5 and psd["kv_capacity_tokens"] > 0


def test_text_and_catalog(capsys):
    assert _main(["--target", "llama3.1-8b", "--gpu", "h100-80gb"]) == 0
    assert "fits: KV capacity" in capsys.readouterr().out
    assert _main(["--catalog", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["models"]["qwen3-32b"]["kv_kib_per_token"] == 256.0
    assert "l40s" in doc["gpus"]


def test_errors():
    with pytest.raises(ValueError, match="--target and --gpu"):
        _main(["--gpu", "l40s"])
    with pytest.raises(ValueError, match="unknown GPU"):
        _main(["--target", "qwen3-32b", "--gpu", "tpu-v5"])


def test_drafter_step_times_are_the_draft_model_on_its_own_gpus(capsys):
    from simulator.costs.roofline import RooflineProfile
    from traces.catalog import get_gpu, get_model

    base = ["--target", "llama3.1-70b", "--gpu", "h100-80gb", "--tp", "4", "--drafter", "llama3.2-1b"]
    assert _main(base + ["--placement", "dedicated", "--drafter-gpu", "l40s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    own = RooflineProfile(get_model("llama3.2-1b"), get_gpu("l40s"), tp=1)
    assert doc["roofline_drafter_device"] == "1x l40s"
    assert doc["roofline_drafter_step_s"]["decode_batch_16"] == pytest.approx(own.step_time(16, 16, 16 * 1024))
    assert _main(base + ["--drafter-tp", "1"]) == 0
    assert "roofline drafter step on 1x h100-80gb" in capsys.readouterr().out


def test_a_linear_attention_target_needs_and_holds_max_num_seqs(capsys):
    base = ["--target", "qwen3-next-80b-a3b", "--gpu", "h100-80gb", "--tp", "4"]
    with pytest.raises(ValueError, match=r"deployment\.max_num_seqs: required"):
        _main(base)
    assert _main(base + ["--max-num-seqs", "64"]) == 0
    out = capsys.readouterr().out
    assert "linear-attention state of 64 sequences" in out and "linear-attention state 0.6," in out  # 64 x 37.7 / 4
    assert _main(base + ["--max-num-seqs", "64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"][0]["state_gib"] == pytest.approx(64 * 39518208 / 4 / 2**30)
