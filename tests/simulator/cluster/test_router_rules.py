"""The router rules of simulator/cluster/router.py (one implementation: the Router classes and the compiled cluster
loop call them) against hand-worked choices and invariants, plain and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.router import (AFF, LKV, LO, RR, Affinity, LeastKV, LeastOutstanding, RequestInfo, RoundRobin,
                                      affinity_rule, kv_load_fraction, least_kv_rule, least_outstanding_rule,
                                      round_robin_rule, route_rule)


def test_round_robin_cycles_through_the_replicas():
    assert [round_robin_rule(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_takes_the_lowest_index_on_a_tie():
    assert least_outstanding_rule(np.array([3, 1, 1, 2])) == 1
    assert least_outstanding_rule(np.array([0])) == 0
    assert least_outstanding_rule(np.array([5, 5, 4])) == 2


def test_least_kv_breaks_ties_by_outstanding_then_index():
    assert least_kv_rule(np.array([0.5, 0.25, 0.75]), np.array([0, 9, 0])) == 1  # load first, whatever outstanding
    assert least_kv_rule(np.array([0.5, 0.5, 0.5]), np.array([3, 2, 2])) == 1  # equal loads: fewer outstanding
    assert least_kv_rule(np.array([0.5, 0.5]), np.array([1, 1])) == 0  # then the lower index


def test_kv_load_is_used_plus_queued_over_the_pool():
    assert kv_load_fraction(30, 10, 80) == 0.5
    assert kv_load_fraction(0, 0, 7) == 0.0


def test_affinity_keeps_a_key_home_until_it_is_full_and_counts_overflows():
    limit = np.array([2, 2, 2])
    assert affinity_rule(-1, np.array([1, 0, 0]), limit) == (1, 1, 0)  # new key: least outstanding, its home
    assert affinity_rule(0, np.array([1, 0, 0]), limit) == (0, 0, 0)  # home has room (1 < 2)
    assert affinity_rule(0, np.array([2, 1, 0]), limit) == (2, 0, 1)  # home full: elsewhere, home kept, an overflow
    assert affinity_rule(0, np.array([2, 2, 2]), limit) == (0, 0, 0)  # full everywhere: least outstanding is home


@settings(max_examples=200, deadline=None)
@given(loads=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=6))
def test_least_kv_is_the_minimum_of_load_outstanding_index(loads):
    """Invariant: the chosen replica is min over (kv load, outstanding, index), as tuples compare."""
    kv = np.array([a / 4 for a, _ in loads])
    out = np.array([b for _, b in loads], dtype=np.int64)
    assert least_kv_rule(kv, out) == min((kv[j], out[j], j) for j in range(len(loads)))[2]
    assert least_outstanding_rule(out) == min((out[j], j) for j in range(len(loads)))[1]


class _Load:
    def __init__(self, outstanding, kv, seqs=4):
        self._o, self._k, self.max_num_seqs = outstanding, kv, seqs

    def outstanding(self):
        return self._o

    def kv_load(self):
        return self._k


def test_the_router_classes_route_by_the_rules():
    reps = [_Load(2, 0.5), _Load(1, 0.5), _Load(1, 0.25)]
    req = RequestInfo(0, "c", "t", -1)
    assert LeastOutstanding().route(req, reps) == 1
    assert LeastKV().route(req, reps) == 2
    rr = RoundRobin()
    assert [rr.route(req, reps) for _ in range(4)] == [0, 1, 2, 0]
    aff = Affinity("category", max_outstanding=2)
    assert aff.route(req, reps) == 1 and aff.home == {"c": 1}
    reps[1]._o = 2
    assert aff.route(req, reps) == 2 and aff.home == {"c": 1} and aff.overflows == 1


@pytest.mark.parametrize("args", [
    (RR, 7, np.array([0, 0, 0]), np.zeros(3), -1, np.zeros(3, dtype=np.int64)),
    (LO, 0, np.array([4, 2, 2, 3]), np.zeros(4), -1, np.zeros(4, dtype=np.int64)),
    (LKV, 0, np.array([1, 3, 2]), np.array([0.5, 0.125, 0.125]), -1, np.zeros(3, dtype=np.int64)),
    (AFF, 0, np.array([0, 4, 1]), np.zeros(3), 1, np.array([4, 4, 4])),
    (AFF, 0, np.array([0, 4, 1]), np.zeros(3), -1, np.array([4, 4, 4])),
])
def test_the_compiled_route_rule_answers_as_the_plain_one(args):
    import simulator.cluster.compiled_cluster_kernel as cker

    assert cker._route_rule(*args) == route_rule(*args)
    assert cker._kv_load(3, 4, 9) == kv_load_fraction(3, 4, 9)


def test_route_rule_is_each_router_s_rule():
    """Round robin after 7 routed of 3: replica 1; least outstanding [4, 2, 2, 3]: the first 2; least KV: the lowest
    load, ties to fewer outstanding; affinity: home 1 is full (4 of 4): the least outstanding, an overflow."""
    out = np.array([4, 2, 2, 3])
    assert route_rule(RR, 7, out[:3], np.zeros(3), -1, out[:3]) == (1, -1, 0)
    assert route_rule(LO, 0, out, np.zeros(4), -1, out) == (1, -1, 0)
    assert route_rule(LKV, 0, np.array([1, 3, 2]), np.array([0.5, 0.125, 0.125]), -1, out[:3]) == (2, -1, 0)
    assert route_rule(AFF, 0, np.array([0, 4, 1]), np.zeros(3), 1, np.array([4, 4, 4])) == (0, 1, 1)
    assert route_rule(AFF, 0, np.array([0, 4, 1]), np.zeros(3), 2, np.array([4, 4, 4])) == (2, 2, 0)
    assert route_rule(AFF, 0, np.array([3, 4, 1]), np.zeros(3), -1, np.array([4, 4, 4])) == (2, 2, 0)
