"""Tree acceptance from a teacher-forced pass: the rank of the target's token among a drafter's top-K candidates.

`tree_rank[p][j]` is the 0-based rank of the target's token at output position p + j among the drafter's top-K
candidates when drafting starts at p and the drafts at depths < j were the target's tokens; K means "not among the
top K" (and marks depths past the output's end). A drafter conditioned only on the token prefix (a draft model, an
int8 or layer-truncated copy) sees the same prefix at depth j from p as at depth 0 from p + j, so one
teacher-forced pass gives the whole table (`prefix_tree_rank`). EAGLE-style drafters (conditioned on their own
features) need a real depth-j pass, and dynamic EAGLE-2 trees also need the drafter's scores per node: neither is
collected here.
"""
from __future__ import annotations

import numpy as np


def check_tree_options(top_k: int, depth: int) -> None:
    """Refuse a tree shape the collection cannot measure (K candidates per node, D depths per position)."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"--tree-top-k must be an integer >= 1 (candidates per tree node), got {top_k!r}")
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"--tree-depth must be an integer >= 1 (draft depths per position), got {depth!r}")


def target_token_ranks(logits: np.ndarray, tokens: np.ndarray, top_k: int) -> np.ndarray:
    """Per row, the 0-based rank of `tokens[row]` in `logits[row]` (descending; ties go to the lower token id, as
    argmax picks the first maximum), capped at `top_k` = "not among the top K". Rank 0 = the drafter's greedy guess.
    """
    logits = np.asarray(logits)
    tokens = np.asarray(tokens, dtype=np.int64)
    if logits.ndim != 2 or tokens.shape != (logits.shape[0],):
        raise ValueError(f"logits must be [positions, vocab] and tokens [positions], got {logits.shape} and "
                         f"{tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= logits.shape[1]):
        raise ValueError(f"target token ids must be in [0, {logits.shape[1]}), got {tokens.min()}..{tokens.max()}")
    rows = np.arange(tokens.size)
    own = logits[rows, tokens][:, None]
    ids = np.arange(logits.shape[1])[None, :]
    above = (logits > own) | ((logits == own) & (ids < tokens[:, None]))
    return np.minimum(above.sum(axis=1), top_k).astype(np.int32)


def prefix_tree_rank(rank0: np.ndarray, depth: int, top_k: int) -> np.ndarray:
    """The [output_len, depth] table of a prefix-conditioned drafter: tree_rank[p][j] = rank0[p + j], K past the end."""
    rank0 = np.asarray(rank0, dtype=np.int32)
    n = rank0.size
    padded = np.concatenate([rank0, np.full(depth, top_k, dtype=np.int32)])
    return np.stack([padded[j:j + n] for j in range(depth)], axis=1) if n else np.zeros((0, depth), np.int32)


def single_candidate_tree_rank(match: list[np.ndarray], depth: int, top_k: int) -> np.ndarray:
    """The table of a drafter with one candidate per depth (n-gram): `match[p][j]` says whether its proposal from p
    has the target's token at depth j; rank 0 there, K where it differs or the proposal has ended."""
    out = np.full((len(match), depth), top_k, dtype=np.int32)
    for p, m in enumerate(match):
        m = np.asarray(m, dtype=bool)[:depth]
        out[p, :m.size][m] = 0
    return out


def leading_zeros(tree_rank: np.ndarray) -> np.ndarray:
    """Per position, the number of leading rank-0 entries: the chain of the drafter's greedy guesses it accepts."""
    tr = np.asarray(tree_rank)
    nonzero = tr != 0
    return np.where(nonzero.any(axis=1), nonzero.argmax(axis=1), tr.shape[1]).astype(np.int32)
