"""A drafter's host seconds per drafting phase (`host_s`, simulator/costs/draft_cost.py): read from the config,
added once per phase that proposes, refused where the kind prices the proposer's whole step itself."""
from __future__ import annotations

import pytest

from simulator.costs.draft_cost import DraftCost, draft_cost_from_config
from simulator.costs.roofline import RooflineProfile
from traces.catalog import get_gpu, get_model

ROOF = {"kind": "roofline", "model": "qwen3-0.6b", "gpu": "h100-80gb", "tp": 1}


def test_host_s_adds_once_per_phase_to_the_forwards():
    plain = draft_cost_from_config({"kind": "autoregressive", "profile": ROOF})
    host = draft_cost_from_config({"kind": "autoregressive", "profile": ROOF, "host_s": 0.001})
    direct = RooflineProfile(get_model("qwen3-0.6b"), get_gpu("h100-80gb"), tp=1)
    for seqs, k, kv in ((1, 3, 100), (8, 5, 4000)):
        forwards = sum(direct.step_time(seqs, seqs, kv + i * seqs) for i in range(k))
        assert plain.draft_time(seqs, k * seqs, k, kv, 0.0) == pytest.approx(forwards, rel=1e-12)
        assert host.draft_time(seqs, k * seqs, k, kv, 0.0) == pytest.approx(forwards + 0.001, rel=1e-12)
        assert host.draft_time(seqs, 0, k, kv, 0.0) == 0.0  # nothing proposed: no host work
    # the drafter's prompt pass is a forward, not a drafting phase: no host term there
    assert host.prefill_time(2, 300, 300) == plain.prefill_time(2, 300, 300)


def test_host_s_is_validated_and_named():
    with pytest.raises(ValueError, match="drafters.d.*host_s"):
        draft_cost_from_config({"kind": "autoregressive", "profile": ROOF, "host_s": -1.0}, where="drafters.d")
    with pytest.raises(ValueError, match="engine_step.*host_s"):
        draft_cost_from_config({"kind": "engine_step", "profile": ROOF, "host_s": 0.001}, where="drafters.d")
    with pytest.raises(ValueError, match="engine_step.*host_s"):
        DraftCost("engine_step", RooflineProfile(get_model("qwen3-0.6b"), get_gpu("h100-80gb")), host_s=0.001)
    with pytest.raises(ValueError, match="host_s"):
        DraftCost("constant", seconds=0.1, host_s=float("nan"))
