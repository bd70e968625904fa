"""Chain vs tree drafts on the measured SmolLM2-135M tree bundles: mean tokens per verify step per drafter and shape.

A static tree is replayed from each drafter's `tree_rank` rows by the accepted-drafts rule of traces/tree.py
(`tree_accepted`); the replay walk is traces/walk.py's (first step at output position 1, each step emits
1 + accepted, cut at the output's end), fed the tree's acceptance per position, so chains and trees are walked by
one rule. `python -m experiments.studies.chain_vs_tree --out DIR` writes `acceptance.csv` and prints the table.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces.bundle import DrafterTrace, TraceBundle, load_bundle
from traces.tree import TreeShape, chain_tree, tree_accepted, tree_capacity_check, tree_from_paths, tree_from_widths
from traces.walk import walk_many

BUNDLE_DIR = Path(__file__).resolve().parents[2] / "traces" / "data" / "bundles"
TREE_BUNDLES = ("smollm2-135m-instruct-chat-tree", "smollm2-135m-instruct-code-edit-tree")

# A 21-node tree shaped like EAGLE's static trees (most nodes below the top-ranked guesses), the size of the tree
# the "Performance or Illusion?" paper verifies; depth 6, children of rank <= 3.
EAGLE_LIKE_21 = [(0,), (1,), (2,), (3,),
                 (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0),
                 (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0),
                 (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0),
                 (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
                 (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 1, 0)]


@dataclass(frozen=True)
class NamedShape:
    """A draft shape of the study: its label and tree (a chain of k is the tree of widths [1] * k)."""

    label: str
    tree: TreeShape


def study_shapes() -> list[NamedShape]:
    """Chains k = 3 and 5, the full tree of widths [2, 2, 1] (10 nodes) and the 21-node EAGLE-like tree."""
    return [NamedShape("chain-k3", chain_tree(3)), NamedShape("chain-k5", chain_tree(5)),
            NamedShape("tree-2-2-1", tree_from_widths([2, 2, 1])),
            NamedShape("tree-eagle21", tree_from_paths(EAGLE_LIKE_21, "EAGLE_LIKE_21"))]


def tree_acc_len(trace: DrafterTrace, tree: TreeShape) -> np.ndarray:
    """Per output position, 1 + the drafts `tree` accepts there (the tree's acc_len, at most depth + 1)."""
    if trace.tree_rank is None:
        raise ValueError("this drafter's trace has no tree_rank (collect it with --tree-top-k/--tree-depth)")
    rows = np.asarray(trace.tree_rank)
    return np.array([1 + tree_accepted(tree.parent, tree.rank, rows[p]) for p in range(rows.shape[0])],
                    dtype=np.int32)


def tokens_per_step(bundle: TraceBundle, drafter: str, tree: TreeShape) -> float:
    """Mean tokens per verify step of `drafter` drafting `tree` over every request of `bundle`."""
    spec = bundle.meta.drafters[drafter]
    why = tree_capacity_check(tree, int(spec.params["tree_top_k"]), int(spec.params["tree_depth"]))
    if why is not None:
        raise ValueError(f"drafter {drafter}: {why}")
    traces = [DrafterTrace(acc_len=tree_acc_len(r.drafters[drafter], tree)) for r in bundle.requests]
    return walk_many(traces, tree.depth).tokens_per_step


def acceptance_rows(bundles: dict[str, TraceBundle], shapes: list[NamedShape]) -> list[dict]:
    """One row per bundle, drafter and shape: nodes verified per step and mean tokens per step."""
    rows = []
    for bname, b in bundles.items():
        for d in b.meta.drafters:
            for s in shapes:
                rows.append({"bundle": bname, "drafter": d, "shape": s.label, "nodes": s.tree.n_nodes,
                             "tokens_per_step": round(tokens_per_step(b, d, s.tree), 4)})
    return rows


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from traces.atomic import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for acceptance.csv")
    args = ap.parse_args(argv)
    bundles = {name: load_bundle(BUNDLE_DIR / name) for name in TREE_BUNDLES}
    table = pd.DataFrame(acceptance_rows(bundles, study_shapes()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "acceptance.csv", table.to_csv(index=False))
    print(table.pivot_table(index=["bundle", "drafter"], columns="shape", values="tokens_per_step").to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
