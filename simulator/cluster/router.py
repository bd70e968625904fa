"""Routing rules of a cluster: which replica gets a request, decided at its arrival from live replica state.

Every rule is deterministic: ties go to the replica with fewer outstanding requests, then the lower index.
A rule sees replicas only through `ReplicaLoad` (what a real router could observe), never the future.
Each built-in router's choice is a plain function over arrays (`route_rule` and the `*_rule`s it calls, written
once): `Router` calls it with what it reads from the replicas, and the compiled cluster loop
(simulator/cluster/compiled_cluster_kernel.py) calls the same function compiled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from simulator.cluster.config import RouterSpec

# the routers' codes (route_rule's `kind`)
RR, LO, LKV, AFF = range(4)
ROUTER_CODES = {"round_robin": RR, "least_outstanding": LO, "least_kv": LKV, "affinity": AFF}


class ReplicaLoad(Protocol):
    """What a router may read from a replica at routing time."""

    def outstanding(self) -> int:
        """Requests routed to it and not finished (queued, waiting or running)."""

    def kv_load(self) -> float:
        """KV blocks in use plus the blocks its queued prompts need, as a fraction of its pool."""

    @property
    def max_num_seqs(self) -> int:
        """Sequences it runs at once (PSD: both sub-batches)."""


@dataclass(frozen=True)
class RequestInfo:
    """The request being routed: its index and its affinity keys."""

    index: int
    category: str
    trace: str
    client: int  # closed-loop client id, -1 in an open loop


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


def kv_load_fraction(used_blocks, queued_prompt_blocks, total_blocks):
    """A replica's KV load as a router reads it: blocks in use plus those its queued prompts need, over its pool."""
    return (used_blocks + queued_prompt_blocks) / total_blocks


class Router:
    """A router by name: route_rule of its kind over what each replica shows, and the state it keeps (the requests
    routed so far; affinity's home replica per key and its overflows: requests sent elsewhere because their key's
    replica was full)."""

    name = ""
    kind = -1

    def __init__(self) -> None:
        self.routed = 0
        self.home: dict[str | int, int] = {}
        self.overflows = 0

    def route(self, req: RequestInfo, replicas: Sequence[ReplicaLoad]) -> int:
        n = len(replicas)
        outstanding = np.array([r.outstanding() for r in replicas], dtype=np.int64)
        kv = np.array([r.kv_load() for r in replicas]) if self.kind == LKV else np.zeros(n)
        key = getattr(req, self.key) if self.kind == AFF else None
        limit = self.limits(replicas) if self.kind == AFF else np.zeros(n, dtype=np.int64)
        j, home, overflow = route_rule(self.kind, self.routed, outstanding, kv, self.home.get(key, -1), limit)
        if self.kind == AFF:
            self.home[key] = home
        self.overflows += overflow
        self.routed += 1
        return j


class RoundRobin(Router):
    """The i-th request routed goes to replica i mod N, whatever their state."""

    name, kind = "round_robin", RR


class LeastOutstanding(Router):
    """Fewest routed-but-unfinished requests (as Vidur's `lor` global scheduler)."""

    name, kind = "least_outstanding", LO


class LeastKV(Router):
    """Lowest KV load fraction; ties to fewer outstanding requests, then the lower index."""

    name, kind = "least_kv", LKV


class Affinity(Router):
    """Requests with the same key go to the replica the key was first sent to while that replica has room
    (outstanding below `max_outstanding`, default its max_num_seqs); otherwise, and for a new key, the
    least-outstanding replica. A key keeps its first replica (an overflow does not move it)."""

    name, kind = "affinity", AFF

    def __init__(self, key: str, max_outstanding: int | None = None) -> None:
        super().__init__()
        self.key = key
        self.max_outstanding = max_outstanding

    def limits(self, replicas: Sequence[ReplicaLoad]) -> np.ndarray:
        """Per replica, the outstanding requests below which it has room for its keys."""
        return np.array([self.max_outstanding or r.max_num_seqs for r in replicas], dtype=np.int64)


def make_router(spec: RouterSpec) -> Router:
    """A fresh router (routers keep state: the round-robin pointer, affinity homes)."""
    if spec.name == "round_robin":
        return RoundRobin()
    if spec.name == "least_outstanding":
        return LeastOutstanding()
    if spec.name == "least_kv":
        return LeastKV()
    return Affinity(spec.affinity_key, spec.max_outstanding)
