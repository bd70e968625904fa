"""SpecDecode-Bench importer: raw reader, bad inputs, mismatch policies, bundle round trip, CLI."""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.cli import imports as cmd_import
from traces.bundle import load_bundle, save_bundle
from traces.errors import TraceFormatError
from traces.importers.specbench import (
    dataset_from_filename,
    import_specbench,
    read_specbench,
    to_bundle,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "reference-traces" / "specbench-llama3.1-8b-h100"


def line(rid="a", prompt=(1, 2, 3), gen=(5, 6, 7, 8), eagle=(2, 1, 3, 1), ngram=(1, 1, 4, 1)) -> dict:
    return {"id": rid, "prompt_token_ids": list(prompt), "generated_token_ids": list(gen),
            "acc_eagle": {"acc_len": list(eagle)}, "acc_ngram": {"acc_len": list(ngram)}}


def write(path: Path, docs: list) -> Path:
    path.write_text("".join((d if isinstance(d, str) else json.dumps(d)) + "\n" for d in docs), encoding="utf-8")
    return path


def test_reader_keeps_each_proposers_own_list(tmp_path):
    p = write(tmp_path / "combined_toy.jsonl", [line("a"), line("b", eagle=(3, 1, 1), gen=(1, 2, 3, 4, 5),
                                                                 ngram=(1, 2, 1, 1, 1))])
    recs = read_specbench(p)
    assert [r.id for r in recs] == ["a", "b"]
    assert [r.line for r in recs] == [1, 2]
    assert recs[0].prompt_len == 3
    assert recs[1].acc_len["eagle3"] == [3, 1, 1]
    assert recs[1].acc_len["ngram"] == [1, 2, 1, 1, 1]
    assert recs[1].output_len("eagle3") == 3 and recs[1].output_len("ngram") == 5
    assert recs[1].output_len("combined") == 3
    assert recs[0].lengths_agree and not recs[1].lengths_agree


def test_reader_reads_gzip(tmp_path):
    p = tmp_path / "x.jsonl.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write(json.dumps(line()) + "\n")
    assert read_specbench(p)[0].acc_len["eagle3"] == [2, 1, 3, 1]


BAD_LINES = [
    ("{not json", None),
    ("[1, 2]", None),
    (json.dumps({k: v for k, v in line().items() if k != "acc_ngram"}), "acc_ngram"),
    (json.dumps({**line(), "extra": 1}), None),
    (json.dumps({**line(), "id": ""}), "id"),
    (json.dumps({**line(), "id": None}), "id"),
    (json.dumps({**line(), "prompt_token_ids": []}), "prompt_token_ids"),
    (json.dumps({**line(), "prompt_token_ids": "1 2 3"}), "prompt_token_ids"),
    (json.dumps({**line(), "generated_token_ids": [1, -2]}), "generated_token_ids"),
    (json.dumps(line(eagle=(2, 0, 1, 1))), "acc_eagle.acc_len"),
    (json.dumps(line(ngram=(1, 1.5, 1, 1))), "acc_ngram.acc_len"),
    (json.dumps(line(ngram=(1, True, 1, 1))), "acc_ngram.acc_len"),
    (json.dumps(line(eagle=(2, None, 1, 1))), "acc_eagle.acc_len"),
    (json.dumps({**line(), "acc_eagle": [1, 2]}), "acc_eagle"),
    (json.dumps({**line(), "acc_eagle": {"acc_len": [1], "probs": [0.5]}}), "acc_eagle"),
    ("", None),
    # lines without `-`, true or false take the reader's one-pass check; each of these must still fail it
    (json.dumps({**line(), "prompt_token_ids": [1, 2**31]}), "prompt_token_ids"),
    (json.dumps({**line(), "generated_token_ids": [2**31 - 1, 2**31 - 1, 2**40]}), "generated_token_ids"),
    (json.dumps(line()).replace('"prompt_token_ids": [1, 2, 3]', '"prompt_token_ids": [1, 1e999, 3]'),
     "prompt_token_ids"),
    (json.dumps({**line(), "prompt_token_ids": [[1], 2]}), "prompt_token_ids"),
    (json.dumps({**line(), "generated_token_ids": [1, "2"]}), "generated_token_ids"),
    (json.dumps({**line(), "prompt_token_ids": [1, {"a": 2}]}), "prompt_token_ids"),
    (json.dumps(line(eagle=(2, 0, 1, 1))).replace("-", ""), "acc_eagle.acc_len"),
    (json.dumps({**line(), "id": "\ud800"}), "id"),
    (json.dumps({**line(), "id": 2**64}), "id"),
    (json.dumps({**line(), "id": "a-b"}).replace("[5, 6, 7, 8]", "[5, 6, 7, 8.0]"), "generated_token_ids"),
    (json.dumps(line()).replace("[1, 2, 3]", "[1, 02, 3]"), None),  # leading zeros are not JSON
    (json.dumps(line()).replace("[1, 2, 3]", "[00]"), None),
    (json.dumps(line()).replace("[1, 2, 3]", "[0, 2, 03]"), None),
    (json.dumps(line()).replace("[1, 2, 3]", "[1, , 3]"), None),
    (json.dumps(line()).replace("[1, 2, 3]", "[1 2, 3]"), None),
    (json.dumps(line()).replace("[1, 2, 3]", "[1,2 3]"), None),  # a comma and a space, but not ", "
    (json.dumps(line()).replace("[2, 1, 3, 1]", "[2, 1,3 1]"), None),
    (json.dumps(line()).replace("[2, 1, 3, 1]", "[2, 1, , 1]"), None),
    (json.dumps(line(ngram=(1, 1, 10, 1))).replace("10", "010"), None),
    (json.dumps(line(ngram=(1, 1, 1, 2**31))), "acc_ngram.acc_len"),
]


def test_sums_above_the_limit_with_every_value_inside_it_are_fine(tmp_path):
    big = 2**31 - 1
    recs = read_specbench(write(tmp_path / "big.jsonl", [line("a", prompt=(big, big), gen=(big, 0, 1, 2))]))
    assert recs[0].prompt_token_ids == [big, big] and recs[0].generated_token_ids == [big, 0, 1, 2]


@pytest.mark.parametrize("text,fld", BAD_LINES)
def test_bad_line_names_file_line_and_field(tmp_path, text, fld):
    p = write(tmp_path / "bad.jsonl", [line("ok"), text, line("later")])
    with pytest.raises(TraceFormatError) as e:
        read_specbench(p)
    assert e.value.path == str(p)
    assert e.value.line == 2
    assert e.value.field == fld
    assert str(p) in str(e.value) and "line 2" in str(e.value)


READ_MODES = [dict(token_ids=False), dict(token_ids=False, acc_lists=("eagle3",)), dict(acc_lists=("ngram",)),
              dict(token_ids=False, acc_lists=())]


@pytest.mark.parametrize("mode", READ_MODES, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()))
@pytest.mark.parametrize("text,fld", BAD_LINES)
def test_bad_line_is_refused_alike_without_token_ids(tmp_path, text, fld, mode):
    """The counted lists (token_ids=False, acc_lists) take another path through the text; it must refuse the
    same lines."""
    p = write(tmp_path / "bad.jsonl", [line("ok"), text, line("later")])
    with pytest.raises(TraceFormatError) as e:
        read_specbench(p, **mode)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 2, fld)


