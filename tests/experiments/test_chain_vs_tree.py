"""The chain-vs-tree study's acceptance: a hand-worked tree walk, and chains through the tree rule = the chain walk."""
import numpy as np
import pytest

from calibration.acceptance_math import acc_len_from_matches
from calibration.tree_ranks import prefix_tree_rank
from experiments.studies.chain_vs_tree import study_shapes, tokens_per_step
from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle
from traces.tree import chain_tree, tree_from_widths
from traces.walk import walk_many


def _bundle(traces: list[DrafterTrace], top_k: int, depth: int) -> TraceBundle:
    meta = BundleMeta(target="t", drafters={"d": DrafterSpec("d", "int8", "c", {"tree_top_k": top_k,
                                                                                "tree_depth": depth})})
    reqs = [RequestTrace(id=f"r{i}", prompt_len=4, output_len=len(t.acc_len), drafters={"d": t})
            for i, t in enumerate(traces)]
    return TraceBundle(meta, reqs)


def test_hand_worked_tree_walk():
    # widths [2, 2, 1]: ranks 0-1 at depths 1 and 2, rank 0 at depth 3. Output of 6 tokens; the walk starts at 1.
    rows = np.array([[1, 1, 0], [1, 1, 0], [0, 1, 3], [2, 0, 4], [0, 0, 4], [3, 4, 4]])
    acc = np.array([1, 1, 2, 1, 3, 1])  # the chain: 1 + leading zeros
    b = _bundle([DrafterTrace(acc_len=acc, tree_rank=rows)], top_k=4, depth=3)
    # tree: p1 accepts (1),(1,1),(1,1,0) = 3 -> emits 4 -> p5 accepts 0 -> emits 1: 5 tokens in 2 steps
    assert tokens_per_step(b, "d", tree_from_widths([2, 2, 1])) == pytest.approx(2.5)
    # chain k=3: p1 emits 1, p2 accepts 1 -> 2, p4 accepts 2 -> 2 (the output's end): 5 tokens in 3 steps
    assert tokens_per_step(b, "d", chain_tree(3)) == pytest.approx(5 / 3)


def test_a_chain_through_the_tree_rule_is_the_chain_walk():
    rng = np.random.default_rng(1)
    traces = []
    for _ in range(20):
        n = int(rng.integers(2, 40))
        rank0 = np.where(rng.random(n) < 0.6, 0, rng.integers(1, 9, size=n))  # 8 = not in the top 8
        traces.append(DrafterTrace(acc_len=acc_len_from_matches(rank0 == 0), tree_rank=prefix_tree_rank(rank0, 6, 8)))
    b = _bundle(traces, top_k=8, depth=6)
    for k in range(1, 7):
        assert tokens_per_step(b, "d", chain_tree(k)) == pytest.approx(walk_many(traces, k).tokens_per_step)
    wide = tokens_per_step(b, "d", tree_from_widths([3, 2, 1]))
    assert wide >= tokens_per_step(b, "d", chain_tree(3)) - 1e-12  # a superset of the chain's paths never loses


def test_study_shapes_and_a_too_deep_tree():
    shapes = {s.label: s.tree for s in study_shapes()}
    assert shapes["tree-eagle21"].n_nodes == 21 and shapes["tree-eagle21"].depth == 6
    assert shapes["tree-2-2-1"].n_nodes == 2 + 4 + 4
    b = _bundle([DrafterTrace(acc_len=np.array([1, 1]), tree_rank=np.array([[4, 4], [4, 4]]))], top_k=4, depth=2)
    with pytest.raises(ValueError, match="drafter d: the tree is 3 deep"):
        tokens_per_step(b, "d", chain_tree(3))


def test_engine_study_runs_every_shape_on_both_targets(tmp_path):
    """A smoke run of the figure's sweep on a small synthetic tree bundle: every batch and shape gives a row."""
    from experiments.studies.chain_vs_tree import EngineStudy, TARGETS, run_engine_study
    from traces.bundle import save_bundle

    rng = np.random.default_rng(2)
    traces = []
    for _ in range(8):
        rank0 = np.where(rng.random(40) < 0.7, 0, rng.integers(1, 9, size=40))
        traces.append(DrafterTrace(acc_len=acc_len_from_matches(rank0 == 0), tree_rank=prefix_tree_rank(rank0, 6, 8)))
    b = _bundle(traces, top_k=8, depth=6)
    b.meta.drafters = {"int8": DrafterSpec("int8", "int8", "c", {"tree_top_k": 8, "tree_depth": 6})}
    for r in b.requests:
        r.drafters = {"int8": r.drafters["d"]}
    save_bundle(b, tmp_path / "bundle", compress=False)
    df = run_engine_study(tmp_path, {"synthetic": tmp_path / "bundle"},
                          EngineStudy(batch_sizes=(1, 4), targets=("llama3.1-8b-h100",), requests_per_client=2,
                                      min_requests=8))
    assert len(df) == 2 * len(study_shapes()) and set(df["target"]) == {"llama3.1-8b-h100"}
    assert (df["speedup"] > 0).all() and (tmp_path / "speedup.png").is_file() and (tmp_path / "speedup.csv").is_file()
    assert set(TARGETS) == {"smollm2-135m-cpu", "llama3.1-8b-h100"}
