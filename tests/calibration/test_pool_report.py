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
    acc = list(range(42, 1, -1))  # 41 positions, all matching to the end: 40 decoded after the prefill's token
    rows = pool_rows(_bundle("w", acc, [1] * 41), {"m": 0.0})
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


def test_measured_profiles_price_verify_and_drafts():
    from simulator.costs.latency import LinearProfile

    target = LinearProfile("t", {"batched_tokens": 0.01, "const": 0.1})
    draft = LinearProfile("m", {"const": 0.02})
    free = LinearProfile("ng", {"const": 0.0})
    acc = list(range(42, 1, -1))  # 40 decoded tokens, all drafts accepted
    rows = pool_rows(_bundle("w", acc, [1] * 41), {}, {"m": draft, "ng": free}, target)
    m = next(r for r in rows if r.drafter == "m")
    # k: tokens/step * t_ar / (verify(k+1) + k * draft); k=7 -> 8 * 0.11 / (0.18 + 0.14) = 2.75
    assert m.best_k == 7 and m.best_speedup == pytest.approx(8 * 0.11 / (0.1 + 0.08 + 0.14))
    assert m.cost_ratio == pytest.approx(0.02 / 0.11)
    with pytest.raises(ValueError, match="no latency profile named 'm'"):
        pool_rows(_bundle("w", acc, [1] * 41), {}, {"ng": free}, target)