acc_lists_values = st.lists(st.one_of(st.integers(0, 12), st.integers(2**31 - 3, 2**31 + 3)), max_size=20)


@settings(max_examples=150, deadline=None)
@given(acc_lists_values, acc_lists_values, st.sampled_from([(", ", ": "), (",", ":"), (" , ", " : ")]),
       st.sampled_from([(), ("eagle3",), ("ngram",), ("eagle3", "ngram")]), st.booleans())
def test_reading_some_acc_lists_keeps_every_length_and_refuses_what_the_full_read_refuses(
        tmp_path_factory, eagle, ngram, separators, keep, token_ids):
    """acc_lists: the kept lists equal the full read's, every list's length is kept, and a line the full read
    refuses (a 0, a value beyond 32 bits, an empty list is fine) is refused with the same line and field."""
    tmp = tmp_path_factory.mktemp("t")
    p = tmp / "t.jsonl"
    p.write_text(json.dumps(line("x", eagle=eagle, ngram=ngram), separators=separators) + "\n", encoding="utf-8")
    try:
        (a,) = read_specbench(p)
    except TraceFormatError as e:
        with pytest.raises(TraceFormatError) as again:
            read_specbench(p, token_ids=token_ids, acc_lists=keep)
        assert (again.value.line, again.value.field) == (e.line, e.field)
        return
    (b,) = read_specbench(p, token_ids=token_ids, acc_lists=keep)
    assert b.acc_len == {name: a.acc_len[name] for name in keep}
    assert b.acc_lens == a.acc_lens == {"eagle3": len(eagle), "ngram": len(ngram)}
    assert (b.output_len("combined"), b.lengths_agree) == (a.output_len("combined"), a.lengths_agree)


