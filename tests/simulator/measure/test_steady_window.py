"""The steady window of a run (simulator.measure.steady_state.saturated_window): warm-up and drain finishes dropped."""
from __future__ import annotations

import pandas as pd
import pytest

from simulator.measure.steady_state import saturated_window as steady_window


def _tables():
    # 6 requests finishing at 1..6 s; target steps ending at 0.5, 1.5, ..., 6.5 s, each emitting 10 tokens
    req = pd.DataFrame({"arrival_time": [0.0, 0.0, 1.2, 2.1, 2.5, 3.0], "finish_time": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                        "e2e": [1.0, 2.0, 1.8, 1.9, 2.5, 3.0]})
    steps = pd.DataFrame({"device": ["target"] * 7, "end": [0.5 + i for i in range(7)], "emitted_tokens": [10] * 7})
    return req, steps


def test_window_between_the_trimmed_finishes():
    req, steps = _tables()
    tok_s, e2e = steady_window(req, steps, trim=1)
    # window (2, 5]: steps ending at 2.5, 3.5, 4.5 -> 30 tokens over 3 s; requests arriving >= 2 and finishing <= 5
    assert tok_s == pytest.approx(30 / 3)
    assert e2e == pytest.approx((1.9 + 2.5) / 2)


def test_no_window_when_too_few_requests_or_no_token_column():
    req, steps = _tables()
    assert steady_window(req, steps, trim=3) is None
    assert steady_window(req, steps, trim=0) is None
    assert steady_window(req, steps.drop(columns="emitted_tokens"), trim=1) is None
