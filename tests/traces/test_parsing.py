"""traces.parsing: the shared rules of every input file, and a property: arbitrary text never raises anything
but TraceFormatError."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.errors import TraceFormatError
from traces.parsing import MAX_NESTING, iter_jsonl, load_yaml_file, parse_json, parse_yaml


@pytest.mark.parametrize("text, match", [
    ("a: 1\nb: 2\na: 3\n", r"line 3: duplicate key 'a' \(first on line 1\)"),
    ("x:\n  y: 1\n  y: 2\n", r"line 3: duplicate key 'y'"),
    ("a: .nan\n", r"field 'a': expected a finite number"),
    ("a: [1, -.inf]\n", r"field 'a\[1\]': expected a finite number"),
    ("a: " + "[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5), "nested too deeply"),
    ("a: !!python/object/apply:os.system ['true']\n", "line 1: not valid YAML"),
    ("a: [1\n", "not valid YAML"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh")), "too large"),
])
def test_yaml_rules(text, match):
    with pytest.raises(TraceFormatError, match=match):
        parse_yaml(text, "f.yaml")


def test_yaml_merge_key_may_be_overridden():
    assert parse_yaml("base: &b {a: 1, c: 2}\nx:\n  <<: *b\n  a: 3\n", "f.yaml")["x"] == {"a": 3, "c": 2}


@pytest.mark.parametrize("text, match", [
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('{"a": NaN}', "NaN is not a finite number"),
    ('{"a": -Infinity}', "-Infinity is not a finite number"),
    ('[1e999]', "expected a finite number, got inf"),
    ("[" + "9" * 40 + "]", "fits in 64 bits"),
    ("[" + "9" * 5000 + "]", "not valid JSON"),
    ("[" * 100_000, "nested too deeply"),
    ('{"a": ' + "[" * 100 + "]" * 100 + "}", "nested too deeply"),
    ("{", "not valid JSON"),
])
def test_json_rules(text, match):
    with pytest.raises(TraceFormatError, match=f"r.jsonl, line 7(, field '[^']*')?: .*{match}"):
        parse_json(text, "r.jsonl", 7)


def test_non_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(TraceFormatError, match=r"t.yaml, line 2: not UTF-8 text \(byte 0xe9"):
        load_yaml_file(p)
    j = tmp_path / "r.jsonl"
    j.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(TraceFormatError, match=r"r.jsonl, line 2: not UTF-8"):
        list(iter_jsonl(j))


def test_corrupt_and_truncated_gzip_name_the_file(tmp_path):
    import gzip

    data = gzip.compress(b'{"a": 1}\n' * 2000, mtime=0)
    p = tmp_path / "r.jsonl.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="r.jsonl.gz.*truncated or corrupt"):
        list(iter_jsonl(p))
    for offset in (10, 11, len(data) // 2, len(data) - 6):  # deflate header, body, CRC trailer
        bad = bytearray(data)
        bad[offset] ^= 0xFF
        p.write_bytes(bytes(bad))
        with pytest.raises(TraceFormatError, match=r"r.jsonl.gz(, line \d+)?: (not valid JSON|not UTF-8|cannot be read)"):
            list(iter_jsonl(p))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(max_size=200) | st.sampled_from(["a: 1\na: 2", "[[[[", "{a: .inf}", "&a [*a]", "!!binary x"]))
def test_any_text_is_data_or_a_format_error(text):
    for parse in (lambda: parse_yaml(text, "f.yaml"), lambda: parse_json(text, "f.json", 1)):
        try:
            parse()
        except TraceFormatError as e:
            assert str(e).startswith("f.")


bmp_text = st.text(st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",)), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | bmp_text, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(bmp_text, inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(bmp_text, json_values, max_size=6), st.sampled_from([None, 2]))
def test_a_document_in_json_syntax_reads_as_pyyaml_reads_it(doc, indent):
    """parse_yaml reads JSON-syntax documents with the JSON parser (no PyYAML): the values must be PyYAML's.
    (Text in the basic plane: PyYAML reads a JSON surrogate-pair escape as two lone surrogates.)"""
    import json

    import yaml

    from traces.parsing import _loader

    text = json.dumps(doc, indent=indent)
    assert parse_yaml(text, "x.yaml") == yaml.load(text, Loader=_loader()) == doc


def test_json_like_yaml_flow_style_still_goes_to_pyyaml():
    assert parse_yaml("{a: 1, b: [x, y]}", "x.yaml") == {"a": 1, "b": ["x", "y"]}
    with pytest.raises(TraceFormatError, match="duplicate key"):
        parse_yaml('{"a": 1, "a": 2}', "x.yaml")


def test_the_specbench_profiles_load_without_pyyaml():
    """`draftsim specbench`'s two built-in profiles are written in JSON syntax, so its start-up skips PyYAML."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nfrom simulator.reproductions.specbench import CompatCosts\nc = CompatCosts.builtin()\n"
            "assert c.target.coefficients['const'] > 0\nprint('yaml' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