def test_a_bundle_needs_every_acc_list(tmp_path):
    recs = read_specbench(write(tmp_path / "a.jsonl", [line("a")]), acc_lists=("eagle3",))
    with pytest.raises(ValueError, match="every acc_len list"):
        to_bundle(recs)


def test_acc_lists_must_name_proposers(tmp_path):
    with pytest.raises(ValueError, match="acc_lists"):
        read_specbench(write(tmp_path / "a.jsonl", [line()]), acc_lists=("medusa",))


token_lists = st.lists(st.one_of(st.integers(0, 20), st.integers(0, 2**31 - 1), st.integers(2**31 - 10, 2**31 + 10)),
                       max_size=30)


@settings(max_examples=150, deadline=None)
@given(token_lists, token_lists, st.sampled_from([(", ", ": "), (",", ":"), (" , ", " : ")]), st.text(max_size=8))
def test_reading_without_token_ids_keeps_the_lengths_and_refuses_what_the_full_read_refuses(
        tmp_path_factory, prompt, gen, separators, rid):
    """Lengths, ids and acc_len agree with the full read for any token lists and JSON spacing; a line the full
    read refuses (empty prompt, ids beyond 32 bits) is refused with the same field."""
    tmp = tmp_path_factory.mktemp("t")
    doc = line(rid or "x", prompt=prompt, gen=gen, eagle=[1] * 3, ngram=[2] * 3)
    p = tmp / "t.jsonl"
    p.write_text(json.dumps(doc, separators=separators) + "\n", encoding="utf-8")
    try:
        full = read_specbench(p)
    except TraceFormatError as e:
        with pytest.raises(TraceFormatError) as again:
            read_specbench(p, token_ids=False)
        assert (again.value.line, again.value.field) == (e.line, e.field)
        return
    (a,), (b,) = full, read_specbench(p, token_ids=False)
    assert (b.id, b.prompt_len, b.generated_len, b.acc_len) == (a.id, len(prompt), len(gen), a.acc_len)
    assert b.lengths_agree == a.lengths_agree
    assert b.prompt_token_ids in (None, prompt) and b.generated_token_ids in (None, gen)


def test_a_bundle_needs_the_token_ids(tmp_path):
    recs = read_specbench(write(tmp_path / "a.jsonl", [line("a", prompt=(5, 6), gen=(7, 8, 9, 10))]), token_ids=False)
    assert recs[0].prompt_token_ids is None and recs[0].prompt_len == 2
    with pytest.raises(ValueError, match="token ids"):
        to_bundle(recs)


def test_duplicate_id_names_both_lines(tmp_path):
    p = write(tmp_path / "dup.jsonl", [line("a"), line("b"), line("a")])
    with pytest.raises(TraceFormatError, match="first on line 1") as e:
        read_specbench(p)
    assert (e.value.line, e.value.field) == (3, "id")


