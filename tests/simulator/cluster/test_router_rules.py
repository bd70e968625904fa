"""The router rules of simulator/cluster/router.py (one implementation: `Router` and the compiled cluster loop call
them) against hand-worked choices, bookkeeping and invariants, plain and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.config import RouterSpec
from simulator.cluster.router import (AFF, LKV, LO, RR, Router, affinity_keys, affinity_rule, least_kv_rule,
                                      least_outstanding_rule, new_router_state, replica_kv_load, round_robin_rule,
                                      route_request, route_rule)


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


def test_kv_load_is_used_plus_the_waiting_prompts_over_the_pool():
    """Four requests of 2, 3, 1 and 4 prompt blocks (prefix sums 0, 2, 5, 6, 10); the first two admitted, request 1
    preempted (waiting again): 12 in use + 1 + 4 not admitted + 3 preempted = 20 of 40."""
    cum = np.array([0, 2, 5, 6, 10])
    requeued = np.array([1, 0, 0])
    assert replica_kv_load(12, cum, 4, 2, requeued, 1, 40) == 0.5
    assert replica_kv_load(12, cum, 4, 2, requeued, 0, 40) == 17 / 40  # none preempted
    assert replica_kv_load(30, cum, 4, 4, requeued, 0, 80) == 30 / 80  # every request admitted
    assert replica_kv_load(0, cum, 0, 0, requeued, 0, 7) == 0.0


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


def _router(name, replicas=3, keys=1, key_id=(0,), **spec):
    n = len(key_id)
    return Router(RouterSpec(name=name, **spec), new_router_state(replicas, keys, np.zeros(n, dtype=np.int64)),
                  np.array(key_id, dtype=np.int64))


def test_the_router_routes_by_the_rules_from_what_the_replicas_show():
    reps = [_Load(2, 0.5), _Load(1, 0.5), _Load(1, 0.25)]
    assert _router("least_outstanding").route(0, reps) == 1
    assert _router("least_kv").route(0, reps) == 2
    rr = _router("round_robin", key_id=(0, 0, 0, 0))
    assert [rr.route(i, reps) for i in range(4)] == [0, 1, 2, 0]
    aff = _router("affinity", key_id=(0, 0), key="category", max_outstanding=2)
    assert aff.route(0, reps) == 1 and list(aff.state.homes) == [1]
    reps[1]._o = 2  # its home is full (2 of 2): the least outstanding, an overflow
    assert aff.route(1, reps) == 2 and list(aff.state.homes) == [1] and aff.overflows == 1
    assert list(aff.state.assigned) == [1, 2] and aff.routed == 2


def test_route_request_keeps_the_books():
    """Three requests, keys 0, 1, 0, affinity with room below 2: request 0 opens key 0 on the least-outstanding
    replica 0; request 1 opens key 1 on replica 1 (replica 0 now has one more); request 2 finds key 0's home full
    and overflows to replica 2."""
    rs = new_router_state(3, 2, np.zeros(3, dtype=np.int64))
    limit = np.array([2, 2, 2])
    assert route_request(AFF, rs, 0, 0, np.array([0, 0, 0]), np.zeros(3), limit) == 0
    assert route_request(AFF, rs, 1, 1, np.array([1, 0, 0]), np.zeros(3), limit) == 1
    assert route_request(AFF, rs, 2, 0, np.array([2, 1, 0]), np.zeros(3), limit) == 2
    assert list(rs.totals) == [3, 1] and list(rs.routed_to) == [1, 1, 1]
    assert list(rs.homes) == [0, 1] and list(rs.assigned) == [0, 1, 2]
    rs = new_router_state(2, 1, np.full(3, 7, dtype=np.int64))  # unrouted: -1
    assert list(rs.assigned) == [-1, -1, -1]
    assert [route_request(RR, rs, i, 0, np.zeros(2, dtype=np.int64), np.zeros(2), limit) for i in range(3)] == [0, 1, 0]
    assert list(rs.routed_to) == [2, 1] and list(rs.totals) == [3, 0] and list(rs.homes) == [-1]


def test_affinity_keys_number_in_first_seen_order():
    cats, traces = ["b", "a", "b", "c"], ["t1", "t1", "t0", "t1"]
    client_of = np.array([3, 1, -1, -1])
    key_id, n = affinity_keys("category", cats, traces, client_of, 4)
    assert list(key_id) == [0, 1, 0, 2] and n == 3
    key_id, n = affinity_keys("trace", cats, traces, client_of, 4)
    assert list(key_id) == [0, 0, 1, 0] and n == 2
    key_id, n = affinity_keys("client", cats, traces, client_of, 4)
    assert key_id is client_of and n == 4  # filled as the clients submit


@pytest.mark.parametrize("args", [
    (RR, 7, np.array([0, 0, 0]), np.zeros(3), -1, np.zeros(3, dtype=np.int64)),
    (LO, 0, np.array([4, 2, 2, 3]), np.zeros(4), -1, np.zeros(4, dtype=np.int64)),
    (LKV, 0, np.array([1, 3, 2]), np.array([0.5, 0.125, 0.125]), -1, np.zeros(3, dtype=np.int64)),
    (AFF, 0, np.array([0, 4, 1]), np.zeros(3), 1, np.array([4, 4, 4])),
    (AFF, 0, np.array([0, 4, 1]), np.zeros(3), -1, np.array([4, 4, 4])),
])
def test_the_compiled_route_request_answers_as_the_plain_one(args):
    import simulator.cluster.compiled_cluster_kernel as cker

    kind, routed, outstanding, kv, home, limit = args
    books = []
    for route in (cker._route_request, route_request):
        rs = new_router_state(len(outstanding), 2, np.zeros(3, dtype=np.int64))
        rs.totals[0], rs.homes[1] = routed, home
        books.append((route(kind, rs, 2, 1, outstanding, kv, limit), *(list(a) for a in rs)))
    assert books[0] == books[1]
    cum, requeued = np.array([0, 2, 5, 6, 10]), np.array([1, 0])
    assert cker._kv_load(3, cum, 4, 2, requeued, 1, 9) == replica_kv_load(3, cum, 4, 2, requeued, 1, 9)


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
