"""Paged KV accounting: a pool of fixed-size blocks; each request holds ceil(tokens / block_size)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.engine.rules.kv import blocks_for


@dataclass
class BlockPool:
    """Counts free and used blocks; never goes negative (an over-allocation is a bug, so it raises)."""

    total_blocks: int
    block_size: int

    def __post_init__(self) -> None:
        if self.total_blocks < 1:
            raise ValueError(f"KV pool needs at least one block, got {self.total_blocks}")
        self.used = 0
        self.peak = 0

    @property
    def free(self) -> int:
        return self.total_blocks - self.used

    def blocks_for(self, tokens):
        """Blocks needed to hold `tokens` (scalar or array)."""
        return blocks_for(np.asarray(tokens), self.block_size) if np.ndim(tokens) else blocks_for(int(tokens),
                                                                                                   self.block_size)

    def allocate(self, n: int) -> None:
        if n < 0 or n > self.free:
            raise RuntimeError(f"KV pool: cannot allocate {n} blocks with {self.free} free")
        self.used += n
        if self.used > self.peak:
            self.peak = self.used

    def release(self, n: int) -> None:
        if n < 0 or n > self.used:
            raise RuntimeError(f"KV pool: cannot release {n} blocks with {self.used} used")
        self.used -= n
