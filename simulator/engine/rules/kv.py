"""Paged KV: the blocks a request needs to hold its tokens (the one block rule of every path) and a step's growth
of each request's blocks to what its tokens need."""
from __future__ import annotations


def blocks_for(tokens, block_size):
    """ceil(tokens / block_size): the KV blocks that hold `tokens` tokens (ints or integer arrays)."""
    return -(-tokens // block_size)


def kv_growth(idx, n, tokens, blocks, block_size, extra):
    """The blocks each of idx[:n] must add to hold tokens[j] (none when it holds enough: KV never shrinks while a
    request runs), into extra[j]. Returns their sum."""
    total = 0
    for j in range(n):
        e = blocks_for(tokens[j], block_size) - blocks[idx[j]]
        if e < 0:
            e = 0
        extra[j] = e
        total += e
    return total


def add_blocks(idx, n, extra, blocks):
    """Commit a growth: each of idx[:n] holds extra[j] more blocks."""
    for j in range(n):
        blocks[idx[j]] += extra[j]
