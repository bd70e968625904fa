"""Bundle loader: every bad input names file, line and field; save/load round-trips (hypothesis)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, load_bundle, save_bundle
from traces.errors import TraceFormatError

META = {"schema_version": 1, "target": "toy", "temperature": 0.0, "dataset": "toy",
        "drafters": {"d": {"kind": "eagle", "cost_model": "c"}}, "source": {}, "tool_version": "0.1.0"}


def req(rid="r1", acc=(2, 1, 1), **extra) -> dict:
    doc = {"id": rid, "prompt_len": 4, "output_len": len(acc), "drafters": {"d": {"acc_len": list(acc)}}}
    doc.update(extra)
    return doc


def make(folder: Path, lines: list, meta: dict | str = META, gz: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.yaml").write_text(meta if isinstance(meta, str) else yaml.safe_dump(meta), encoding="utf-8")
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    if gz:
        with gzip.open(folder / "requests.jsonl.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        (folder / "requests.jsonl").write_text(text, encoding="utf-8")
    return folder


def error_of(folder: Path) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        load_bundle(folder)
    return info.value


def test_valid_bundle_loads(tmp_path):
    b = load_bundle(make(tmp_path / "b", [req("a"), req("b", acc=(1, 3, 2, 1))]))
    assert [r.id for r in b.requests] == ["a", "b"]
    assert b.requests[1].drafters["d"].acc_len.tolist() == [1, 3, 2, 1]


def test_missing_trace_yaml(tmp_path):
    folder = make(tmp_path / "b", [req()])
    (folder / "trace.yaml").unlink()
    e = error_of(folder)
    assert e.path.endswith("trace.yaml") and "missing" in str(e)


def test_missing_requests_file(tmp_path):
    folder = make(tmp_path / "b", [req()])
    (folder / "requests.jsonl").unlink()
    assert "requests.jsonl" in str(error_of(folder))


def test_bad_yaml(tmp_path):
    e = error_of(make(tmp_path / "b", [req()], meta="target: [unclosed\n"))
    assert e.path.endswith("trace.yaml") and "YAML" in str(e)


@pytest.mark.parametrize("key, value, field", [
    ("surprise", 1, "surprise"),
    ("temperature", "hot", "temperature"),
    ("drafters", {"d": {"kind": "telepathy", "cost_model": "c"}}, "drafters.d.kind"),
])
def test_bad_meta_names_field(tmp_path, key, value, field):
    meta = dict(META, **{key: value})
    e = error_of(make(tmp_path / "b", [req()], meta=meta))
    assert e.path.endswith("trace.yaml")
    assert field in str(e)


@pytest.mark.parametrize("line_doc, field", [
    (req(surprise=1), None),  # unknown key: named in the message
    (req(prompt_len="4"), "prompt_len"),  # wrong type
    (req(prompt_len=True), "prompt_len"),
    (req(acc=(2, 0, 1)), "drafters.d.acc_len"),  # acc_len < 1
    (dict(req(), output_len=5), "drafters.d.acc_len"),  # length mismatch
    (req(arrival_time="soon"), "arrival_time"),
    (req(category=3), "category"),
    ({"id": "x", "prompt_len": 4, "output_len": 1, "drafters": {}}, "drafters"),  # drafter missing
    ({"id": "x", "prompt_len": 4, "output_len": 1, "drafters": {"d": {"acc_len": [1]}, "e": {"acc_len": [1]}}},
     "drafters"),  # undeclared drafter
    ({"id": "x", "prompt_len": 4, "output_len": 1, "drafters": {"d": {"acc_len": [1], "tv": [1.5]}}},
     "drafters.d.tv"),
    ({"id": "x", "prompt_len": 4, "output_len": 1, "drafters": {"d": {"acc_len": [1], "proposal_len": [-1]}}},
     "drafters.d.proposal_len"),
    ({"id": "x", "prompt_len": 4, "output_len": 1, "drafters": {"d": {"acc_len": [1.5]}}}, "drafters.d.acc_len"),
    ([1, 2], None),  # not an object
    ({"id": "x", "prompt_len": 4, "output_len": 1, "drafters": {"d": {"acc_len": [2 ** 40]}}}, "drafters.d.acc_len"),
    (req(id=None), "id"),
    (req(id=""), "id"),
    (req(id=True), "id"),
])
def test_bad_request_line_names_line_and_field(tmp_path, line_doc, field):
    e = error_of(make(tmp_path / "b", [req("ok"), line_doc]))
    assert e.path.endswith("requests.jsonl")
    assert e.line == 2
    if field is not None:
        assert e.field == field
    else:
        assert "surprise" in str(e) or "object" in str(e)


@pytest.mark.parametrize("ids, message", [
    ([1, 2, 2 ** 31], "expected 32-bit integers, got 2147483648 at position 2"),
    ([-(2 ** 31) - 1, 5], "expected 32-bit integers, got -2147483649 at position 0"),
    ([1, True], "expected a list of integers"),
    ([1, 2.0], "expected a list of integers"),
    ("1, 2", "expected a list of integers"),
])
def test_integer_lists_name_the_first_bad_entry(tmp_path, ids, message):
    e = error_of(make(tmp_path / "b", [req("ok"), req("x", prompt_token_ids=ids)]))
    assert (e.line, e.field) == (2, "prompt_token_ids") and message in str(e)


def test_integer_lists_beyond_64_bits_name_the_first_bad_entry():
    # the JSON reader refuses such numbers first (traces/parsing.py); the list rule names them on its own too
    from traces.bundle import _int_array

    with pytest.raises(TraceFormatError, match=f"expected 32-bit integers, got {2 ** 70} at position 1"):
        _int_array([3, 2 ** 70, 2 ** 31], "f.jsonl", 1, "acc_len")


def test_integer_lists_keep_the_32_bit_extremes(tmp_path):
    ids = [-(2 ** 31), 2 ** 31 - 1, 0, 7]
    b = load_bundle(make(tmp_path / "b", [req("x", prompt_token_ids=ids, acc=(1, 2, 1))]))
    assert b.requests[0].prompt_token_ids == ids and b.requests[0].drafters["d"].acc_len.dtype == np.int32


def test_duplicate_id(tmp_path):
    e = error_of(make(tmp_path / "b", [req("a"), req("b"), req("a")]))
    assert (e.line, e.field) == (3, "id") and "duplicate" in str(e)


def test_blank_line(tmp_path):
    e = error_of(make(tmp_path / "b", [req("a"), "", req("b")]))
    assert e.line == 2 and "blank" in str(e)


def test_bad_json(tmp_path):
    e = error_of(make(tmp_path / "b", [req("a"), '{"id": "b", ']))
    assert e.line == 2 and "JSON" in str(e)


def test_truncated_gzip(tmp_path):
    folder = make(tmp_path / "b", [req(f"r{i}", acc=(1,) * 50) for i in range(200)], gz=True)
    gz = folder / "requests.jsonl.gz"
    data = gz.read_bytes()
    gz.write_bytes(data[: len(data) // 2])
    e = error_of(folder)
    assert e.path.endswith("requests.jsonl.gz") and "truncated" in str(e)


def test_empty_requests_file(tmp_path):
    assert "no requests" in str(error_of(make(tmp_path / "b", [])))


# ---------------------------------------------------------------- round trip

acc_lists = st.lists(st.integers(1, 30), min_size=1, max_size=40)


@st.composite
def bundles(draw) -> TraceBundle:
    n = draw(st.integers(1, 5))
    with_tv = draw(st.booleans())
    with_prop = draw(st.booleans())
    requests = []
    for i in range(n):
        acc = np.array(draw(acc_lists), dtype=np.int32)
        m = acc.shape[0]
        tv = np.array(draw(st.lists(st.floats(0, 1), min_size=m, max_size=m)), dtype=np.float32) if with_tv else None
        prop = np.array(draw(st.lists(st.integers(0, 40), min_size=m, max_size=m)), dtype=np.int32) \
            if with_prop else None
        requests.append(RequestTrace(
            id=f"r{i}", prompt_len=draw(st.integers(1, 5000)), output_len=m,
            drafters={"e": DrafterTrace(acc, tv, prop), "n": DrafterTrace(acc[::-1].copy())},
            category=draw(st.sampled_from([None, "chat", "code"])),
            arrival_time=draw(st.one_of(st.none(), st.floats(0, 1e6))),
        ))
    meta = BundleMeta(target="t", drafters={"e": DrafterSpec("e", "eagle", "c1"), "n": DrafterSpec("n", "ngram", "c2")},
                      dataset="prop", source={"seed": 1})
    return TraceBundle(meta, requests)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=bundles(), compress=st.booleans())
def test_save_load_round_trip(tmp_path, b, compress):
    folder = save_bundle(b, tmp_path / f"rt-{'gz' if compress else 'plain'}", compress=compress)  # a folder per format
    got = load_bundle(folder)
    assert got.meta == b.meta
    assert len(got.requests) == len(b.requests)
    for x, y in zip(b.requests, got.requests):
        assert (x.id, x.prompt_len, x.output_len, x.category, x.arrival_time) == \
               (y.id, y.prompt_len, y.output_len, y.category, y.arrival_time)
        for d in x.drafters:
            assert np.array_equal(x.drafters[d].acc_len, y.drafters[d].acc_len)
            for attr in ("proposal_len",):
                a, c = getattr(x.drafters[d], attr), getattr(y.drafters[d], attr)
                assert (a is None and c is None) or np.array_equal(a, c)
            if x.drafters[d].tv is not None:
                assert np.allclose(x.drafters[d].tv, y.drafters[d].tv, atol=1e-5)
            else:
                assert y.drafters[d].tv is None


def test_both_requests_files_are_ambiguous(tmp_path):
    b = tmp_path / "b"
    save_bundle(TraceBundle(_meta_obj(), [_req_obj("r0")]), b)
    (b / "requests.jsonl.gz").write_bytes(gzip.compress((b / "requests.jsonl").read_bytes()))
    with pytest.raises(TraceFormatError, match="holds both requests.jsonl and requests.jsonl.gz"):
        load_bundle(b)


@pytest.mark.parametrize("text, match", [
    ("dataset: [a, b]\n", r"field 'dataset': expected a string, got list"),
    ("target: other\n", r"line \d+: duplicate key 'target'"),
    ("temperature: .nan\n", r"duplicate key 'temperature'|expected a finite number"),
])
def test_trace_yaml_problems_name_the_field_or_line(tmp_path, text, match):
    b = tmp_path / "b"
    save_bundle(TraceBundle(_meta_obj(), [_req_obj("r0")]), b)
    meta = (b / "trace.yaml").read_text()
    if text.startswith("dataset"):
        meta = meta.replace("dataset: toy\n", text)
    else:
        meta += text
    (b / "trace.yaml").write_text(meta)
    with pytest.raises(TraceFormatError, match=match):
        load_bundle(b)


def test_non_utf8_trace_yaml_and_corrupt_gzip_name_the_file(tmp_path):
    b = tmp_path / "b"
    save_bundle(TraceBundle(_meta_obj(), [_req_obj(f"r{i}") for i in range(50)]), b, compress=True)
    data = (b / "requests.jsonl.gz").read_bytes()
    (b / "requests.jsonl.gz").write_bytes(data[:-12])
    with pytest.raises(TraceFormatError, match=r"requests.jsonl.gz, line \d+: cannot be read completely"):
        load_bundle(b)
    (b / "requests.jsonl.gz").write_bytes(data)
    (b / "trace.yaml").write_bytes((b / "trace.yaml").read_bytes().replace(b"toy", b"t\xf6y"))
    with pytest.raises(TraceFormatError, match=r"trace.yaml, line \d+: not UTF-8 text"):
        load_bundle(b)


def test_duplicate_json_key_and_huge_lengths_are_refused(tmp_path):
    b = tmp_path / "b"
    save_bundle(TraceBundle(_meta_obj(), [_req_obj("r0")]), b)
    line = (b / "requests.jsonl").read_text()
    (b / "requests.jsonl").write_text(line.replace('{"id":', '{"id":"x","id":', 1))
    with pytest.raises(TraceFormatError, match=r"line 1: not valid JSON: duplicate key 'id'"):
        load_bundle(b)
    (b / "requests.jsonl").write_text(line.replace('"prompt_len":4', f'"prompt_len":{2**64}'))
    with pytest.raises(TraceFormatError, match=r"line 1.*prompt_len.*64 bits"):
        load_bundle(b)
    (b / "requests.jsonl").write_text(line.replace('"prompt_len":4', f'"prompt_len":{2**40}'))
    with pytest.raises(TraceFormatError, match=r"line 1, field 'prompt_len': expected an integer in \[1, 16777216\]"):
        load_bundle(b)


def _meta_obj() -> BundleMeta:
    return BundleMeta(target="toy", drafters={"d": DrafterSpec("d", "eagle", "c")}, dataset="toy")


def _req_obj(rid: str) -> RequestTrace:
    return RequestTrace(rid, 4, 5, {"d": DrafterTrace(np.array([1, 2, 1, 3, 1], dtype=np.int32))})
