"""Paged KV: the blocks a request needs to hold its tokens (the one block rule of every path)."""
from __future__ import annotations


def blocks_for(tokens, block_size):
    """ceil(tokens / block_size): the KV blocks that hold `tokens` tokens (ints or integer arrays)."""
    return -(-tokens // block_size)
