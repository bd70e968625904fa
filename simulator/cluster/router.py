"""Routing rules of a cluster: which replica gets a request, decided at its arrival from live replica state.

Every rule is deterministic: ties go to the replica with fewer outstanding requests, then the lower index.
A rule sees replicas only through `ReplicaLoad` (what a real router could observe), never the future.
Each built-in router's choice is a plain function over arrays (`*_rule` below, written once): the `Router`
classes call them with what they read from the replicas, and the compiled cluster loop
(simulator/cluster/compiled_cluster_kernel.py) calls the same functions compiled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from simulator.cluster.config import RouterSpec

# router codes of the compiled cluster loop (simulator/cluster/compiled_cluster_kernel.py)
ROUTER_CODES = {"round_robin": 0, "least_outstanding": 1, "least_kv": 2, "affinity": 3}


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


def kv_load_fraction(used_blocks, queued_prompt_blocks, total_blocks):
    """A replica's KV load as a router reads it: blocks in use plus those its queued prompts need, over its pool."""
    return (used_blocks + queued_prompt_blocks) / total_blocks


def least_outstanding(replicas: Sequence[ReplicaLoad]) -> int:
    """Replica with the fewest outstanding requests (lowest index on ties; least_outstanding_rule)."""
    return least_outstanding_rule(_outstanding(replicas))


def _outstanding(replicas: Sequence[ReplicaLoad]) -> np.ndarray:
    return np.array([r.outstanding() for r in replicas], dtype=np.int64)


class Router:
    """A routing rule; `route` returns the replica index for one request."""

    name = ""

    def route(self, req: RequestInfo, replicas: Sequence[ReplicaLoad]) -> int:
        raise NotImplementedError


class RoundRobin(Router):
    """The i-th request routed goes to replica i mod N, whatever their state."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def route(self, req: RequestInfo, replicas: Sequence[ReplicaLoad]) -> int:
        j = round_robin_rule(self._next, len(replicas))
        self._next += 1
        return j


class LeastOutstanding(Router):
    """Fewest routed-but-unfinished requests (as Vidur's `lor` global scheduler)."""

    name = "least_outstanding"

    def route(self, req: RequestInfo, replicas: Sequence[ReplicaLoad]) -> int:
        return least_outstanding(replicas)


class LeastKV(Router):
    """Lowest KV load fraction; ties to fewer outstanding requests, then the lower index."""

    name = "least_kv"

    def route(self, req: RequestInfo, replicas: Sequence[ReplicaLoad]) -> int:
        return least_kv_rule(np.array([r.kv_load() for r in replicas]), _outstanding(replicas))


class Affinity(Router):
    """Requests with the same key go to the replica the key was first sent to while that replica has room
    (outstanding below `max_outstanding`, default its max_num_seqs); otherwise, and for a new key, the
    least-outstanding replica. A key keeps its first replica (an overflow does not move it)."""

    name = "affinity"

    def __init__(self, key: str, max_outstanding: int | None = None) -> None:
        self.key = key
        self.max_outstanding = max_outstanding
        self.home: dict[str | int, int] = {}
        self.overflows = 0  # requests sent elsewhere because their key's replica was full

    def limits(self, replicas: Sequence[ReplicaLoad]) -> np.ndarray:
        """Per replica, the outstanding requests below which it has room for its keys."""
        return np.array([self.max_outstanding or r.max_num_seqs for r in replicas], dtype=np.int64)

    def route(self, req: RequestInfo, replicas: Sequence[ReplicaLoad]) -> int:
        key = getattr(req, self.key)
        j, home, overflow = affinity_rule(self.home.get(key, -1), _outstanding(replicas), self.limits(replicas))
        self.home[key] = home
        self.overflows += overflow
        return j


def make_router(spec: RouterSpec) -> Router:
    """A fresh router (routers keep state: the round-robin pointer, affinity homes)."""
    if spec.name == "round_robin":
        return RoundRobin()
    if spec.name == "least_outstanding":
        return LeastOutstanding()
    if spec.name == "least_kv":
        return LeastKV()
    return Affinity(spec.affinity_key, spec.max_outstanding)
