"""Finish: a request whose output is complete leaves the server and gives back its KV."""
from __future__ import annotations


def release_finished(done, n, now, finish, blocks):
    """Each of done[:n] finishes at `now` and gives back every KV block it holds. Returns the blocks freed."""
    freed = 0
    for j in range(n):
        i = done[j]
        finish[i] = now
        freed += blocks[i]
        blocks[i] = 0
    return freed
