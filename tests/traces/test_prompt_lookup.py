"""Server-visible prompt-lookup match lengths."""
from pathlib import Path

import numpy as np
import pytest

from traces.prompt_lookup import prompt_lookup_lengths

REF = Path(__file__).resolve().parents[2].parent / "shared" / "reference-traces" / "specbench-llama3.1-8b-h100"


def test_hand_example():
    # prompt 1 2 3 4 5; output 1 2 3 9 ...
    prompt = [1, 2, 3, 4, 5]
    out = [1, 2, 3, 9, 9]
    pl = prompt_lookup_lengths(prompt, out, min_n=2, max_n=3)
    # at p the context is prompt + out[:p] (the proposal would start at output token p)
    # p=0: ends "4 5" / "3 4 5", seen only at the end: no match; p=1: "5 1" never seen before
    assert pl[0] == 0 and pl[1] == 0
    assert pl[2] == 7 - (0 + 2)  # "1 2" first at 0: 5 tokens follow it in the 7-token context
    assert pl[3] == 8 - (0 + 3)  # "1 2 3" first at 0
    assert pl[4] == 0  # "3 9" / "2 3 9" never seen
    assert prompt_lookup_lengths(prompt, out, min_n=2, max_n=3, k_cap=2)[2] == 2


def test_bad_parameters():
    with pytest.raises(ValueError, match="min_n"):
        prompt_lookup_lengths([1], [1], min_n=3, max_n=2)
    with pytest.raises(ValueError, match="k_cap"):
        prompt_lookup_lengths([1], [1], k_cap=0)


def test_reference_ngram_never_accepts_more_than_the_visible_match():
    """On the shared SpecDecode-Bench traces, every accepted n-gram draft lies inside the visible match."""
    if not REF.is_dir():
        pytest.skip(f"reference traces not found at {REF} (../shared/reference-traces beside the repo)")
    from traces.importers.specbench import import_specbench

    bundle, _ = import_specbench(REF / "combined_gsm8k.jsonl", on_mismatch="shortest")
    for r in bundle.requests[:80]:
        pl = prompt_lookup_lengths(r.prompt_token_ids, r.output_token_ids, min_n=3, max_n=4)
        assert (r.drafters["ngram"].acc_len - 1 <= pl).all(), r.id
