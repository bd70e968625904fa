"""Paged KV accounting: a pool of fixed-size blocks; each request holds ceil(tokens / block_size)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.engine.rules.kv import blocks_for


@dataclass
class BlockPool:
    """A server's KV pool: its size, and the blocks in use and at peak as its run writes them."""

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
