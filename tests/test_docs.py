"""The docs' configs and snippets run as written (from the repository root, as a user runs them)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import yaml

from experiments.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def _blocks(page: str, lang: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return [textwrap.dedent(b) for b in re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)]


def test_the_annotated_config_of_configs_md_validates(monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_config(yaml.safe_load(_blocks("configs.md", "yaml")[0]))
    assert [r.name for r in cfg.runs] == ["AR", "sd", "psd", "bandit", "mine", "big-batch"]
    assert cfg.workload.categories == ["chat"]


def test_the_regret_runner_snippet_of_policies_md_runs(monkeypatch):
    monkeypatch.chdir(ROOT)
    code = next(b for b in _blocks("policies.md", "python") if "run_rounds" in b and "import" in b)
    exec(compile(code, "docs/policies.md", "exec"), {})  # its asserts are the check
