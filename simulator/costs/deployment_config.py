"""A config's `deployment:` mapping as a typed record: `server.deployment` and a plan's `candidates.deployment`.

Each key is typed here and dumps back as given (traces/config_given.py: only the keys the config set, in its
order; config hashes, `--set` and a plan's candidate documents read that dump). The defaults and the rules (catalog names, ranges, TP dividing the GPUs) are
the placement's own: `deployment()` builds the `Deployment` of simulator/costs/placement.py through
`deployment_from_config`, the one home of those checks.
"""
from __future__ import annotations

from typing import Any

from simulator.costs.placement import Deployment, Placement, deployment_from_config, plan
from traces.config_given import GivenModel


class DeploymentConfig(GivenModel):
    """The keys of placement's `Deployment` a config gives (None: not given, the Deployment's default applies).
    Integers stay integers where a number is expected (`reserve_gib: 2` dumps as 2: hashes read the dump)."""

    target: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    tp: int | None = None
    drafter: str | None = None
    drafter_placement: str | None = None
    drafter_tp: int | None = None
    drafter_gpu: str | None = None
    drafter_gpus: int | None = None
    gpu_memory_utilization: int | float | None = None
    reserve_gib: int | float | None = None
    max_model_len: int | None = None
    min_kv_tokens: int | None = None
    max_num_seqs: int | None = None

    def given(self) -> dict[str, Any]:
        """The keys the config set, as a plain mapping (what `deployment_from_config` reads)."""
        return self.model_dump(mode="json")

    def with_default_seqs(self, max_num_seqs: int) -> "DeploymentConfig":
        """This deployment with `max_num_seqs` set unless the config gave one."""
        if "max_num_seqs" in self.given_keys():
            return self
        return type(self).model_validate({**self.given(), "max_num_seqs": max_num_seqs})

    def deployment(self, where: str = "deployment") -> Deployment:
        """The placement's Deployment (ValueError naming `where` and the key when malformed)."""
        return deployment_from_config(self.given(), where)

    def placement(self, where: str = "deployment") -> Placement:
        """Place it: fit, KV capacity and the per-GPU breakdown (check `.fits` before `.kv_capacity_tokens`)."""
        return plan(self.deployment(where))
