"""PSD experiment configs: validation, a tiny PSD-vs-SD sweep and a tiny bounds sweep end to end."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.psd_inputs import iid_acc_len
from experiments.psd_report import load_config, run_report

CONFIGS = Path(__file__).resolve().parents[2] / "experiments" / "configs"


def test_shipped_configs_validate():
    vs = load_config(CONFIGS / "psd_vs_sd.yaml")
    assert vs.target.model == "qwen3-32b" and vs.target.tp == 4
    assert list(vs.drafters) == ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b"]
    assert vs.k == [1, 2, 3, 4, 5] and vs.sub_batch == [8, 16, 32, 64]
    b = load_config(CONFIGS / "psd_bounds.yaml")
    assert min(b.t_over_v) == 0.05 and max(b.t_over_v) == 5.0
    assert b.loads == ["saturated", 0.5, 0.8, 0.95]


def _write(tmp_path, doc):
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize("doc,match", [
    ({"kind": "psd_vs_sd", "target": {"model": "qwen3-32b", "gpu": "h100-80gb"}, "drafters": {}, "extra": 1},
     "extra: unknown key"),
    ({"kind": "psd_vs_sd", "target": {"model": "qwen3-32b", "gpu": "h100-80gb"},
      "drafters": {"qwen3-0.6b": {"acceptance": 1.5}}}, "drafters.qwen3-0.6b.acceptance: "),
    ({"kind": "psd_vs_sd", "target": {"model": "qwen3-99b", "gpu": "h100-80gb"}, "drafters": {}}, "unknown model"),
    ({"kind": "psd_bounds", "t_over_v": [1.0], "loads": ["busy"]}, "loads"),
    ({"kind": "other"}, "key 'kind'"),
])
def test_bad_configs_name_file_and_key(tmp_path, doc, match):
    path = _write(tmp_path, doc)
    with pytest.raises(ValueError, match=match) as e:
        load_config(path)
    assert str(path) in str(e.value)


def test_iid_acceptance_matches_its_rate():
    import numpy as np

    a = iid_acc_len(np.random.default_rng(0), 0.7, 200_000, max_acc_len=100)
    # P(acc_len >= 2) = rate, mean acc_len = 1 / (1 - rate)
    assert (a >= 2).mean() == pytest.approx(0.7, abs=0.005)
    assert a.mean() == pytest.approx(1 / 0.3, rel=0.02)


def test_tiny_psd_vs_sd_end_to_end(tmp_path):
    doc = yaml.safe_load((CONFIGS / "psd_vs_sd.yaml").read_text())
    doc.update(k=[1, 3], sub_batch=[4], drafters={"qwen3-0.6b": {"acceptance": 0.6}, "qwen3-8b": {"acceptance": 0.78}},
               workload={"num_requests": 24, "output_len": 32, "prompt_median": 64, "prompt_max": 256})
    info = run_report(_write(tmp_path, doc), tmp_path / "out", progress=False)
    df = pd.read_csv(info["table"])
    assert len(df) == 1 + 2 * 2 * 2  # AR + (drafter x k x {sd, psd})
    assert df["fits"].all()
    psd = df[df["mode"] == "psd"]
    assert (psd["gpus"] == 5).all() and (df[df["mode"] == "sd"]["gpus"] == 4).all()
    assert (psd["concurrency"] == 8).all()
    # per-GPU figures are the totals over the GPUs used
    assert (df["throughput_per_gpu"] * df["gpus"]).values == pytest.approx(df["throughput_tok_s"].values)
    # a bigger drafter takes longer to draft relative to the same verify
    t_over_v = psd.set_index(["drafter", "k"])["t_over_v"]
    assert t_over_v[("qwen3-8b", 3)] > t_over_v[("qwen3-0.6b", 3)]
    for p in info["plots"]:
        assert Path(p).read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Best k" in report and "own best k" in report


def test_does_not_fit_rows_are_reported_not_raised(tmp_path):
    doc = yaml.safe_load((CONFIGS / "psd_vs_sd.yaml").read_text())
    doc.update(target={"model": "qwen3-32b", "gpu": "l40s", "tp": 4}, k=[1], sub_batch=[4],
               drafters={"qwen3-8b": {"acceptance": 0.78}},
               workload={"num_requests": 12, "output_len": 16, "prompt_median": 32, "prompt_max": 64})
    info = run_report(_write(tmp_path, doc), tmp_path / "out", progress=False)
    df = pd.read_csv(info["table"])
    sd = df[df["mode"] == "sd"].iloc[0]
    assert not sd["fits"] and sd["placement"].startswith("does not fit: needs")
    assert df[df["mode"] == "psd"]["fits"].all()
    assert "do not fit" in (tmp_path / "out" / "report.md").read_text()


def test_tiny_bounds_sweep(tmp_path):
    doc = {"kind": "psd_bounds", "t_over_v": [0.5, 1.0], "loads": ["saturated", 0.8], "sub_batch": 4,
           "num_requests": 120, "output_len": [64, 128]}
    info = run_report(_write(tmp_path, doc), tmp_path / "out", progress=False)
    df = pd.read_csv(info["table"])
    assert len(df) == 4
    sat = df[df["load"] == "saturated"].set_index("t_over_v")
    assert sat.loc[1.0, "simulated_gain"] == pytest.approx(2.0, rel=0.05)
    assert Path(info["plots"][0]).stat().st_size > 1000
