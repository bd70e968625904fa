"""PSD's sub-batch sides (MineDraft's two-batch scheduler): the side a request joins when it is admitted (and leaves
when preempted), a step's split of the decoding requests into the side verified and the side drafted, and the
proposals carried from one step to the next (docs/architecture.md)."""
from __future__ import annotations


def join_side(side, running, n, verify_side):
    """The side (0 or 1) a request admitted as running[n - 1] joins: the side drafted next step (`verify_side`, the
    one verified now) unless it has more members among running[:n] than the other. `side[i]` is -1 for a request on
    no side yet (the new one itself)."""
    c0 = 0
    c1 = 0
    for q in range(n):
        s = side[running[q]]
        if s == 0:
            c0 += 1
        elif s == 1:
            c1 += 1
    if verify_side == 0:
        return 0 if c0 <= c1 else 1
    return 1 if c1 <= c0 else 0


def assign_sides(side, running, n_old, n, verify_side):
    """The requests admitted as running[n_old:n], in admission order, each join a side (join_side over the running
    requests up to and including it)."""
    for j in range(n_old, n):
        side[running[j]] = join_side(side, running, j + 1, verify_side)


def leave_sides(running, keep, n, side, pending_d, none):
    """The preempted requests running[keep:n] lose their side and their pending proposal (pending_d = `none`)."""
    for q in range(keep, n):
        side[running[q]] = -1
        pending_d[running[q]] = none


def split_sides(dec, n, side, verify_side, split_min, verified, drafted):
    """A PSD step's split of the decoding requests dec[:n] (admission order): those on `verify_side` are verified
    (into `verified`), the others drafted (into `drafted`), in order; with one side empty or fewer than `split_min`
    decoding the step is plain SD (fallback): all are verified, none drafted. Returns (verified count, drafted
    count, fallback)."""
    nv = 0
    nd = 0
    for j in range(n):
        i = dec[j]
        if side[i] == verify_side:
            verified[nv] = i
            nv += 1
        else:
            drafted[nd] = i
            nd += 1
    fallback = nd == 0 or nv == 0 or n < split_min
    if fallback:
        for j in range(n):
            verified[j] = dec[j]
        nv = n
        nd = 0
    return nv, nd, fallback


def next_verify_side(verify_side, n_verified, n_drafted):
    """The side verified next step: the roles flip when both sides ran (one verified, the other drafted), else the
    same side is verified again."""
    if n_verified > 0 and n_drafted > 0:
        return 1 - verify_side
    return verify_side


def carry_proposals(verified, n_verified, drafted, n_drafted, drafter, k, proposed, pending_d, pending_k,
                    pending_prop, none):
    """After a PSD step: the verified side's proposals are used up (pending_d = `none`); each drafted request keeps
    the proposal drafted for it (its drafter, k and proposed tokens), verified when its side is next."""
    for j in range(n_verified):
        pending_d[verified[j]] = none
    for j in range(n_drafted):
        i = drafted[j]
        pending_d[i] = drafter[j]
        pending_k[i] = k[j]
        pending_prop[i] = proposed[j]
