"""Static draft trees (traces/tree.py) and the bundle's tree_rank field: the shape's validation, the
accepted-drafts rule against hand-worked rows and invariants, and bad bundles named by file, request and field."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.bundle import load_bundle
from traces.errors import TraceFormatError
from traces.tree import (
    MAX_TREE_NODES,
    TreeShapeError,
    chain_tree,
    tree_accepted,
    tree_capacity_check,
    tree_from_paths,
    tree_from_widths,
)

# The 5-node tree of the shape note: two first drafts (ranks 0 and 1), two children under (0,), one under (1,).
FIVE = [(0,), (1,), (0, 0), (0, 1), (1, 0)]


def accepted(tree, row) -> int:
    return tree_accepted(tree.parent, tree.rank, np.asarray(row, dtype=np.int16))


def test_five_node_tree_hand_worked():
    t = tree_from_paths(FIVE)
    assert t.n_nodes == 5 and t.depth == 2
    # sorted by depth then rank: (0,), (1,), (0,0), (0,1), (1,0)
    assert t.parent.tolist() == [-1, -1, 0, 0, 1]
    assert t.rank.tolist() == [0, 1, 0, 1, 0]
    assert t.level_sizes().tolist() == [2, 3]
    assert t.draft_pass_tokens().tolist() == [1, 2]  # pass 1 reads the root, pass 2 the two depth-1 nodes
    # rows of tree_rank (depth 3 traced, K = 4):
    assert accepted(t, [1, 0, 0]) == 2  # (1,) then (1, 0); no depth 3 in the tree
    assert accepted(t, [0, 2, 0]) == 1  # (0,) yes, (0, 2) is not a path
    assert accepted(t, [2, 0, 0]) == 0  # rank 2 at depth 1 is not in the tree
    assert accepted(t, [1, 1, 0]) == 1  # (1, 1) is not a path
    assert accepted(t, [4, 4, 4]) == 0  # K: not among the top K


def test_text_form_and_order_do_not_matter():
    a = tree_from_paths("[(1, 0), (0,), (0, 1), (1,), (0, 0)]")
    b = tree_from_paths(FIVE)
    assert a.paths == b.paths and a.parent.tolist() == b.parent.tolist()


def test_widths_build_the_full_tree():
    t = tree_from_widths([2, 3])
    assert t.n_nodes == 2 + 6 and t.depth == 2
    assert set(t.paths) == {(a,) for a in range(2)} | {(a, b) for a in range(2) for b in range(3)}
    assert t.draft_pass_tokens().tolist() == [1, 2]
    assert tree_from_widths([1, 1, 1]).paths == chain_tree(3).paths == ((0,), (0, 0), (0, 0, 0))


@pytest.mark.parametrize("paths, match", [
    ([(0,), (0, 0), (1, 1)], r"path \[1, 1\] has no parent: its prefix \[1\] is not a path"),
    ([(0,), (0, 0, 0)], r"prefix \[0, 0\] is not a path"),
    ([(0,), (-1,)], "expected integers >= 0"),
    ([(0,), (0,)], "given twice"),
    ([], "non-empty list"),
    ([()], "not a non-empty list"),
    ("[(0,), (1,", "does not parse"),
    ([(0,), (True,)], "expected integers >= 0"),
])
def test_bad_paths_are_refused_with_their_reason(paths, match):
    with pytest.raises(TreeShapeError, match=match):
        tree_from_paths(paths, "config.yaml: policy.tree")


def test_more_than_64_nodes_is_refused_not_capped():
    chain65 = [(0,) * d for d in range(1, MAX_TREE_NODES + 2)]
    with pytest.raises(TreeShapeError, match="has 65 nodes; at most 64"):
        tree_from_paths(chain65)
    assert tree_from_paths(chain65[:64]).n_nodes == 64
    with pytest.raises(TreeShapeError, match="more than 64 nodes"):
        tree_from_widths([4, 4, 4])  # 4 + 16 + 64
    with pytest.raises(TreeShapeError, match="integers >= 1"):
        tree_from_widths([2, 0])


def test_capacity_check_names_depth_and_rank():
    t = tree_from_paths(FIVE)
    assert tree_capacity_check(t, top_k=2, depth=2) is None
    assert "2 deep" in tree_capacity_check(t, top_k=4, depth=1)
    assert "rank 1" in tree_capacity_check(t, top_k=1, depth=3)


@st.composite
def trees(draw):
    """Random valid trees: grow by adding a child of a random existing node (or the root)."""
    paths: list[tuple[int, ...]] = []
    for _ in range(draw(st.integers(1, 20))):
        parent = draw(st.sampled_from([()] + paths))
        if len(parent) >= 6:
            continue
        used = {p[-1] for p in paths if p[:-1] == parent}
        rank = draw(st.integers(0, 4).filter(lambda r: r not in used)) if len(used) < 5 else None
        if rank is not None:
            paths.append(parent + (rank,))
    if not paths:
        paths = [(0,)]
    return tree_from_paths(paths)


@settings(max_examples=150, deadline=None)
@given(trees(), st.lists(st.integers(0, 5), min_size=1, max_size=8))
def test_accepted_is_the_longest_prefix_that_is_a_path(t, row):
    """Against an independent answer: the longest prefix of the row in the path set; never deeper than the tree
    nor the row, and the accepted prefix is a path (never leaves the tree)."""
    got = accepted(t, row)
    paths = set(t.paths)
    expected = 0
    while expected < len(row) and tuple(row[:expected + 1]) in paths:
        expected += 1
    assert got == expected
    assert got <= min(t.depth, len(row))
    assert got == 0 or tuple(row[:got]) in paths


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_chain_tree_accepts_the_leading_zeros(k, row):
    """Chain consistency: a chain of k accepts min(leading zeros, k) (rank 0 = the drafter's greedy guess)."""
    zeros = next((i for i, r in enumerate(row) if r != 0), len(row))
    assert accepted(chain_tree(k), row) == min(zeros, k)


# ---------------------------------------------------------------- the bundle field

META = {"schema_version": 1, "target": "toy", "drafters": {
    "d": {"kind": "eagle", "cost_model": "c", "params": {"tree_top_k": 4, "tree_depth": 2}}}}


def make(folder: Path, ranks, meta=META, acc=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.yaml").write_text(yaml.safe_dump(meta), encoding="utf-8")
    n = len(ranks)
    doc = {"id": "req-7", "prompt_len": 3, "output_len": n,
           "drafters": {"d": {"acc_len": acc or [1] * n, "tree_rank": ranks}}}
    (folder / "requests.jsonl").write_text(json.dumps(doc) + "\n", encoding="utf-8")
    return folder


def test_tree_rank_loads_compact_and_round_trips(tmp_path):
    from traces.bundle import save_bundle

    b = load_bundle(make(tmp_path / "b", [[0, 1], [3, 0], [2, 4]]))
    t = b.requests[0].drafters["d"].tree_rank
    assert t.dtype == np.int8 and t.tolist() == [[0, 1], [3, 0], [2, 4]]
    again = load_bundle(save_bundle(b, tmp_path / "c"))
    assert again.requests[0].drafters["d"].tree_rank.tolist() == t.tolist()
    assert again.meta.drafters["d"].params == {"tree_top_k": 4, "tree_depth": 2}


@pytest.mark.parametrize("ranks, match", [
    ([[0, 1], [3, 0, 1], [2, 4]], "expected every row to hold 2 ranks like row 0, got 3 at position 1"),
    ([[0, 1, 1], [3, 0, 1], [2, 4, 4]], r"expected 3 rows \(output_len\) of 2 ranks \(tree_depth\)"),
    ([[0, 1], [5, 0], [2, 4]], r"expected ranks in \[0, 4\].*got 5 at position 1, depth 0"),
    ([[0, 1], [-1, 0], [2, 4]], r"got -1 at position 1, depth 0"),
    ([[0, 1], [3, 0], [2, 1]], r"position 2, depth 1 lies past the output's end \(3 tokens\) and must be 4"),
    ([[0, 1], [3, 0], [2, True]], "expected 32-bit integers"),
    ("zeros", "expected a list"),
])
def test_bad_tree_rank_names_file_request_drafter_field(tmp_path, ranks, match):
    with pytest.raises(TraceFormatError, match=match) as info:
        load_bundle(make(tmp_path / "b", ranks))
    e = info.value
    assert e.path.endswith("requests.jsonl") and e.line == 1 and e.field == "drafters.d.tree_rank"


def test_tree_rank_without_declared_params_is_refused(tmp_path):
    meta = {"schema_version": 1, "target": "toy", "drafters": {"d": {"kind": "eagle", "cost_model": "c"}}}
    with pytest.raises(TraceFormatError, match="given, but this drafter.s trace.yaml params declare no tree_top_k and tree_depth") as info:
        load_bundle(make(tmp_path / "b", [[0, 1], [3, 0], [2, 4]], meta))
    assert info.value.field == "drafters.d.tree_rank"


@pytest.mark.parametrize("params, field", [
    ({"tree_top_k": 4}, "drafters.d.params.tree_depth"),
    ({"tree_top_k": 0, "tree_depth": 2}, "drafters.d.params.tree_top_k"),
    ({"tree_top_k": 4, "tree_depth": "2"}, "drafters.d.params.tree_depth"),
])
def test_bad_tree_params_name_the_field(tmp_path, params, field):
    meta = {"schema_version": 1, "target": "toy", "drafters": {"d": {"kind": "eagle", "cost_model": "c",
                                                                     "params": params}}}
    with pytest.raises(TraceFormatError) as info:
        load_bundle(make(tmp_path / "b", [[0, 1], [3, 0], [2, 4]], meta))
    assert info.value.field == field and info.value.path.endswith("trace.yaml")
