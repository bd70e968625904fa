"""The built-in default bundle: valid, small, regenerable from its recorded command, as specified."""
from __future__ import annotations

import gzip
import shlex

import numpy as np
import pytest

from experiments.cli import traces as cmd_traces
from tests.experiments.cli_helpers import run_cli
from traces.bundle import load_bundle
from traces.default_bundle import default_bundle_path, default_spec_path, load_default_bundle
from traces.stats import bundle_stats


def test_default_bundle_is_valid_small_and_as_specified():
    b = load_default_bundle()
    assert len(b.requests) == 300
    assert b.meta.target == "llama3.1-8b"
    assert {n: (d.kind, d.cost_model) for n, d in b.meta.drafters.items()} == {
        "eagle3": ("eagle", "eagle3-llama3.1-8b-h100-specbench"), "ngram": ("ngram", "ngram")}
    assert {r.category for r in b.requests} == {"chat", "math", "code"}
    size = sum(p.stat().st_size for p in default_bundle_path().iterdir())
    assert size < 1_000_000


def test_default_bundle_regenerates_identically(tmp_path):
    b = load_default_bundle()
    argv = shlex.split(b.meta.source["command"])
    assert argv[:3] == ["draftsim", "traces", "synth"]
    out = tmp_path / "again"
    argv[argv.index("--out") + 1] = str(out)
    argv[argv.index("--spec") + 1] = str(default_spec_path())
    assert run_cli(cmd_traces, argv[1:]) == 0
    # compare the decompressed lines: the gzip header names the temp file atomic_open wrote through
    name = "requests.jsonl.gz"
    assert gzip.decompress((out / name).read_bytes()) == gzip.decompress((default_bundle_path() / name).read_bytes())
    again = load_bundle(out)
    assert again.meta.source["spec"] == b.meta.source["spec"]


def test_default_bundle_stats_are_plausible_for_its_drafters():
    s = bundle_stats(load_default_bundle())
    eagle, ngram = s.overall.drafters["eagle3"], s.overall.drafters["ngram"]
    assert 2.0 < eagle.tokens_per_step[3] < 3.0  # EAGLE-3 chains on Llama-3.1-8B (SD-FACTS: a ~ 0.62-0.74)
    assert s.categories["code"].drafters["ngram"].tokens_per_step[5] > \
        s.categories["chat"].drafters["ngram"].tokens_per_step[5]  # n-gram wins on code, not on chat
    assert 0 < ngram.draft_fraction < 1  # n-gram finds no match at some steps
    assert np.isclose(eagle.draft_fraction, 1.0)


def test_builtin_bundle_names():
    from traces.builtin_bundles import builtin_bundle_path, builtin_bundles

    assert "default" in builtin_bundles()
    assert builtin_bundle_path("default") == default_bundle_path()
    with pytest.raises(ValueError, match="built-in: .*default"):
        builtin_bundle_path("profiles")


def test_builtin_bundle_path_is_what_the_listing_maps_every_name_to():
    """The direct look-up gives the listing's folder for every shipped name and refuses what it has not."""
    from traces.builtin_bundles import builtin_bundle_path, builtin_bundles

    for name, folder in builtin_bundles().items():
        assert builtin_bundle_path(name) == folder
    for bad in ("", ".", "..", "bundles", "../data/default", "default/", "catalog"):
        with pytest.raises(ValueError, match="no built-in trace bundle"):
            builtin_bundle_path(bad)
