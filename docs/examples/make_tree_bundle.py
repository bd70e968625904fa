"""Write docs/examples/tree_bundle/: a small synthetic bundle whose drafter carries tree_rank (docs/configs.md,
"Draft trees"), for docs/examples/tree.yaml. Deterministic (seed 0); rerun from the repository root to rebuild:
    python docs/examples/make_tree_bundle.py

The drafter is modelled as conditioned on the token prefix only, so one depth-0 rank per output position gives the
whole table (tree_rank[p][j] = the depth-0 rank at p + j, "not among the top K" past the output's end), and acc_len
is the chain's replay of it (1 + the run of rank-0 positions from p): the two agree as the bundle format requires.
The rank probabilities below are made up for the example, not measured."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, save_bundle  # noqa: E402

TOP_K, DEPTH = 4, 4
RANK_P = [0.62, 0.14, 0.07, 0.04, 0.13]  # ranks 0..3, then TOP_K (not among the top 4)


def request(i: int, rng: np.random.Generator) -> RequestTrace:
    out = int(rng.integers(64, 257))
    r0 = rng.choice(TOP_K + 1, size=out, p=RANK_P)
    padded = np.concatenate([r0, np.full(DEPTH, TOP_K)])
    ranks = np.stack([padded[j:j + out] for j in range(DEPTH)], axis=1).astype(np.int8)
    acc = np.ones(out, dtype=np.int32)
    run = 0
    for p in range(out - 1, -1, -1):  # acc_len[p] = 1 + the rank-0 run starting at p
        run = run + 1 if r0[p] == 0 else 0
        acc[p] = 1 + run
    return RequestTrace(f"req{i}", int(rng.integers(32, 513)), out,
                        {"tree-drafter": DrafterTrace(acc, tree_rank=ranks)}, category="chat")


def tree_bundle() -> TraceBundle:
    """The example bundle, drawn from seed 0."""
    rng = np.random.default_rng(0)
    meta = BundleMeta(target="llama3.1-8b", dataset="synthetic-tree-example",
                      drafters={"tree-drafter": DrafterSpec("tree-drafter", "synthetic", "eagle3-llama3.1-8b",
                                                            {"tree_top_k": TOP_K, "tree_depth": DEPTH})},
                      source={"generator": "docs/examples/make_tree_bundle.py", "seed": 0})
    return TraceBundle(meta, [request(i, rng) for i in range(32)])


def main() -> None:
    print(save_bundle(tree_bundle(), Path(__file__).resolve().parent / "tree_bundle"))


if __name__ == "__main__":
    main()
