"""Routing rules of a cluster: which replica gets a request, decided at its arrival from live replica state.

Every rule is deterministic: ties go to the replica with fewer outstanding requests, then the lower index.
A rule sees replicas only through `ReplicaLoad` (what a real router could observe), never the future.
Each built-in router's choice and its bookkeeping are plain functions over arrays, written once: `route_request`
(with `route_rule` and the `*_rule`s it calls) over a `RouterState`, and `replica_kv_load`. `Router` calls them with
what it reads from the replicas, and the compiled cluster loop (simulator/cluster/compiled_cluster_kernel.py) calls
the same functions compiled.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

import numpy as np

from simulator.cluster.config import RouterSpec

# the routers' codes (route_rule's `kind`)
RR, LO, LKV, AFF = range(4)
ROUTER_CODES = {"round_robin": RR, "least_outstanding": LO, "least_kv": LKV, "affinity": AFF}


def round_robin_rule(routed_so_far, n_replicas):
    """The replica of the request routed after `routed_so_far` others: routed_so_far mod N."""
    return routed_so_far % n_replicas


def least_outstanding_rule(outstanding):
    """The replica with the fewest outstanding requests (lowest index on ties)."""
    best = 0
    for j in range(1, len(outstanding)):
        if outstanding[j] < outstanding[best]:
            best = j
    return best


def least_kv_rule(kv_load, outstanding):
    """The replica with the lowest KV load fraction; ties to fewer outstanding requests, then the lower index."""
    best = 0
    for j in range(1, len(kv_load)):
        if kv_load[j] < kv_load[best] or (kv_load[j] == kv_load[best] and outstanding[j] < outstanding[best]):
            best = j
    return best


def affinity_rule(home, outstanding, limit):
    """(replica, the key's home after, 1 on an overflow else 0): the key's home replica (`home`, -1 for a new key)
    while its outstanding requests are below its `limit`, else the least-outstanding replica; a new key's home is the
    replica it goes to, and a key keeps its home when it overflows elsewhere."""
    if home >= 0 and outstanding[home] < limit[home]:
        return home, home, 0
    j = least_outstanding_rule(outstanding)
    if home < 0:
        return j, j, 0
    return j, home, 1 if j != home else 0


def route_rule(kind, routed_so_far, outstanding, kv_load, home, limit):
    """(replica, the key's home after, 1 on an overflow else 0) for the next request under router `kind`: round robin
    (after `routed_so_far` requests), least outstanding, least KV load (`kv_load`, read only by it) or affinity (the
    key's `home` and each replica's `limit`, read only by it)."""
    if kind == RR:
        return round_robin_rule(routed_so_far, len(outstanding)), home, 0
    if kind == LO:
        return least_outstanding_rule(outstanding), home, 0
    if kind == LKV:
        return least_kv_rule(kv_load, outstanding), home, 0
    return affinity_rule(home, outstanding, limit)


def replica_kv_load(used_blocks, cum_blocks, submitted, admit, requeued, n_requeued, total_blocks):
    """A replica's KV load as a router reads it: blocks in use plus those its waiting requests' prompts need (the
    preempted ones, `requeued[:n_requeued]`, and those routed but not admitted, `admit` up to `submitted`), over its
    pool; `cum_blocks[k]` is the prompt blocks of its first k requests (its numbering)."""
    need = cum_blocks[submitted] - cum_blocks[admit]
    for t in range(n_requeued):
        k = requeued[t]
        need += cum_blocks[k + 1] - cum_blocks[k]
    return (used_blocks + need) / total_blocks


class RouterState(NamedTuple):
    """A router's bookkeeping, arrays written in place (by `Router` and by the compiled cluster loop alike): the
    requests routed so far and affinity's overflows (requests sent away from their key's full home), the requests
    routed to each replica, each affinity key's home replica (-1 till its first request) and each request's replica
    (-1 till it is routed)."""
    totals: np.ndarray  # int64 (2,): routed, overflows
    routed_to: np.ndarray  # int64 (replicas,)
    homes: np.ndarray  # int64 (keys,)
    assigned: np.ndarray  # int64 (requests,)


def new_router_state(replicas: int, keys: int, assigned: np.ndarray) -> RouterState:
    """A router that has routed nothing: `assigned` (one -1 per request) is the caller's, filled in place."""
    assigned[:] = -1
    return RouterState(np.zeros(2, dtype=np.int64), np.zeros(replicas, dtype=np.int64),
                       np.full(max(keys, 1), -1, dtype=np.int64), assigned)


def route_request(kind, rs, i, key, outstanding, kv_load, limit):
    """Route request `i` (affinity key `key`): route_rule's replica for router `kind` from what the replicas show,
    written into the router's bookkeeping `rs` (RouterState); returns the replica."""
    home = rs.homes[key] if kind == AFF else -1
    j, home, over = route_rule(kind, rs.totals[0], outstanding, kv_load, home, limit)
    if kind == AFF:
        rs.homes[key] = home
    rs.totals[0] += 1
    rs.totals[1] += over
    rs.routed_to[j] += 1
    rs.assigned[i] = j
    return j


def affinity_keys(key: str, categories: Sequence[str], trace_ids: Sequence[str], client_of: np.ndarray,
                  clients: int) -> tuple[np.ndarray, int]:
    """Each request's affinity key as a number, and how many keys: a category or trace numbered in first-seen order;
    a closed loop's client is its number (`client_of` itself, which the clients fill as they submit)."""
    if key == "client":
        return client_of, clients
    values = categories if key == "category" else trace_ids
    ids: dict = {}
    out = np.array([ids.setdefault(v, len(ids)) for v in values], dtype=np.int64)
    return out, len(ids)


class ReplicaLoad(Protocol):
    """What a router may read from a replica at routing time."""

    def outstanding(self) -> int:
        """Requests routed to it and not finished (queued, waiting or running)."""

    def kv_load(self) -> float:
        """replica_kv_load: KV blocks in use plus the blocks its waiting prompts need, as a fraction of its pool."""

    @property
    def max_num_seqs(self) -> int:
        """Sequences it runs at once (PSD: both sub-batches)."""


class Router:
    """A router by name (its RouterSpec) over its bookkeeping (RouterState) and each request's affinity key: it reads
    what the replicas show and calls route_request."""

    def __init__(self, spec: RouterSpec, state: RouterState, key_id: np.ndarray) -> None:
        self.name, self.kind = spec.name, ROUTER_CODES[spec.name]
        self.max_outstanding = spec.max_outstanding
        self.state, self.key_id = state, key_id

    @property
    def routed(self) -> int:
        return int(self.state.totals[0])

    @property
    def overflows(self) -> int:
        """Affinity's requests sent away from their key's full home replica."""
        return int(self.state.totals[1])

    def limits(self, replicas: Sequence[ReplicaLoad]) -> np.ndarray:
        """Per replica, the outstanding requests below which it has room for its affinity keys (`max_outstanding`,
        default its max_num_seqs)."""
        return np.array([self.max_outstanding or r.max_num_seqs for r in replicas], dtype=np.int64)

    def route(self, i: int, replicas: Sequence[ReplicaLoad]) -> int:
        """The replica request `i` goes to, from what each replica shows now."""
        n = len(replicas)
        outstanding = np.array([r.outstanding() for r in replicas], dtype=np.int64)
        kv = np.array([r.kv_load() for r in replicas]) if self.kind == LKV else np.zeros(n)
        limit = self.limits(replicas) if self.kind == AFF else np.zeros(n, dtype=np.int64)
        return route_request(self.kind, self.state, i, int(self.key_id[i]), outstanding, kv, limit)
