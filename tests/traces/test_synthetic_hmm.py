"""Two-state Bernoulli HMM: Baum-Welch recovers known parameters; likelihood never decreases."""
from __future__ import annotations

import numpy as np
import pytest

from traces.synthetic.hmm import TwoStateHmm, _batch, _e_step, fit_two_state


def sample(n_seq: int, length: int, stay=(0.95, 0.9), emit=(0.05, 0.9), seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_seq):
        s = np.empty(length, dtype=int)
        s[0] = 0
        for t in range(1, length):
            s[t] = s[t - 1] if rng.random() < stay[s[t - 1]] else 1 - s[t - 1]
        out.append(rng.random(length) < np.asarray(emit)[s])
    return out


def test_recovers_parameters_from_sequences_of_mixed_lengths():
    seqs = sample(60, 300) + sample(40, 120, seed=1)
    h = fit_two_state(seqs)
    assert h.emit == pytest.approx([0.05, 0.9], abs=0.02)
    assert h.trans[0, 0] == pytest.approx(0.95, abs=0.015)
    assert h.trans[1, 1] == pytest.approx(0.9, abs=0.02)


def test_em_never_lowers_the_likelihood():
    seqs = sample(20, 100, seed=3)
    x, active = _batch(seqs)
    h = TwoStateHmm(np.array([0.5, 0.5]), np.array([[0.8, 0.2], [0.3, 0.7]]), np.array([0.2, 0.7]))
    last = -np.inf
    for _ in range(15):
        g0, tc, ones, counts, ll = _e_step(x, active, h)
        assert ll >= last - 1e-9
        last = ll
        h = TwoStateHmm(g0 / g0.sum(), tc / tc.sum(1, keepdims=True), ones / counts)


def test_likelihood_of_a_known_model_by_hand():
    # one state effectively (identical rows): likelihood of [1, 0] is 0.3 * 0.7
    h = TwoStateHmm(np.array([1.0, 0.0]), np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.3, 0.9]))
    x, active = _batch([np.array([True, False])])
    assert _e_step(x, active, h)[4] == pytest.approx(np.log(0.3 * 0.7))


def test_needs_data():
    with pytest.raises(ValueError):
        fit_two_state([np.array([], dtype=bool)])
