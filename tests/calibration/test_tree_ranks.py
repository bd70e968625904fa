"""Tree-acceptance ranks from teacher-forced logits: hand-worked examples, an independent sort, the prefix rule."""
import numpy as np
import pytest

from calibration.acceptance_math import greedy_acc_len
from calibration.tree_ranks import (check_tree_options, leading_zeros, prefix_tree_rank, single_candidate_tree_rank,
                                    target_token_ranks)


def test_ranks_of_a_hand_made_logits_example():
    logits = np.array([[0.1, 2.0, 1.0, 3.0, -1.0],   # order 3, 1, 2, 0, 4
                       [1.0, 1.0, 0.5, 1.0, 0.0],    # tie at 1.0: ids 0, 1, 3 in id order, then 2, 4
                       [0.0, 0.0, 0.0, 0.0, 9.0],
                       [5.0, 4.0, 3.0, 2.0, 1.0]])
    tokens = np.array([2, 3, 4, 4])
    # row 0: token 2 is third (rank 2); row 1: token 3 is third among the tied (rank 2); row 2: argmax (0);
    # row 3: last of five (rank 4) is "not in the top 3" -> 3
    assert target_token_ranks(logits, tokens, top_k=3).tolist() == [2, 2, 0, 3]
    assert target_token_ranks(logits, tokens, top_k=8).tolist() == [2, 2, 0, 4]


def test_rank_zero_is_the_argmax_even_under_ties():
    rng = np.random.default_rng(5)
    logits = rng.integers(0, 3, size=(200, 6)).astype(np.float32)  # many ties
    tokens = rng.integers(0, 6, size=200)
    ranks = target_token_ranks(logits, tokens, top_k=6)
    assert ((ranks == 0) == (logits.argmax(axis=1) == tokens)).all()
    # independently: the token's place in a stable descending sort (ties keep id order)
    order = np.argsort(-logits, axis=1, kind="stable")
    place = np.array([int(np.flatnonzero(order[i] == tokens[i])[0]) for i in range(200)])
    assert (ranks == place).all()
    assert (target_token_ranks(logits, tokens, top_k=2) == np.minimum(place, 2)).all()


def test_masked_minus_infinity_logits_rank_last():
    logits = np.array([[-np.inf, 1.0, 0.0]])
    assert target_token_ranks(logits, np.array([0]), top_k=5).tolist() == [2]


def test_prefix_rule_shifts_the_depth_zero_ranks():
    rank0 = np.array([0, 0, 2, 0, 9])
    assert prefix_tree_rank(rank0, depth=3, top_k=9).tolist() == [
        [0, 0, 2], [0, 2, 0], [2, 0, 9], [0, 9, 9], [9, 9, 9]]
    assert prefix_tree_rank(np.zeros(0, int), depth=2, top_k=4).shape == (0, 2)


def test_chain_consistency_of_the_prefix_rule():
    """min(acc_len - 1, D) = the leading zeros of tree_rank, for greedy guesses and random targets."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        logits = rng.normal(size=(n, 7))
        tokens = np.where(rng.random(n) < 0.7, logits.argmax(axis=1), rng.integers(0, 7, n))
        acc = greedy_acc_len(logits.argmax(axis=1), tokens)
        for depth in (1, 3, 6):
            tr = prefix_tree_rank(target_token_ranks(logits, tokens, 4), depth, 4)
            assert (leading_zeros(tr) == np.minimum(acc - 1, depth)).all()


def test_single_candidate_ranks():
    match = [np.array([True, True, False, True]), np.zeros(0, bool), np.array([True])]
    assert single_candidate_tree_rank(match, depth=3, top_k=8).tolist() == [[0, 0, 8], [8, 8, 8], [0, 8, 8]]


@pytest.mark.parametrize("k, d, msg", [(0, 3, "--tree-top-k"), (4, 0, "--tree-depth"), (2.5, 3, "--tree-top-k"),
                                       (True, 3, "--tree-top-k")])
def test_bad_tree_options(k, d, msg):
    with pytest.raises(ValueError, match=msg):
        check_tree_options(k, d)
