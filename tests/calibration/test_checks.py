"""Trace consistency check: errors name the request and position."""
import numpy as np
import pytest

from calibration.checks import CalibrationCheckError, check_trace_consistency
from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle


def _bundle(acc, kind="int8", temperature=0.0):
    meta = BundleMeta(target="t", drafters={"d": DrafterSpec("d", kind, "d")}, temperature=temperature)
    req = RequestTrace(id="r1", prompt_len=3, output_len=len(acc), drafters={"d": DrafterTrace(np.array(acc))})
    return TraceBundle(meta, [req])


def test_consistent_greedy_trace_passes():
    check_trace_consistency(_bundle([3, 2, 1, 2, 1]))
    check_trace_consistency(_bundle([4, 3, 2]))  # all matched to the end: one past the end is allowed


def test_run_that_does_not_shrink_is_reported():
    with pytest.raises(CalibrationCheckError, match="request r1, drafter d, position 0"):
        check_trace_consistency(_bundle([3, 1, 1]))


def test_acc_len_beyond_the_end_is_reported():
    with pytest.raises(CalibrationCheckError, match="position 2: acc_len 3"):
        check_trace_consistency(_bundle([1, 1, 3]))


def test_ngram_and_sampled_traces_skip_the_run_rule():
    check_trace_consistency(_bundle([3, 1, 1], kind="ngram"))
    check_trace_consistency(_bundle([3, 1, 1], temperature=0.8))
