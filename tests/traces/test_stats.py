"""Bundle statistics on a bundle small enough to work out by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle
from traces.stats import K_RANGE, bundle_stats


def bundle() -> TraceBundle:
    meta = BundleMeta(target="t", drafters={"d": DrafterSpec("d", "eagle", "c")})
    return TraceBundle(meta, [
        RequestTrace("a", 10, 6, {"d": DrafterTrace(np.array([1, 3, 1, 1, 2, 1]))}, category="x"),
        RequestTrace("b", 20, 3, {"d": DrafterTrace(np.array([1, 1, 1]))}, category="y"),
    ])


def test_tokens_per_step_by_hand():
    s = bundle_stats(bundle()).overall.drafters["d"]
    # walks start at position 1 (the prefill made token 0): a decodes 5 tokens, b 2
    assert s.tokens_per_step[1] == pytest.approx(7 / 5)  # a: 5 tokens / 3 steps (at 1, 3, 4); b: 2 / 2
    assert s.tokens_per_step[2] == pytest.approx(7 / 4)  # a: 2 steps (at 1, 4)
    assert s.uncapped == pytest.approx(7 / 4)
    assert set(s.tokens_per_step) == set(K_RANGE)


def test_per_position_rates_at_k5_by_hand():
    s = bundle_stats(bundle(), k=5).overall.drafters["d"]
    # steps: a@1 accepts 2, a@4 accepts 1, b@1..2 accept 0 -> 4 steps with drafts
    assert s.unconditional == pytest.approx([2 / 4, 1 / 4, 0, 0, 0])
    assert s.conditional[:3] == pytest.approx([2 / 4, 1 / 2, 0])
    assert math.isnan(s.conditional[3]) and math.isnan(s.conditional[4])
    assert s.draft_fraction == 1.0


def test_lengths_and_categories():
    st = bundle_stats(bundle())
    assert st.overall.prompt_len.mean == 15 and st.overall.output_len.max == 6
    assert st.overall.output_tokens == 9
    assert set(st.categories) == {"x", "y"}
    assert st.categories["y"].drafters["d"].tokens_per_step[3] == 1.0
    assert st.to_dict()["categories"]["x"]["requests"] == 1


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be"):
        bundle_stats(bundle(), k=0)