def test_empty_missing_and_truncated_files(tmp_path):
    with pytest.raises(TraceFormatError, match="no requests"):
        read_specbench(write(tmp_path / "empty.jsonl", []))
    with pytest.raises(TraceFormatError, match="not found"):
        read_specbench(tmp_path / "nope.jsonl")
    blob = gzip.compress((json.dumps(line()) + "\n").encode() * 50)
    (tmp_path / "cut.jsonl.gz").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(TraceFormatError, match="truncated"):
        read_specbench(tmp_path / "cut.jsonl.gz")


def mismatched_file(tmp_path) -> Path:
    return write(tmp_path / "combined_mix.jsonl", [
        line("same"),
        line("short_eagle", eagle=(2, 1)),                                   # eagle 2, ngram 4, gen 4
        line("long_eagle", eagle=(1, 1, 1, 1, 5, 1)),                        # eagle 6
    ])


def test_mismatch_error_policy_names_line_and_list(tmp_path):
    p = mismatched_file(tmp_path)
    with pytest.raises(TraceFormatError, match="differ in length") as e:
        import_specbench(p, on_mismatch="error")
    assert (e.value.line, e.value.field) == (2, "acc_eagle.acc_len")


def test_mismatch_shortest_cuts_and_records(tmp_path):
    p = mismatched_file(tmp_path)
    bundle, report = import_specbench(p, on_mismatch="shortest")
    lens = {r.id: r.output_len for r in bundle.requests}
    assert lens == {"same": 4, "short_eagle": 2, "long_eagle": 4}
    assert report.mismatched_requests == 2
    # short_eagle cuts gen and ngram by 2 each; long_eagle cuts eagle by 2
    assert report.positions_cut == {"generated_token_ids": 2, "eagle3": 2, "ngram": 2}
    r = {r.id: r for r in bundle.requests}
    assert r["long_eagle"].drafters["eagle3"].acc_len.tolist() == [1, 1, 1, 1]
    assert r["short_eagle"].output_token_ids == [5, 6]
    assert bundle.meta.dataset == "mix"
    assert bundle.meta.source["mismatched_requests"] == 2 and bundle.meta.source["on_mismatch"] == "shortest"


def test_mismatch_skip_leaves_requests_out_and_records(tmp_path):
    bundle, report = import_specbench(mismatched_file(tmp_path), on_mismatch="skip", dataset="custom")
    assert [r.id for r in bundle.requests] == ["same"]
    assert report.skipped_ids == ["short_eagle", "long_eagle"]
    assert bundle.meta.source["skipped_requests"] == 2
    assert bundle.meta.dataset == "custom"


def test_skip_with_nothing_left_is_an_error(tmp_path):
    p = write(tmp_path / "all_bad.jsonl", [line("x", eagle=(1,))])
    with pytest.raises(TraceFormatError, match="no request left"):
        import_specbench(p, on_mismatch="skip")


def test_unknown_policy_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="on_mismatch"):
        to_bundle(read_specbench(mismatched_file(tmp_path)), on_mismatch="longest")


def test_bundle_round_trip_keeps_drafters_and_source(tmp_path):
    bundle, _ = import_specbench(mismatched_file(tmp_path), on_mismatch="shortest")
    save_bundle(bundle, tmp_path / "out")
    back = load_bundle(tmp_path / "out")
    assert back.meta.target == "llama3.1-8b"
    assert {n: (s.kind, s.cost_model) for n, s in back.meta.drafters.items()} == {
        "eagle3": ("eagle", "eagle3-llama3.1-8b-h100-specbench"), "ngram": ("ngram", "ngram")}
    doc = yaml.safe_load((tmp_path / "out" / "trace.yaml").read_text())
    assert doc["source"]["positions_cut"] == {"generated_token_ids": 2, "eagle3": 2, "ngram": 2}
    assert doc["source"]["file"] == "combined_mix.jsonl" and len(doc["source"]["sha256"]) == 64
    for a, b in zip(bundle.requests, back.requests):
        assert a.id == b.id and a.prompt_token_ids == b.prompt_token_ids
        for d in ("eagle3", "ngram"):
            assert np.array_equal(a.drafters[d].acc_len, b.drafters[d].acc_len)


