"""PSD's step time (rules/psd_timing.psd_step_time) against hand-worked steps."""
from __future__ import annotations

import pytest

from simulator.engine.compiled_kernel import psd_step_time as compiled_psd_step_time
from simulator.engine.rules.psd_timing import psd_step_time


@pytest.mark.parametrize("rule", [psd_step_time, compiled_psd_step_time], ids=["plain", "compiled"])
def test_the_target_side_is_longer_the_sync_follows_it(rule):
    # pre-drafts 1, verify 5 + overhead 0.5 on the target; drafts 3 + prompt pass 2 on the drafter; sync 0.25
    assert rule(1.0, 5.0, 3.0, 2.0, 0.5, 0.25, True, True) == (6.5, 6.0, 6.5, 6.75)


@pytest.mark.parametrize("rule", [psd_step_time, compiled_psd_step_time], ids=["plain", "compiled"])
def test_the_drafter_side_is_longer(rule):
    # the drafter's 1 + 4 + 2 = 7 outlasts the target's 1 + 2 + 0.5 = 3.5; no sync without a decoding request
    assert rule(1.0, 2.0, 4.0, 2.0, 0.5, 0.25, True, False) == (3.5, 7.0, 7.0, 7.0)


@pytest.mark.parametrize("rule", [psd_step_time, compiled_psd_step_time], ids=["plain", "compiled"])
def test_an_idle_target_pays_no_overhead_and_an_empty_step_lasts_the_overhead(rule):
    assert rule(0.0, 0.0, 3.0, 0.0, 0.5, 0.0, False, True) == (0.0, 3.0, 3.0, 3.0)
    assert rule(0.0, 0.0, 0.0, 0.0, 0.5, 0.25, False, False) == (0.0, 0.0, 0.0, 0.5)
