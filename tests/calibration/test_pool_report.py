"""Pool report: replayed tokens per step and the cost-aware best drafter."""
import numpy as np
import pytest

from calibration.pool_report import best_by_workload, markdown_table, pool_rows
from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle


def _bundle(name, acc_model, acc_ngram):
    meta = BundleMeta(target="t", dataset=name, drafters={"m": DrafterSpec("m", "int8", "m"),
                                                          "ng": DrafterSpec("ng", "ngram", "ng")})
    n = len(acc_model)
    req = RequestTrace(id="r", prompt_len=2, output_len=n, drafters={
        "m": DrafterTrace(np.array(acc_model)), "ng": DrafterTrace(np.array(acc_ngram), proposal_len=np.full(n, 8))})
    return TraceBundle(meta, [req])


def test_every_draft_accepted_gives_k_plus_one_tokens():
    acc = list(range(41, 1, -1))  # 40 positions, all matching to the end
    rows = pool_rows(_bundle("w", acc, [1] * 40), {"m": 0.0})
    m = next(r for r in rows if r.drafter == "m")
    assert m.tokens_per_step_k4 == pytest.approx(5.0)
    # k=7: 5 steps of 8 tokens; k=8: 9, 9, 9, 9, 4 -- also 8 per step; ties go to the smaller k
    assert m.best_k == 7 and m.best_speedup == pytest.approx(8.0)


def test_cost_decides_the_winner():
    good = list(range(41, 1, -1))
    fair = [3, 2, 1] * 13 + [1]
    b = _bundle("w", good, fair)
    assert best_by_workload(pool_rows(b, {"m": 0.05})) == {"w": "m"}
    assert best_by_workload(pool_rows(b, {"m": 2.0})) == {"w": "ng"}
    assert "| w |" in markdown_table(pool_rows(b, {"m": 2.0}))


def test_missing_cost_is_an_error():
    with pytest.raises(ValueError, match="no cost ratio for drafter 'm'"):
        pool_rows(_bundle("w", [1, 1], [1, 1]), {})