def test_dataset_from_filename():
    assert dataset_from_filename("/x/combined_gsm8k.jsonl") == "gsm8k"
    assert dataset_from_filename("mine.jsonl.gz") == "mine"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draftsim")
    cmd_import.register(parser.add_subparsers(dest="command"))
    return parser


def test_cli_writes_bundle(tmp_path, capsys):
    args = _parser().parse_args(["import", "specbench", str(mismatched_file(tmp_path)), str(tmp_path / "b"),
                                 "--on-mismatch", "skip", "--compress"])
    assert args.func(args) == 0
    assert (tmp_path / "b" / "requests.jsonl.gz").is_file()
    assert len(load_bundle(tmp_path / "b").requests) == 1
    assert "mismatched 2" in capsys.readouterr().out


lengths = st.integers(min_value=1, max_value=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(lengths, lengths, lengths), min_size=1, max_size=8))
def test_policies_account_for_every_position(tmp_path_factory, rows):
    """shortest: every list cut to the shortest and the cut counted; skip: exactly the agreeing ones kept."""
    tmp = tmp_path_factory.mktemp("h")
    docs = [line(f"r{i}", gen=[7] * g, eagle=[1] * e, ngram=[2] * n) for i, (g, e, n) in enumerate(rows)]
    recs = read_specbench(write(tmp / "h.jsonl", docs))
    bundle, rep = to_bundle(recs, on_mismatch="shortest")
    assert [r.output_len for r in bundle.requests] == [min(row) for row in rows]
    assert rep.positions_cut["generated_token_ids"] == sum(g - min(g, e, n) for g, e, n in rows)
    assert rep.positions_cut["eagle3"] == sum(e - min(g, e, n) for g, e, n in rows)
    assert rep.positions_cut["ngram"] == sum(n - min(g, e, n) for g, e, n in rows)
    assert rep.mismatched_requests == sum(len(set(row)) > 1 for row in rows)
    agreeing = [f"r{i}" for i, row in enumerate(rows) if len(set(row)) == 1]
    if agreeing:
        kept, _ = to_bundle(recs, on_mismatch="skip")
        assert [r.id for r in kept.requests] == agreeing
    else:
        with pytest.raises(TraceFormatError):
            to_bundle(recs, on_mismatch="skip")


@pytest.mark.parametrize("name,n_requests", [("gsm8k", 300), ("instructcoder", 500)])
def test_reference_files_import(name, n_requests):
    path = SHARED / f"combined_{name}.jsonl"
    if not path.is_file():
        pytest.skip(f"reference traces not found at {path} (expected ../shared/reference-traces beside the repo)")
    raw = [json.loads(t) for t in path.read_text().splitlines()]
    expected_mismatch = sum(len({len(d["generated_token_ids"]), len(d["acc_eagle"]["acc_len"]),
                                 len(d["acc_ngram"]["acc_len"])}) > 1 for d in raw)
    recs = read_specbench(path)
    assert len(recs) == n_requests
    assert all(len(r.acc_len["ngram"]) == len(r.generated_token_ids) for r in recs)
    bundle, rep = to_bundle(recs, on_mismatch="shortest", dataset=name)
    assert rep.mismatched_requests == expected_mismatch > 0
    assert len(bundle.requests) == n_requests
    skipped, rep2 = to_bundle(recs, on_mismatch="skip", dataset=name)
    assert len(skipped.requests) == n_requests - expected_mismatch


def test_registered_in_draftsim_cli(tmp_path, capsys):
    from experiments.cli import main

    src = mismatched_file(tmp_path)
    assert main(["import", "specbench", str(src), str(tmp_path / "b"), "--on-mismatch", "shortest"]) == 0
    assert len(load_bundle(tmp_path / "b").requests) == 3
    assert main(["import", "specbench", str(src), str(tmp_path / "c")]) == 2  # mismatch under 'error'
    assert "line 2" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
