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


def test_the_tree_example_bundle_is_its_generators_output_and_chain_consistent():
    import runpy

    import numpy as np

    from traces.bundle import load_bundle

    made = runpy.run_path(str(ROOT / "docs/examples/make_tree_bundle.py"), run_name="not_main")["tree_bundle"]()
    shipped = load_bundle(ROOT / "docs/examples/tree_bundle")
    assert [r.id for r in shipped.requests] == [r.id for r in made.requests]
    for a, b in zip(shipped.requests, made.requests):
        ta, tb = a.drafters["tree-drafter"], b.drafters["tree-drafter"]
        assert (ta.acc_len == tb.acc_len).all() and (ta.tree_rank == tb.tree_rank).all()
        # the shape note's chain consistency: min(acc_len - 1, depth) = leading zeros of each rank row
        zeros = np.argmax(np.concatenate([ta.tree_rank, np.ones((a.output_len, 1), np.int8)], axis=1) != 0, axis=1)
        assert (np.minimum(ta.acc_len - 1, ta.tree_rank.shape[1]) == zeros).all()


def test_the_tree_example_config_runs_its_trees(monkeypatch):
    from experiments.run import run_experiment

    monkeypatch.chdir(ROOT)
    res = run_experiment("docs/examples/tree.yaml", ["workload.num_requests=24"], plots=False)
    assert list(res.summary) == ["AR", "chain-k3", "tree-2x2x1", "tree-vllm-paths"]
    for name in ("tree-2x2x1", "tree-vllm-paths"):
        assert res.summary[name]["num_finished"] == 24
