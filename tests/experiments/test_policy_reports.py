"""The bandit and combination studies run end to end at quick sizes and write their tables and plots."""
import json
from pathlib import Path

import pytest

from experiments.studies.bandit_report import BanditStudy, run_bandit_study
from experiments.studies.combine_report import REFERENCE_DIR, CombineStudy, run_combine_study


def test_bandit_study_quick(tmp_path):
    s = run_bandit_study(tmp_path, BanditStudy.quick())
    for f in ("mixed_regret.csv", "drift_regret.csv", "mixed_best_arm_ratio.png", "drift_regret.png",
              "engine_speedup.csv", "engine_speedup.png", "summary.json"):
        assert (tmp_path / f).is_file(), f
    assert json.loads((tmp_path / "summary.json").read_text())["mixed"]["requests"] == 3
    # regret is against each request's best fixed drafter, its category's specialist (acceptance 0.8 there against
    # the generalist's 0.6 everywhere): the generalist and a random choice both lose rounds to it
    regret = {p: v["regret"] for p, v in s["mixed"]["rounds_regret_tpr"].items()}
    assert regret["fixed:generalist"] > 0 and regret["random"] > 0
    assert s["drift"]["best_arm_ratio"]["segment-best"]
    # AR verifies nothing: one token per step; every SD run (k = 3) accepts some drafts, so more than one
    eng = s["engine"]
    assert eng["AR"]["mean_acceptance_length"] == 1.0
    assert all(1.0 < row["mean_acceptance_length"] <= 4.0 for run, row in eng.items() if run != "AR")


@pytest.mark.slow
def test_combine_study_quick(tmp_path):
    if not Path(REFERENCE_DIR).is_dir():
        pytest.skip(f"reference traces not found at {REFERENCE_DIR} (../shared/reference-traces beside the repo)")
    s = run_combine_study(tmp_path, CombineStudy.quick())
    ic = s["instructcoder"]["speedup"]
    for b in ("1", "16"):
        # the per-position combine oracle is at least each single-method oracle (reference cost even more)
        assert ic["oracle-combine-maxtokens"][b] >= max(ic["oracle-eagle3"][b], ic["oracle-ngram"][b]) - 1e-9
        assert ic["oracle-combine-reference"][b] >= ic["oracle-combine-maxtokens"][b]
    steps = s["instructcoder"]["decode_steps"]
    for greedy in ("oracle-eagle3", "oracle-ngram", "oracle-combine-maxtokens", "oracle-combine-reference"):
        for b in ("1", "16"):  # the exact plan never needs more steps than the greedy oracle
            assert steps[greedy + "-exact"][b] <= steps[greedy][b], (greedy, b)
    assert (tmp_path / "combine_instructcoder.png").is_file()
