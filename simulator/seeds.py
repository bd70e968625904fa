"""One `numpy.random.SeedSequence` tree per experiment: an independent stream for every consumer of randomness.

    experiment seed
    ├── POOL       the synthetic trace generator (traces: {pool: ...})
    ├── WORKLOAD   the workload sampler (which traces, arrival times, drawn lengths)
    └── RUNS
        └── run i
            └── replica j (a single server is replica 0, so one replica reproduces it)
                ├── POLICY         the policy's own RNG (exploration draws)
                └── VERIFICATION   sampled verification's acceptance coin flips

A child is a pure function of its parent and index (`child`), never of how many were spawned before, so
adding a run or a consumer does not shift anybody else's stream.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POOL, WORKLOAD, RUNS = 0, 1, 2  # children of the experiment's root
POLICY, VERIFICATION = 0, 1  # children of one server's node


def child(parent: np.random.SeedSequence, *path: int) -> np.random.SeedSequence:
    """The SeedSequence at `path` below `parent` (what `parent.spawn` would give, independent of spawn order)."""
    return np.random.SeedSequence(parent.entropy, spawn_key=tuple(parent.spawn_key) + tuple(path),
                                  pool_size=parent.pool_size)


def seed_int(seq: np.random.SeedSequence) -> int:
    """A 32-bit integer seed drawn from `seq`, for the interfaces that take an integer (policies, generators)."""
    return int(seq.generate_state(1)[0])


def as_seed_sequence(seed: int | np.random.SeedSequence) -> np.random.SeedSequence:
    return seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(int(seed))


@dataclass(frozen=True)
class ServerSeeds:
    """The random streams of one simulated server, children of its node."""

    node: np.random.SeedSequence

    @classmethod
    def of(cls, seed: int | np.random.SeedSequence) -> "ServerSeeds":
        return cls(as_seed_sequence(seed))

    @property
    def policy(self) -> int:
        """The policy's seed (policies take an integer `seed`)."""
        return seed_int(child(self.node, POLICY))

    def verification_rng(self) -> np.random.Generator:
        """A fresh generator for sampled verification (never the policy's stream)."""
        return np.random.default_rng(child(self.node, VERIFICATION))


@dataclass(frozen=True)
class ExperimentSeeds:
    """The experiment's tree: the pool generator's and workload sampler's seeds and each run's node."""

    root: np.random.SeedSequence

    @classmethod
    def of(cls, seed: int | np.random.SeedSequence) -> "ExperimentSeeds":
        return cls(as_seed_sequence(seed))

    @property
    def pool(self) -> int:
        return seed_int(child(self.root, POOL))

    @property
    def workload(self) -> int:
        return seed_int(child(self.root, WORKLOAD))

    def run(self, i: int) -> np.random.SeedSequence:
        return child(self.root, RUNS, i)


def replica_seeds(run: np.random.SeedSequence, replica: int) -> ServerSeeds:
    """Replica `replica` of a run (a single server is replica 0)."""
    return ServerSeeds(child(run, replica))
