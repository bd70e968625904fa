"""`draftsim --version`, SLOs typed in milliseconds, and --no-plots."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cli import main
from experiments.config import ConfigError, load_config
from tests.experiments.test_sweep_spec import BASE

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_the_package_version_without_loading_commands():
    import importlib.metadata

    code = ("import sys; from experiments.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "heavy = [m for m in ('pandas', 'simpy', 'matplotlib', 'rich') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith(f"draftsim {importlib.metadata.version('draftsim')} (Python ")


@pytest.mark.parametrize("key, value, meant", [("ttft_s", 250, "0.25 (250 ms)"), ("tpot_s", 50, "0.05 (50 ms)")])
def test_an_slo_typed_in_ms_is_refused_with_the_likely_meaning(key, value, meant):
    with pytest.raises(ConfigError, match=rf"slo\.{key}: {value} s is implausible .* did you mean {re.escape(meant)}\?"):
        load_config({**BASE, "slo": {"ttft_s": 1.0, "tpot_s": 0.05, key: value}})
    load_config({**BASE, "slo": {"ttft_s": 30.0, "tpot_s": 0.5}})  # generous but plausible seconds pass


def test_no_plots_writes_numbers_only(tmp_path, monkeypatch, capsys):
    import yaml

    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(BASE))
    assert main(["run", str(cfg), "--out", str(tmp_path / "res"), "--no-plots", "--no-progress"]) == 0
    names = {p.name for p in (tmp_path / "res").iterdir()}
    assert "plots" not in names and {"summary.json", "requests.parquet", "steps.parquet", "timeline.json"} <= names
    assert main(["run", str(cfg), "--out", str(tmp_path / "res2"), "--no-progress"]) == 0
    assert (tmp_path / "res2" / "plots" / "latency_cdf.png").is_file()
