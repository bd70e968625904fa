"""The proposal rate derived from vLLM's counters (traces/acceptance_levels.py) on the shipped n-gram runs: per
load level, the share of decode steps that proposed, counted in the step records, lies within the bounds the
counters and output tokens give (the upper one misses only accepted drafts trimmed past a request's end)."""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from calibration.vllm_steps.calibrate import parse_mode
from calibration.vllm_steps.validate_compare import load_mode
from traces.acceptance_levels import proposal_rate_from_counts

ROOT = Path(__file__).parents[2] / "experiments" / "validation"


@pytest.mark.parametrize("folder", ["vllm-cpu-smollm2-quiet"])
def test_counter_proposal_rate_brackets_the_step_records(folder, tmp_path):
    with tarfile.open(ROOT / folder / "raw-runs.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    mode = parse_mode("ngram:4")
    data = load_mode(tmp_path / mode.label, mode)
    for lv, log in zip(data.levels, data.level_logs):
        reqs = lv["requests"]
        sd = [q["spec_decode_metrics"] for q in reqs]
        p = proposal_rate_from_counts(sum(len(q["output_token_ids"]) for q in reqs), len(reqs),
                                      sum(m["num_spec_steps"] for m in sd),
                                      sum(m["num_accepted_draft_tokens"] for m in sd), mode.k)
        decode = [r for st in log.steps for r in st.requests if r.emitted and not r.is_prefill]
        share = sum(r.proposed > 0 for r in decode) / len(decode)
        assert p.rate_low <= share <= p.rate, (lv["fraction"], p, share)
        assert 0.2 < share < 0.35  # n-gram proposed on about a quarter of the decode steps here
