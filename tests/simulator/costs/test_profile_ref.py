"""A drafter's cost profile may be given inline, as the target's may: one reader (roofline.profile_from_ref)."""
from __future__ import annotations

from simulator.costs.draft_cost import draft_cost_from_config
from simulator.costs.roofline import RooflineProfile
from traces.catalog import get_gpu, get_model


def test_inline_roofline_drafter_profile_prices_like_the_profile_built_directly():
    cost = draft_cost_from_config({"kind": "autoregressive", "profile": {"kind": "roofline", "model": "qwen3-0.6b",
                                                                         "gpu": "h100-80gb", "tp": 1, "mfu": 0.6}})
    direct = RooflineProfile(get_model("qwen3-0.6b"), get_gpu("h100-80gb"), tp=1, mfu=0.6)
    for seqs, kv in ((1, 100), (8, 4000), (64, 50_000)):
        assert cost.draft_time(seqs, 3 * seqs, 3, kv, 0.0) == sum(direct.step_time(seqs, seqs, kv + i * seqs)
                                                                   for i in range(3))
