"""k chosen from batch-size ranges."""
import numpy as np
import pytest

from policies.base import NO_DRAFT, BatchView, RequestView
from policies.k_by_batch import KByBatchPolicy

RANGES = [{"min_batch": 1, "max_batch": 4, "k": 5}, {"min_batch": 5, "max_batch": 32, "k": 3},
          {"min_batch": 33, "max_batch": None, "k": 0}]


@pytest.mark.parametrize("batch,k", [(1, 5), (4, 5), (5, 3), (32, 3), (33, 0), (500, 0)])
def test_k_follows_the_range(batch, k):
    pol = KByBatchPolicy("eagle3", RANGES)
    c = pol.choose(RequestView("r", 0, batch))
    assert c.k == k and (c.drafter is None) == (k == 0)


def test_batch_choice_matches_per_request_choice():
    pol = KByBatchPolicy("eagle3", RANGES)
    view = BatchView(0.0, ("ngram", "eagle3"), [f"r{i}" for i in range(6)], np.zeros(6, int), [None] * 6)
    d, k = pol.choose_batch(view)
    assert (d == 1).all() and (k == 3).all()
    big = BatchView(0.0, ("eagle3",), [f"r{i}" for i in range(40)], np.zeros(40, int), [None] * 40)
    d, k = pol.choose_batch(big)
    assert (d == NO_DRAFT).all() and (k == 0).all()


@pytest.mark.parametrize("ranges,msg", [
    ([], "non-empty"),
    ([{"min_batch": 2, "max_batch": None, "k": 3}], "start at batch size 1"),
    ([{"min_batch": 1, "max_batch": 4, "k": 3}, {"min_batch": 6, "max_batch": None, "k": 1}], "contiguous"),
    ([{"min_batch": 1, "max_batch": 4, "k": 3}, {"min_batch": 3, "max_batch": None, "k": 1}], "contiguous"),
    ([{"min_batch": 1, "k": -1}], "k >= 0"),
    ([{"min": 1, "k": 1}], "keys min_batch"),
])
def test_bad_ranges(ranges, msg):
    with pytest.raises(ValueError, match=msg):
        KByBatchPolicy("eagle3", ranges)


def test_uncovered_batch_size_is_an_error():
    pol = KByBatchPolicy("eagle3", [{"min_batch": 1, "max_batch": 8, "k": 2}])
    with pytest.raises(ValueError, match="no range covers batch size 9"):
        pol.choose(RequestView("r", 0, 9))
