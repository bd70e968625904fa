"""Static draft trees: the shape (vLLM's `speculative_token_tree` path list, or per-level widths), its validation,
and the accepted-drafts rule that replays a tree from a drafter's per-position rank row (`tree_rank`).

Under greedy verification a node is accepted when its rank (its place among the drafter's top-K candidates below its
parent) equals the rank of the target's token there, and its parent was accepted. The rule `tree_accepted(parent, rank,
row)` is a plain function over arrays, compiled by the engine's kernels (one implementation).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_TREE_NODES = 64  # nodes (drafted tokens) in one tree: vLLM's tree attention verifies N + 1 <= 65 tokens


class TreeShapeError(ValueError):
    """A tree given in a config or bundle is malformed; the message says where and what was expected."""


@dataclass(frozen=True)
class TreeShape:
    """A static draft tree: its paths (tuples of child ranks, sorted by depth then rank) and, per node in that
    order, its parent's index (-1 = the root, the last verified token) and its rank among its parent's children."""

    paths: tuple[tuple[int, ...], ...]
    parent: np.ndarray  # int32 (N,)
    rank: np.ndarray  # int32 (N,)

    @property
    def n_nodes(self) -> int:
        """N: the drafted tokens a step verifies (plus the one bonus position: N + 1 verified)."""
        return len(self.paths)

    @property
    def depth(self) -> int:
        """The longest path: the most drafts one step can accept."""
        return max(len(p) for p in self.paths)

    def level_sizes(self) -> np.ndarray:
        """int32 (depth,): entry j = the nodes at depth j + 1."""
        sizes = np.zeros(self.depth, dtype=np.int32)
        for p in self.paths:
            sizes[len(p) - 1] += 1
        return sizes

    def draft_pass_tokens(self) -> np.ndarray:
        """int32 (depth,): entry j = the tokens drafting pass j + 1 reads: the nodes at depth j (the root for
        j = 0) that have children. Pass j + 1 proposes the nodes at depth j + 1 from their parents, one drafter
        pass per depth; a chain of k reads one token in each of k passes."""
        parents = {p[:-1] for p in self.paths}
        counts = np.zeros(self.depth, dtype=np.int32)
        for q in parents:
            counts[len(q)] += 1
        return counts

    def max_rank(self) -> int:
        """The largest child rank in the tree (a replayed drafter must rank at least this many + 1 candidates)."""
        return int(self.rank.max())


def _tree_error(where: str, msg: str) -> TreeShapeError:
    return TreeShapeError(f"{where}: {msg}")


def tree_from_paths(paths: Any, where: str = "tree") -> TreeShape:
    """Validate a path list (vLLM's `speculative_token_tree`: a list of tuples of child ranks, or its text form
    "[(0,), (1,), (0, 0)]") and build the TreeShape; every prefix of a path must itself be a path, ranks >= 0,
    no duplicates, 1..MAX_TREE_NODES nodes. Errors name `where` and the offending path."""
    if isinstance(paths, str):
        try:
            paths = ast.literal_eval(paths)
        except (ValueError, SyntaxError):
            raise _tree_error(where, "expected a list of tuples of child ranks such as [(0,), (1,), (0, 0)], "
                              "got text that does not parse as one") from None
    if not isinstance(paths, (list, tuple)) or not paths:
        raise _tree_error(where, "expected a non-empty list of paths (each a list of child ranks >= 0)")
    if len(paths) > MAX_TREE_NODES:
        raise _tree_error(where, f"has {len(paths)} nodes; at most {MAX_TREE_NODES} are supported")
    seen: set[tuple[int, ...]] = set()
    for i, p in enumerate(paths):
        if not isinstance(p, (list, tuple)) or not p:
            raise _tree_error(where, f"path {i} is not a non-empty list of child ranks")
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in p):
            raise _tree_error(where, f"path {i} {list(p) if len(p) <= 16 else '(long)'}: expected integers >= 0")
        t = tuple(int(r) for r in p)
        if t in seen:
            raise _tree_error(where, f"path {list(t)} is given twice")
        seen.add(t)
    for t in seen:
        if len(t) > 1 and t[:-1] not in seen:
            raise _tree_error(where, f"path {list(t)} has no parent: its prefix {list(t[:-1])} is not a path "
                              "(every prefix of a path must be a path)")
    ordered = tuple(sorted(seen, key=lambda t: (len(t), t)))
    index = {t: i for i, t in enumerate(ordered)}
    parent = np.array([index[t[:-1]] if len(t) > 1 else -1 for t in ordered], dtype=np.int32)
    rank = np.array([t[-1] for t in ordered], dtype=np.int32)
    return TreeShape(ordered, parent, rank)


def tree_from_widths(widths: Any, where: str = "tree.widths") -> TreeShape:
    """The full tree where every node at depth j - 1 has widths[j - 1] children (ranks 0..w-1):
    N = sum over j of w1 * ... * wj, at most MAX_TREE_NODES."""
    if not isinstance(widths, (list, tuple)) or not widths or not all(
            isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in widths):
        raise _tree_error(where, "expected a non-empty list of integers >= 1 (children per node, per depth)")
    n, level = 0, 1
    for w in widths:
        level *= w
        n += level
        if n > MAX_TREE_NODES:
            raise _tree_error(where, f"{list(widths)} makes more than {MAX_TREE_NODES} nodes; at most "
                              f"{MAX_TREE_NODES} are supported")
    paths: list[tuple[int, ...]] = [()]
    out: list[tuple[int, ...]] = []
    for w in widths:
        paths = [p + (r,) for p in paths for r in range(w)]
        out.extend(paths)
    return tree_from_paths(out, where)


def chain_tree(k: int) -> TreeShape:
    """The chain of k drafts as a tree: [(0,), (0, 0), ..., (0,) * k]."""
    return tree_from_widths([1] * k, "chain")


def tree_accepted(parent, rank, row):
    """Accepted drafts for one rank row: the largest j with (row[0], ..., row[j-1]) a path of the tree (nodes
    ordered by depth: parent[i] < i, -1 = root). Plain loops so numba compiles it."""
    cur = -1
    acc = 0
    for j in range(row.shape[0]):
        r = row[j]
        nxt = -1
        for i in range(parent.shape[0]):
            if parent[i] == cur and rank[i] == r:
                nxt = i
                break
        if nxt < 0:
            break
        cur = nxt
        acc += 1
    return acc


def rank_dtype(top_k: int) -> np.dtype:
    """The smallest signed integer type that holds ranks 0..top_k (top_k = "not among the top K")."""
    return np.dtype(np.int8) if top_k <= np.iinfo(np.int8).max else np.dtype(np.int16)


MAX_TREE_TOP_K = int(np.iinfo(np.int16).max)


def tree_params(params: dict[str, Any]) -> tuple[int, int] | None:
    """(tree_top_k, tree_depth) from a drafter spec's params, None when it declares neither; ValueError naming the
    key when one is missing or out of range."""
    keys = ("tree_top_k", "tree_depth")
    if not any(k in params for k in keys):
        return None
    for k in keys:
        if k not in params:
            raise ValueError(f"params.{k}: missing (tree_top_k and tree_depth are given together)")
        v = params[k]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TREE_TOP_K:
            raise ValueError(f"params.{k}: expected an integer in [1, {MAX_TREE_TOP_K}], got {v!r}"[:200])
    return int(params["tree_top_k"]), int(params["tree_depth"])


def tail_violation(ranks: np.ndarray, top_k: int) -> tuple[int, int] | None:
    """(p, j) of the first entry with p + j >= output_len that is not top_k (those drafts lie past the output's
    end, so no candidate can match), else None."""
    n, d = ranks.shape
    for j in range(1, d):
        start = max(n - j, 0)
        bad = np.nonzero(ranks[start:, j] != top_k)[0]
        if bad.size:
            return int(start + bad[0]), j
    return None


def tree_capacity_check(tree: TreeShape, top_k: int, depth: int) -> str | None:
    """Why `tree` cannot be replayed from rank rows of a drafter with (top_k, depth), or None: the tree may not be
    deeper than the traced depth, and no rank may reach top_k (rank top_k means "not among the top K")."""
    if tree.depth > depth:
        return f"the tree is {tree.depth} deep but the drafter's tree_rank covers only tree_depth {depth}"
    if tree.max_rank() >= top_k:
        return (f"the tree uses child rank {tree.max_rank()} but the drafter's tree_rank ranks only the top "
                f"{top_k} candidates (tree_top_k)")
    return None
