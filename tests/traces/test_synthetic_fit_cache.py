"""Fitted-spec cache: keyed by content, same spec warm or cold, safe against damaged files, can be switched off."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.traces.synth_helpers import bundle_from
from traces.bundle import TraceBundle
from traces.synthetic import BurstyAcceptance, IidAcceptance, fit_synth_spec, make_synthetic_bundle
from traces.synthetic.fit_cache import cache_dir, clear_memory_cache, fit_key, fit_synth_spec_cached

SOURCES = {"code": bundle_from(IidAcceptance(rate=0.7), n=30, length=80, seed=1),
           "chat": bundle_from(BurstyAcceptance(rate_off=0.05, rate_on=0.8, stay_off=0.9, stay_on=0.8), n=30,
                               length=80, seed=2, kind="ngram")}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSIM_CACHE_DIR", str(tmp_path))
    clear_memory_cache()
    yield tmp_path / "synth-specs"
    clear_memory_cache()


def _fingerprint(bundle: TraceBundle) -> list:
    return [(r.id, r.prompt_len, r.output_len, r.category,
             [(d, t.acc_len.tobytes(), None if t.tv is None else t.tv.tobytes()) for d, t in r.drafters.items()])
            for r in bundle.requests]


def test_cold_and_warm_give_the_fit_itself(cache):
    fresh = fit_synth_spec(SOURCES, dataset="x")
    cold = fit_synth_spec_cached(SOURCES, dataset="x")
    assert len(list(cache.glob("*.yaml"))) == 1
    clear_memory_cache()
    warm_disk = fit_synth_spec_cached(SOURCES, dataset="x")  # read back from YAML
    warm_memory = fit_synth_spec_cached(SOURCES, dataset="x")
    assert cold == fresh and warm_disk == fresh and warm_memory == fresh
    expected = _fingerprint(make_synthetic_bundle(fresh, seed=4, num_requests=40))
    for spec in (cold, warm_disk, warm_memory):
        assert _fingerprint(make_synthetic_bundle(spec, seed=4, num_requests=40)) == expected


def test_callers_get_copies(cache):
    a = fit_synth_spec_cached(SOURCES)
    a.categories.clear()
    assert set(fit_synth_spec_cached(SOURCES).categories) == {"code", "chat"}


def test_key_follows_content_and_arguments():
    base = fit_key(SOURCES, None, None, "x", "")
    copied = {c: TraceBundle(b.meta, [dataclasses.replace(r) for r in b.requests]) for c, b in SOURCES.items()}
    assert fit_key(copied, None, None, "x", "") == base  # same content, other objects
    r0 = SOURCES["code"].requests[0]
    acc = r0.drafters["d"].acc_len.copy()
    acc[5] += 1
    changed = TraceBundle(SOURCES["code"].meta, [dataclasses.replace(r0, drafters={"d": dataclasses.replace(
        r0.drafters["d"], acc_len=acc)}), *SOURCES["code"].requests[1:]])
    assert fit_key({**SOURCES, "code": changed}, None, None, "x", "") != base
    assert fit_key(SOURCES, {"d": "iid"}, None, "x", "") != base
    assert fit_key(SOURCES, None, 10, "x", "") != base
    assert fit_key(SOURCES, None, None, "y", "") != base
    assert fit_key({"other": SOURCES["code"], "chat": SOURCES["chat"]}, None, None, "x", "") != base


@pytest.mark.parametrize("damage", ["not: [valid", "target: t\n", "\xff"])
def test_a_damaged_cache_file_is_refitted_and_rewritten(cache, damage):
    spec = fit_synth_spec_cached(SOURCES)
    (path,) = cache.glob("*.yaml")
    path.write_bytes(damage.encode("latin-1"))
    clear_memory_cache()
    with pytest.warns(UserWarning, match="damaged cached spec"):
        again = fit_synth_spec_cached(SOURCES)
    assert again == spec
    clear_memory_cache()
    assert fit_synth_spec_cached(SOURCES) == spec  # the rewritten file reads back


def test_empty_cache_dir_switches_the_disk_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSIM_CACHE_DIR", "")
    monkeypatch.chdir(tmp_path)
    clear_memory_cache()
    assert cache_dir() is None
    fit_synth_spec_cached(SOURCES)
    assert list(tmp_path.iterdir()) == []


def test_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("DRAFTSIM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "draftsim" / "synth-specs"


def test_fitted_positional_spec_round_trips_exactly(cache):
    # the default model for eagle drafters: per-position rates are the floats most at risk in YAML
    spec = fit_synth_spec_cached({"a": bundle_from(IidAcceptance(rate=0.37), n=20, length=60, seed=9)})
    clear_memory_cache()
    again = fit_synth_spec_cached({"a": bundle_from(IidAcceptance(rate=0.37), n=20, length=60, seed=9)})
    assert again == spec
    rates = again.categories["a"].acceptance["d"].rates
    assert isinstance(rates[0], float) and np.isfinite(rates).all()
