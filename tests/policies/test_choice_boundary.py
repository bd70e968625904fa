"""A plug-in policy's choices are checked where the engine takes them (issue 34, harm class 8): k above the
policy's own max_draft_tokens(), a k that would overflow (2**40), floats, wrong shapes or types and drafter
indices out of range are one error naming the policy and the value, before any token is drafted; choices within
the stated bounds run as before."""
from __future__ import annotations

import numpy as np
import pytest

from policies.base import NO_DRAFT, Choice, Policy
from tests.simulator.engine.engine_fixtures import iid_traces, simulate, workload


class _Plugin(Policy):
    """Drafter "d"; states `stated` as its largest k and answers each batch with `answer(n)`."""

    name = "plugin-under-test"

    def __init__(self, answer, stated=4):
        self.answer, self.stated = answer, stated

    def choose(self, view) -> Choice:  # unused: choose_batch is overridden
        raise AssertionError

    def choose_batch(self, view):
        return self.answer(view.batch_size)

    def drafters_used(self):
        return ("d",)

    def max_draft_tokens(self):
        return self.stated


def _ints(n, v):
    return np.full(n, v, dtype=np.int64)


BAD = {  # answer, stated max k, what the message names
    "k above its own max": (lambda n: (_ints(n, 0), _ints(n, 5)), 4, "k = 5"),
    "k = 2**40": (lambda n: (_ints(n, 0), _ints(n, 2**40)), 4, f"k = {2**40}"),
    "negative k": (lambda n: (_ints(n, 0), _ints(n, -1)), 4, "k = -1"),
    "float k": (lambda n: (_ints(n, 0), np.full(n, 2.5)), 4, "k"),
    "k per request missing": (lambda n: (_ints(n, 0), _ints(n + 1, 2)), 4, "k"),
    "a single Choice": (lambda n: Choice("d", 2), 4, "pair"),
    "None": (lambda n: None, 4, "pair"),
    "three arrays": (lambda n: (_ints(n, 0), _ints(n, 2), _ints(n, 2)), 4, "pair"),
    "drafter names, not indices": (lambda n: (np.array(["d"] * n), _ints(n, 2)), 4, "drafter indices"),
    "drafter index out of range": (lambda n: (_ints(n, 3), _ints(n, 2)), 4, "drafter index 3"),
    "stated max 2**40": (lambda n: (_ints(n, 0), _ints(n, 2)), 2**40, "max_draft_tokens()"),
    "stated max a float": (lambda n: (_ints(n, 0), _ints(n, 2)), 3.5, "max_draft_tokens()"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_class8_bad_choices_are_refused_naming_the_policy_and_value(case):
    answer, stated, named = BAD[case]
    traces = iid_traces(4, seed=3)
    with pytest.raises(ValueError) as e:
        simulate(traces, workload(traces, 4), policy=_Plugin(answer, stated), kv_tokens=10**6)
    msg = str(e.value)
    assert "plugin-under-test" in msg and named in msg, msg
    assert "stalled" not in msg


@pytest.mark.parametrize("answer", [
    lambda n: (_ints(n, 0), _ints(n, 4)),  # exactly the stated max
    lambda n: (_ints(n, NO_DRAFT), _ints(n, 10**6)),  # no draft: its k is ignored
    lambda n: ([0] * n, [1] * n),  # plain lists of ints
    lambda n: (np.zeros(n, dtype=np.int32), np.full(n, 3, dtype=np.uint8)),  # other integer dtypes
])
def test_class8_choices_within_the_stated_bounds_run(answer):
    traces = iid_traces(4, seed=3)
    res = simulate(traces, workload(traces, 4), policy=_Plugin(answer, 4), kv_tokens=10**6)
    assert np.isfinite(res.requests.finish_time).all()
