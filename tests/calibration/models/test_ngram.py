"""Prompt-lookup drafter: vLLM's matching rule and the per-position trace."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from calibration.models.ngram import NgramDrafter


def test_vllm_docstring_example():
    # vLLM: context [1,2,3,4,2,3], min_n=2, max_n=3, k=4 -> [4,2,3] (only three tokens follow the match)
    assert NgramDrafter(2, 3, 16).propose([1, 2, 3, 4, 2, 3], 4) == [4, 2, 3]


def test_longest_match_wins_then_earliest():
    d = NgramDrafter(1, 3, 8)
    # suffix [7, 8] occurs at 0 (followed by 1) and at 3 (followed by 2); [9,7,8] occurs at 2 only
    ctx = [7, 8, 1, 9, 7, 8, 2, 9, 7, 8]
    assert d.propose(ctx) == [2, 9, 7, 8]


def test_no_match_proposes_nothing():
    assert NgramDrafter(2, 4, 8).propose([1, 2, 3, 4, 5]) == []


def test_bad_parameters():
    with pytest.raises(ValueError, match="min_n <= max_n"):
        NgramDrafter(3, 2, 4)
    with pytest.raises(ValueError, match="max_proposal"):
        NgramDrafter(1, 2, 0)


def _brute(d, prompt, output):
    seq = list(prompt) + list(output)
    acc, prop = [], []
    for p in range(len(output)):
        ctx = seq[:len(prompt) + p]
        full = NgramDrafter(d.min_n, d.max_n, 10_000).propose(ctx)
        prop.append(min(len(full), d.max_proposal))
        run = 0
        while run < len(full) and p + run < len(output) and full[run] == output[p + run]:
            run += 1
        acc.append(run + 1)
    return acc, prop


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=20), st.lists(st.integers(0, 4), min_size=1, max_size=20),
       st.integers(1, 3), st.integers(0, 2), st.integers(1, 5))
def test_trace_matches_step_by_step_proposals(prompt, output, min_n, extra, cap):
    d = NgramDrafter(min_n, min_n + extra, cap)
    acc, prop = d.trace(prompt, output)
    want_acc, want_prop = _brute(d, prompt, output)
    assert acc.tolist() == want_acc
    assert prop.tolist() == want_prop
    assert (acc >= 1).all() and (prop >= 0).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=20), st.lists(st.integers(0, 4), min_size=1, max_size=20),
       st.integers(1, 3), st.integers(1, 6))
def test_tree_ranks_match_step_by_step_proposals(prompt, output, min_n, depth):
    """The n-gram's one candidate per depth: rank 0 where the proposal drafted at p has the target's token at
    depth j, else K (also past the proposal's or the output's end); its leading zeros are the chain's acceptance."""
    from calibration.tree_ranks import leading_zeros, single_candidate_tree_rank

    d = NgramDrafter(min_n, min_n + 1, 16)
    ranks = single_candidate_tree_rank(d.proposal_matches(prompt, output)[0], depth, top_k=5)
    seq = list(prompt) + list(output)
    for p in range(len(output)):
        full = NgramDrafter(d.min_n, d.max_n, 10_000).propose(seq[:len(prompt) + p])
        want = [0 if j < len(full) and p + j < len(output) and full[j] == output[p + j] else 5 for j in range(depth)]
        assert ranks[p].tolist() == want
    acc, _ = d.trace(prompt, output)
    assert (leading_zeros(ranks) == np.minimum(acc - 1, depth)).all()
