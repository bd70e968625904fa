"""Two-state hidden Markov model over binary sequences (Bernoulli emissions), fitted by Baum-Welch.

Vectorised over sequences: sequences are sorted longest first, so at each position the ones still
running are a prefix of the batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TwoStateHmm:
    """start[s] = P(state s at position 0); trans[i, j] = P(j next | i now); emit[s] = P(1 | state s)."""

    start: np.ndarray
    trans: np.ndarray
    emit: np.ndarray
    log_likelihood: float = float("nan")


def _batch(seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    lengths = np.array([len(seqs[i]) for i in order])
    x = np.zeros((len(seqs), int(lengths.max())), dtype=bool)
    for row, i in enumerate(order):
        x[row, : lengths[row]] = seqs[i]
    active = np.array([(lengths > t).sum() for t in range(x.shape[1])])
    return x, active


def _e_step(x: np.ndarray, active: np.ndarray, h: TwoStateHmm):
    steps = x.shape[1]
    emit = np.stack([1 - h.emit, h.emit])  # emit[obs, state]
    alphas, scales = [], []
    e = emit[x[: active[0], 0].astype(int)]
    a = h.start[None, :] * e
    c = a.sum(1)
    alphas.append(a / c[:, None])
    scales.append(c)
    for t in range(1, steps):
        n = active[t]
        e = emit[x[:n, t].astype(int)]
        a = (alphas[-1][:n] @ h.trans) * e
        c = a.sum(1)
        alphas.append(a / c[:, None])
        scales.append(c)
    gamma_sum0 = np.zeros(2)
    trans_counts = np.zeros((2, 2))
    emit_ones = np.zeros(2)
    state_counts = np.zeros(2)
    beta = np.ones((active[-1], 2))
    for t in range(steps - 1, -1, -1):
        n = active[t]
        if beta.shape[0] < n:
            beta = np.vstack([beta, np.ones((n - beta.shape[0], 2))])
        g = alphas[t] * beta
        g /= g.sum(1, keepdims=True)
        state_counts += g.sum(0)
        emit_ones += g[x[:n, t]].sum(0)
        if t == 0:
            gamma_sum0 = g.sum(0)
            break
        e = emit[x[:n, t].astype(int)]
        eb = e * beta / scales[t][:, None]
        trans_counts += h.trans * (alphas[t - 1][:n].T @ eb)
        prev_beta = eb @ h.trans.T
        beta = prev_beta
    loglik = float(sum(np.log(c).sum() for c in scales))
    return gamma_sum0, trans_counts, emit_ones, state_counts, loglik


def fit_two_state(seqs: list[np.ndarray], *, max_iter: int = 200, tol: float = 1e-7) -> TwoStateHmm:
    """Baum-Welch from a data-driven start; states are ordered so that emit[0] <= emit[1]."""
    seqs = [np.asarray(s, dtype=bool) for s in seqs if len(s)]
    if not seqs:
        raise ValueError("fit_two_state needs at least one non-empty sequence")
    x, active = _batch(seqs)
    mean = float(np.concatenate(seqs).mean())
    h = TwoStateHmm(start=np.array([0.5, 0.5]), trans=np.array([[0.9, 0.1], [0.1, 0.9]]),
                    emit=np.array([0.5 * mean, mean + 0.5 * (1 - mean)]))
    prev = -np.inf
    for _ in range(max_iter):
        g0, tc, ones, counts, ll = _e_step(x, active, h)
        trans = tc / np.maximum(tc.sum(1, keepdims=True), 1e-300)
        trans[tc.sum(1) == 0] = np.eye(2)[tc.sum(1) == 0]
        h = TwoStateHmm(start=g0 / g0.sum(), trans=trans,
                        emit=np.clip(ones / np.maximum(counts, 1e-300), 0.0, 1.0), log_likelihood=ll)
        if ll - prev < tol * abs(ll):
            break
        prev = ll
    if h.emit[0] > h.emit[1]:
        swap = [1, 0]
        h = TwoStateHmm(h.start[swap], h.trans[np.ix_(swap, swap)], h.emit[swap], h.log_likelihood)
    return h
