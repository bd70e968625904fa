"""Typed, validated `cluster:` block: how many replicas of the server (or a list of per-replica server
overrides, for heterogeneous clusters) and the router that spreads requests over them."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, model_validator

from traces.config_base import StrictModel as _Strict
from traces.limits import MAX_REPLICAS


class RouterSpec(_Strict):
    """Which routing rule, and the affinity rule's settings."""

    name: Literal["round_robin", "least_outstanding", "least_kv", "affinity"] = Field(
        "least_outstanding", description=(
            "round_robin: request i to replica i mod N; least_outstanding: fewest routed-but-unfinished requests; "
            "least_kv: lowest KV load (blocks in use + blocks the queued prompts need, over the pool); "
            "affinity: requests with the same key stay on one replica while it has room, else least_outstanding"))
    key: Literal["category", "trace", "client"] | None = Field(None, description=(
        "affinity key: category (workload category), trace (the recorded request a request replays: the same "
        "prompt, so the same prefix), client (closed-loop client id: one session per client). Default: trace"))
    max_outstanding: int | None = Field(None, ge=1, le=2**31, description=(
        "affinity: a replica has room while its outstanding requests are below this (default: its max_num_seqs)"))

    @model_validator(mode="after")
    def _affinity_only(self) -> "RouterSpec":
        if self.name != "affinity":
            given = [k for k in ("key", "max_outstanding") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{given} only apply to router affinity, not {self.name!r}")
        return self

    @property
    def affinity_key(self) -> str:
        return self.key or "trace"


class ClusterSpec(_Strict):
    """N replicas of the run's server in one simulation behind a router."""

    replicas: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] | \
        Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_REPLICAS)] = Field(description=(
        "number of identical replicas, or one mapping of server overrides per replica ({} = the run's server)"))
    router: RouterSpec = RouterSpec()

    @model_validator(mode="after")
    def _replicas(self) -> "ClusterSpec":
        """The count or list is well formed; the override keys are checked against ServerConfig where both are
        known (simulator.server_config.check_replica_overrides), so this module does not import that one."""
        if isinstance(self.replicas, int) and self.replicas < 1:
            raise ValueError(f"replicas: expected an integer >= 1 or a list of server overrides, got {self.replicas!r}")
        if isinstance(self.replicas, list) and not self.replicas:
            raise ValueError("replicas: the list of per-replica server overrides is empty")
        return self

    @property
    def num_replicas(self) -> int:
        return self.replicas if isinstance(self.replicas, int) else len(self.replicas)

    def overrides(self) -> list[dict[str, Any]]:
        """One server-override mapping per replica ({} for identical replicas)."""
        return [{} for _ in range(self.replicas)] if isinstance(self.replicas, int) else [dict(o) for o in self.replicas]
