"""The arrival rules (simulator/engine/rules/arrivals.py) on hand-worked cases and a hypothesis invariant, as plain
Python and as compiled (the functions the kernels call), and the arrival sources that use them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import compiled_kernel
from simulator.engine.arrivals import ClosedLoopArrivals, OpenLoopArrivals
from simulator.engine.rules import arrivals

PULL = [pytest.param(arrivals.pull_due, id="plain"), pytest.param(compiled_kernel.pull_due, id="compiled")]
SUBMIT = [pytest.param(arrivals.submit_next, id="plain"), pytest.param(compiled_kernel.submit_next, id="compiled")]


@pytest.mark.parametrize("rule", PULL)
def test_pull_due_passes_every_known_arrival_by_now(rule):
    arrival = np.array([0.0, 0.5, 0.5, 1.0, 2.0])
    assert rule(arrival, 0, 5, 0.5) == 3  # an arrival at `now` itself is due
    assert rule(arrival, 3, 5, 0.9) == 3  # none due
    assert rule(arrival, 1, 5, 9.0) == 5
    assert rule(arrival, 0, 2, 9.0) == 2  # only the first two known


@pytest.mark.parametrize("rule", SUBMIT)
def test_submit_next_appends_the_clients_request_until_every_request_is_sent(rule):
    arrival, client_of = np.full(3, np.nan), np.full(3, -1, dtype=np.int64)
    assert rule(arrival, client_of, 1, 0.75, 4) == 2
    assert arrival[1] == 0.75 and client_of[1] == 4 and np.isnan(arrival[[0, 2]]).all()
    assert rule(arrival, client_of, 2, 1.5, 0) == 3
    assert rule(arrival, client_of, 3, 2.5, 1) == 3  # every request sent: none more
    assert list(client_of) == [-1, 4, 0] and arrival[2] == 1.5


def test_a_closed_loop_sends_one_request_per_client_then_one_per_finish():
    """Three clients, think time 0.25, five requests: requests 0-2 at 0; request 1 finishes at 1.0, so its client
    sends request 3 at 1.25; then request 0 at 2.0: request 4 at 2.25; no more after."""
    src = ClosedLoopArrivals(np.zeros(5), 3, 0.25)
    assert src.submitted == 3 and list(src.client_of[:3]) == [0, 1, 2]
    assert list(src.pull(0.0)) == [0, 1, 2] and src.next_time() is None
    src.on_finish(1, 1.0)
    assert src.next_time() == 1.25 and list(src.pull(1.2)) == [] and list(src.pull(1.25)) == [3]
    src.on_finish(0, 2.0)
    src.on_finish(2, 2.0)  # every request sent
    assert src.submitted == 5 and list(src.client_of) == [0, 1, 2, 1, 0] and list(src.pull(3.0)) == [4]


def test_an_open_loop_resumes_where_a_compiled_run_left_it():
    src = OpenLoopArrivals(np.array([0.0, 1.0, 2.0]))
    assert list(src.pull(1.0)) == [0, 1]
    src.resume(1, 3)
    assert src.pulled == 1 and list(src.pull(5.0)) == [1, 2] and src.next_time() is None


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=10), now=st.floats(0.0, 10.0),
       ptr=st.integers(0, 10), compiled=st.booleans())
def test_invariant_pulled_are_exactly_the_known_arrivals_by_now(gaps, now, ptr, compiled):
    arrival = np.cumsum(gaps)
    n = len(arrival)
    ptr = min(ptr, n)
    rule = compiled_kernel.pull_due if compiled else arrivals.pull_due
    q = rule(arrival, ptr, n, now)
    assert q == max(ptr, int(np.searchsorted(arrival, now, side="right")))
