"""The per-process bundle cache (traces/file_cache.py, traces/bundle.load_bundle_cached): parsed once while the files
are unchanged, re-read when one changes, errors name the file every time, callers cannot change each other's copy."""
from __future__ import annotations

import os

import numpy as np
import pytest

from experiments.run import resolve_bundle
from tests.traces.test_bundle import make, req
from traces import bundle as bundle_mod
from traces import file_cache
from traces.bundle import load_bundle_cached
from traces.errors import TraceFormatError


@pytest.fixture(autouse=True)
def _empty_cache():
    file_cache.clear()
    yield
    file_cache.clear()


def _count_loads(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = bundle_mod.load_bundle

    def counting(path):
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(bundle_mod, "load_bundle", counting)
    return calls


def test_parsed_once_while_unchanged(tmp_path, monkeypatch):
    folder = make(tmp_path / "b", [req("r1"), req("r2", acc=(1, 3))])
    calls = _count_loads(monkeypatch)
    a = load_bundle_cached(folder)
    b = resolve_bundle(str(folder))
    assert len(calls) == 1
    assert [r.id for r in a.requests] == [r.id for r in b.requests] == ["r1", "r2"]
    assert np.array_equal(a.requests[1].drafters["d"].acc_len, [1, 3])


def test_changed_file_is_read_again(tmp_path, monkeypatch):
    folder = make(tmp_path / "b", [req("r1")])
    calls = _count_loads(monkeypatch)
    assert [r.id for r in load_bundle_cached(folder).requests] == ["r1"]
    make(folder, [req("r1"), req("r9", acc=(4, 1, 1, 1))])
    st = os.stat(folder / "requests.jsonl")
    os.utime(folder / "requests.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a coarse clock cannot hide it
    assert [r.id for r in load_bundle_cached(folder).requests] == ["r1", "r9"]
    assert len(calls) == 2


def test_parse_error_names_the_file_every_time(tmp_path):
    folder = make(tmp_path / "bad", [req("r1"), {"id": "r2", "prompt_len": -1, "output_len": 1,
                                                 "drafters": {"d": {"acc_len": [1]}}}])
    for _ in range(2):  # a failed parse is not kept
        with pytest.raises(TraceFormatError) as info:
            load_bundle_cached(folder)
        assert "requests.jsonl" in str(info.value) and "prompt_len" in str(info.value)
    make(folder, [req("r1")])  # fixed: loads
    assert len(load_bundle_cached(folder).requests) == 1


def test_callers_get_their_own_objects(tmp_path):
    folder = make(tmp_path / "b", [req("r1"), req("r2")])
    a = load_bundle_cached(folder)
    a.requests.pop()
    a.requests[0].category = "changed"
    a.meta.drafters.clear()
    b = load_bundle_cached(folder)
    assert [r.id for r in b.requests] == ["r1", "r2"] and b.requests[0].category is None
    assert list(b.meta.drafters) == ["d"]
    with pytest.raises(ValueError):  # shared arrays are read-only
        b.requests[0].drafters["d"].acc_len[0] = 7
