"""`draftsim traces suffix`: writes a bundle with a suffix drafter, refuses bad input, and the shipped suffix bundles
are what the command computes from their source bundles."""
from __future__ import annotations

import numpy as np

from experiments.cli import traces as cmd_traces
from tests.experiments.cli_helpers import run_cli
from traces.builtin_bundles import bundle_folder
from traces.bundle import (BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, load_bundle,
                           save_bundle)
from traces.suffix_decoding import SuffixConfig, suffix_decoding_traces


def _source(tmp_path, with_ids=True):
    reqs = [([1, 2, 3, 1, 2], [3, 1, 5, 3]), ([0, 5, 6], [7, 8, 1])]
    rs = [RequestTrace(f"r{i}", len(p), len(o), {"n": DrafterTrace(np.ones(len(o), np.int32))},
                       prompt_token_ids=list(p) if with_ids else None, output_token_ids=list(o) if with_ids else None)
          for i, (p, o) in enumerate(reqs)]
    folder = save_bundle(TraceBundle(BundleMeta("toy", {"n": DrafterSpec("n", "ngram", "ngram")}), rs),
                         tmp_path / "src")
    return folder, reqs


def test_writes_the_suffix_drafter_with_the_settings(tmp_path, capsys):
    src, reqs = _source(tmp_path)
    out = tmp_path / "out"
    assert run_cli(cmd_traces, ["traces", "suffix", str(src), "--out", str(out), "--min-token-prob", "0.2",
                                "--num-speculative-tokens", "3"]) == 0
    b = load_bundle(out)
    spec = b.meta.drafters["suffix"]
    assert spec.kind == "suffix" and spec.params["num_speculative_tokens"] == 3
    assert spec.params["suffix_decoding_min_token_prob"] == 0.2
    want = suffix_decoding_traces(reqs, SuffixConfig(min_token_prob=0.2, num_speculative_tokens=3))
    for r, (acc, prop) in zip(b.requests, want):
        assert np.array_equal(r.drafters["suffix"].acc_len, acc)
        assert np.array_equal(r.drafters["suffix"].proposal_len, prop)
    assert "proposes at" in capsys.readouterr().out


def test_refuses_the_source_folder_missing_ids_and_bad_settings(tmp_path, capsys):
    src, _ = _source(tmp_path)
    assert run_cli(cmd_traces, ["traces", "suffix", str(src), "--out", str(src)]) == 2
    assert "is the source bundle" in capsys.readouterr().err
    assert run_cli(cmd_traces, ["traces", "suffix", str(src), "--out", str(tmp_path / "o"),
                                "--max-tree-depth", "0"]) == 2
    assert "max_tree_depth" in capsys.readouterr().err
    bare, _ = _source(tmp_path / "bare", with_ids=False)
    assert run_cli(cmd_traces, ["traces", "suffix", str(bare), "--out", str(tmp_path / "o2")]) == 2
    assert "r0" in capsys.readouterr().err and not (tmp_path / "o2").exists()


def test_the_shipped_code_edit_suffix_bundle_is_reproduced():
    shipped = load_bundle(bundle_folder("builtin:smollm2-135m-instruct-code-edit-suffix"))
    source = load_bundle(bundle_folder("builtin:smollm2-135m-instruct-code-edit"))
    assert [r.id for r in shipped.requests] == [r.id for r in source.requests]
    want = suffix_decoding_traces([(r.prompt_token_ids, r.output_token_ids) for r in source.requests], SuffixConfig())
    for r, (acc, prop) in zip(shipped.requests, want):
        assert np.array_equal(r.drafters["suffix"].acc_len, acc)
        assert np.array_equal(r.drafters["suffix"].proposal_len, prop)
