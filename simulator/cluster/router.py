"""Routing rules of a cluster: which replica gets a request, decided at its arrival from live replica state.

Every rule is deterministic: ties go to the replica with fewer outstanding requests, then the lower index.
A rule sees replicas only through `ReplicaLoad` (what a real router could observe), never the future.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from simulator.cluster.config import RouterSpec


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


def least_outstanding(replicas: Sequence[ReplicaLoad]) -> int:
    """Replica with the fewest outstanding requests (lowest index on ties)."""
    loads = [r.outstanding() for r in replicas]
    return loads.index(min(loads))


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
        j = self._next % len(replicas)
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
        keys = [(r.kv_load(), r.outstanding(), j) for j, r in enumerate(replicas)]
        return min(keys)[2]


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

    def _has_room(self, r: ReplicaLoad) -> bool:
        return r.outstanding() < (self.max_outstanding or r.max_num_seqs)

    def route(self, req: RequestInfo, replicas: Sequence[ReplicaLoad]) -> int:
        key = getattr(req, self.key)
        home = self.home.get(key)
        if home is not None and self._has_room(replicas[home]):
            return home
        j = least_outstanding(replicas)
        if home is None:
            self.home[key] = j
        elif j != home:
            self.overflows += 1
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
