"""The shipped SmolLM2 tree bundles: tree_rank per drafter, consistent with their chains and with the chain bundles
of the same prompts (same outputs; the float drafters' and n-gram's acc_len equal the earlier collection's)."""
from pathlib import Path

import numpy as np
import pytest

from calibration.checks import check_trace_consistency
from calibration.tree_ranks import leading_zeros
from traces.bundle import load_bundle

BUNDLES = Path(__file__).resolve().parents[2] / "traces" / "data" / "bundles"


@pytest.mark.parametrize("workload, n", [("chat", 80), ("code-edit", 40)])
def test_shipped_tree_bundle(workload, n):
    b = load_bundle(BUNDLES / f"smollm2-135m-instruct-{workload}-tree")
    base = {r.id: r for r in load_bundle(BUNDLES / f"smollm2-135m-instruct-{workload}").requests}
    assert len(b.requests) == n and b.meta.extra["target_argmax_mismatches"] == 0
    assert "target_outputs" in b.meta.extra and b.meta.source["kind"] == "measured"
    check_trace_consistency(b)
    for name, spec in b.meta.drafters.items():
        assert (spec.params["tree_top_k"], spec.params["tree_depth"]) == (8, 6), name
    for r in b.requests:
        old = base[r.id]
        assert r.output_token_ids == old.output_token_ids and r.prompt_token_ids == old.prompt_token_ids
        for name, t in r.drafters.items():
            assert (leading_zeros(t.tree_rank) == np.minimum(t.acc_len - 1, 6)).all(), (r.id, name)
            if name != "int8":  # the int8 copy's per-token rounding flips with the machine's float kernels
                assert (t.acc_len == old.drafters[name].acc_len).all(), (r.id, name)
