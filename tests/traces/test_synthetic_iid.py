"""i.i.d. generator: distribution, cap, and fit recovering its rate."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from tests.traces.synth_helpers import bundle_from
from traces.synthetic import IidAcceptance
from traces.synthetic.iid import capped_iid_tokens


def test_generate_is_geometric_and_capped():
    g = IidAcceptance(rate=0.7, max_acc=6)
    t = g.generate(100_000, np.random.default_rng(1))
    assert t.acc_len.min() >= 1 and t.acc_len.max() == 6
    # P(acc >= j + 1) = 0.7^j below the cap
    for j in range(1, 5):
        assert (t.acc_len > j).mean() == pytest.approx(0.7 ** j, abs=0.01)


def test_rate_zero_never_accepts():
    assert IidAcceptance(rate=0.0).generate(50, np.random.default_rng(0)).acc_len.tolist() == [1] * 50


def test_same_seed_same_trace():
    g = IidAcceptance(rate=0.5)
    a = g.generate(300, np.random.default_rng(7)).acc_len
    b = g.generate(300, np.random.default_rng(7)).acc_len
    assert np.array_equal(a, b)


def test_expected_tokens_stops_at_max_acc():
    assert capped_iid_tokens(0.8, 5, 3) == pytest.approx(1 + 0.8 + 0.64)  # acc_len <= 3: at most 2 drafts count


@pytest.mark.parametrize("rate", [0.3, 0.65, 0.85])
def test_fit_recovers_rate(rate):
    fitted = IidAcceptance.fit(bundle_from(IidAcceptance(rate=rate, max_acc=40), n=150, length=300, seed=3), "d")
    assert fitted.rate == pytest.approx(rate, abs=0.02)


def test_rate_one_rejected():
    with pytest.raises(ValidationError):
        IidAcceptance(rate=1.0)
