"""Arrivals over arrays: requests numbered in arrival order, `submitted` of them known (an open loop: all; a closed
loop: those its clients sent, their times in order since finishes come in time order), a pointer past those pulled."""
from __future__ import annotations


def pull_due(arrival, ptr, submitted, now):
    """The pointer past every known arrival by `now`: requests ptr, ptr + 1, ... up to it are pulled."""
    while ptr < submitted and arrival[ptr] <= now:
        ptr += 1
    return ptr


def submit_next(arrival, client_of, submitted, t, client):
    """A closed loop's client sends the next request (number `submitted`) at `t`, none once every request is sent;
    returns how many are sent."""
    if submitted < len(arrival):
        arrival[submitted] = t
        client_of[submitted] = client
        submitted += 1
    return submitted
