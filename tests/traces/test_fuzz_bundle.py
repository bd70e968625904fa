"""Seeded fuzzing of trace bundles: every mutated bundle is rejected with a TraceFormatError naming its file,
or accepted as a consistent bundle; none raises another exception, hangs, or is accepted when built invalid.

Two families of mutations of a small valid bundle (plain and gzip):
- built invalid (must be rejected): a bad value at a known field (NaN, inf, 1e999, 2**64, out of range,
  wrong type, fractional where an integer belongs, deep nesting), duplicate JSON/YAML keys, non-UTF-8 text,
  unknown keys, YAML tags, both requests.jsonl and requests.jsonl.gz present;
- blind (either outcome, but an accepted bundle must be consistent): byte flips, truncation, gzip corruption.
Accepted blind mutations are also simulated (AR, SD, PSD) under a time limit.
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.fuzz_support import FuzzTally
from traces.bundle import (BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, load_bundle,
                           save_bundle)
from traces.errors import TraceFormatError

SEED = 20261201
RAW = "@@RAW:"  # a string value "@@RAW:text" is written into the JSON as the bare token `text`
BAD_NUMBERS = [f"{RAW}NaN", f"{RAW}Infinity", f"{RAW}-Infinity", f"{RAW}1e999", f"{RAW}{2**64}"]
DEEP = json.loads("[" * 100 + "1" + "]" * 100)  # deeper than traces.parsing.MAX_NESTING
WRONG_TYPES = ["12", [12], {"a": 1}, True, DEEP]
# field -> values that must be rejected there (besides BAD_NUMBERS and WRONG_TYPES)
REQUEST_BAD = {
    ("prompt_len",): [0, -1, 1.5, 2.0, 2**24 + 1, 2**40],
    ("output_len",): [0, -1, 1.5, 7.0, "OTHER_LEN"],
    ("arrival_time",): [-1, -1e-9],
    ("category",): [5, 1.5],
    ("id",): ["", None, 1.5, "DUPLICATE"],
    ("drafters", "eagle", "acc_len", "I"): [0, -1, 1.5, None, 2**31],
    ("drafters", "eagle", "acc_len"): [[], "x", None, "SHORT"],
    ("drafters", "eagle", "tv", "I"): [-0.1, 1.5, None],
    ("drafters", "ngram", "proposal_len", "I"): [-1, 1.5, None],
    ("drafters", "ngram", "acc_len", "I"): [0, 2.5],
    ("prompt_token_ids", "I"): [1.5, -2**40, None],
}
META_BAD = {
    "target": ["", 5, [], None, {"a": 1}],
    "dataset": [["a", "b"], 5, {"a": 1}, None, True],
    "temperature": [-1, 11, "x", [], None, ".nan", ".inf"],
    "schema_version": [2, 1.5, "1", True],
    "drafters": [[], {}, {"eagle": []}, {"eagle": {"kind": "unknown"}}, {"eagle": {"kind": 5}},
                 {"eagle": {"kind": "eagle", "cost_model": ["x"]}}],
    "source": [[1], "x", 5],
    "tool_version": [[1], {"a": 1}],
}


def _small_bundle() -> TraceBundle:
    rng = np.random.default_rng(0)
    meta = BundleMeta(target="tgt", drafters={"eagle": DrafterSpec("eagle", "eagle", "eagle"),
                                              "ngram": DrafterSpec("ngram", "ngram", "ngram")},
                      dataset="fuzz", source={"note": "fuzz base"})
    reqs = []
    for i in range(4):
        n = 6 + i
        reqs.append(RequestTrace(
            id=f"r{i}", prompt_len=5 + i, output_len=n, category="chat" if i % 2 else "code",
            arrival_time=0.1 * i,
            drafters={"eagle": DrafterTrace(rng.integers(1, 5, n).astype(np.int32),
                                            tv=rng.random(n).astype(np.float32)),
                      "ngram": DrafterTrace(rng.integers(1, 4, n).astype(np.int32),
                                            proposal_len=rng.integers(0, 4, n).astype(np.int32))},
            prompt_token_ids=list(range(5 + i)) if i == 0 else None))
    return TraceBundle(meta, reqs)


def _dump_line(doc) -> str:
    text = json.dumps(doc, separators=(",", ":"))
    while f'"{RAW}' in text:
        start = text.index(f'"{RAW}')
        end = text.index('"', start + 1)
        text = text[:start] + text[start + 1 + len(RAW):end] + text[end + 1:]
    return text


def _set_path(doc, path, value, rng):
    node = doc
    for key in path[:-1]:
        node = node[rng.randrange(len(node))] if key == "I" else node[key]
    last = path[-1]
    if last == "I":
        node[rng.randrange(len(node))] = value
    else:
        node[last] = value


def _write_requests(folder: Path, lines: list[str], gz: bool) -> None:
    for name in ("requests.jsonl", "requests.jsonl.gz"):
        (folder / name).unlink(missing_ok=True)
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
    if gz:
        (folder / "requests.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
    else:
        (folder / "requests.jsonl").write_bytes(data)


def _consistent(bundle: TraceBundle) -> None:
    assert bundle.requests, "no requests"
    bundle.validate("accepted")
    for r in bundle.requests:
        assert 1 <= r.prompt_len <= 1 << 24 and 1 <= r.output_len <= 1 << 24
        for t in r.drafters.values():
            assert t.acc_len.shape == (r.output_len,) and t.acc_len.min() >= 1
            if t.tv is not None:
                assert np.isfinite(t.tv).all() and ((t.tv >= 0) & (t.tv <= 1)).all()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, list[dict], str]:
    folder = tmp_path_factory.mktemp("fuzzbase") / "bundle"
    save_bundle(_small_bundle(), folder)
    lines = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    return folder, lines, (folder / "trace.yaml").read_text()


def _names_file(tmp: Path):
    def check(e: BaseException) -> str | None:
        return None if str(tmp) in str(e) else "message does not name the bundle's file or folder"
    return check


def test_fuzz_bundles_built_invalid_are_rejected(base, tmp_path):
    folder, lines, meta_text = base
    rng = random.Random(SEED)
    tally = FuzzTally("bundles built invalid")
    case_dir = tmp_path / "b"

    def fresh(gz: bool) -> Path:
        shutil.rmtree(case_dir, ignore_errors=True)
        case_dir.mkdir()
        (case_dir / "trace.yaml").write_text(meta_text)
        _write_requests(case_dir, [_dump_line(x) for x in lines], gz)
        return case_dir

    def run(label, gz):
        tally.run(label + (" gz" if gz else ""), lambda: load_bundle(case_dir), clean=(TraceFormatError,),
                  must_reject=True, cpu_s=5, check_message=_names_file(case_dir))

    for gz in (False, True):
        for path, values in REQUEST_BAD.items():
            for value in [*values, *BAD_NUMBERS, *WRONG_TYPES]:
                if path == ("id",) and value in ("12", True) or path == ("category",) and value == "12":
                    continue  # "12" is a fine id or category; True is not but is covered by other paths
                fresh(gz)
                docs = json.loads(json.dumps(lines))
                i = rng.choice([j for j, d in enumerate(docs) if path[0] in d])
                if value == "OTHER_LEN":
                    value = docs[i]["output_len"] + 1
                elif value == "DUPLICATE":
                    value = docs[(i + 1) % len(docs)]["id"]
                elif value == "SHORT":
                    value = docs[i]["drafters"]["eagle"]["acc_len"][:-1]
                _set_path(docs[i], path, value, rng)
                _write_requests(case_dir, [_dump_line(d) for d in docs], gz)
                run(f"requests line {i + 1} {'.'.join(path)} = {str(value)[:40]}", gz)
        # structural: unknown keys, missing drafter, undeclared drafter, duplicate JSON key, non-UTF-8, blank line
        structural = {
            "unknown top key": lambda d: d.update(extra_key=1),
            "unknown trace key": lambda d: d["drafters"]["eagle"].update(acc=[1]),
            "missing drafter": lambda d: d["drafters"].pop("ngram"),
            "undeclared drafter": lambda d: d["drafters"].update(other={"acc_len": d["drafters"]["eagle"]["acc_len"]}),
            "missing acc_len": lambda d: d["drafters"]["eagle"].pop("acc_len"),
            "missing id": lambda d: d.pop("id"),
        }
        for label, mutate in structural.items():
            fresh(gz)
            docs = json.loads(json.dumps(lines))
            mutate(docs[rng.randrange(len(docs))])
            _write_requests(case_dir, [_dump_line(d) for d in docs], gz)
            run(label, gz)
        texts = [_dump_line(x) for x in lines]
        for label, change in {
            "duplicate JSON key": lambda t: t.replace('{"id":', '{"prompt_len":3,"id":', 1).replace(
                '"prompt_len":', '"prompt_len":4,"prompt_len":', 1),
            "duplicate JSON key (id)": lambda t: t.replace('{"id":', '{"id":"dup","id":', 1),
            "non-UTF-8 byte": lambda t: t.replace('"tgt"', '"t\udcfft"').replace('"r', '"\udcffr', 1),
            "blank line": lambda t: t + "\n",
            "not an object": lambda t: "[" + t + "]",
            "deep nesting": lambda t: t[:-1] + ',"category":' + "[" * 5000 + "]" * 5000 + "}",
            "huge integer": lambda t: t.replace('"prompt_len":', '"prompt_len":' + "9" * 5000 + ',"x":', 1),
        }.items():
            fresh(gz)
            i = rng.randrange(len(texts))
            mutated = list(texts)
            mutated[i] = change(mutated[i])
            _write_requests(case_dir, mutated, gz)
            run(f"{label} on line {i + 1}", gz)
    # both requests files present
    fresh(False)
    shutil.copy(folder / "requests.jsonl", case_dir / "requests.jsonl")
    (case_dir / "requests.jsonl.gz").write_bytes(gzip.compress((folder / "requests.jsonl").read_bytes()))
    run("requests.jsonl and requests.jsonl.gz", False)
    # trace.yaml
    import yaml

    meta = yaml.safe_load(meta_text)
    for key, values in META_BAD.items():
        for value in [*values, *WRONG_TYPES[3:]]:
            if key in ("source",) and isinstance(value, dict):
                continue
            fresh(False)
            doc = json.loads(json.dumps(meta))
            doc[key] = value
            text = yaml.safe_dump(doc, sort_keys=False)
            if isinstance(value, str) and value.startswith("."):
                text = text.replace(f"'{value}'", value)
            (case_dir / "trace.yaml").write_text(text)
            run(f"trace.yaml {key} = {str(value)[:40]}", False)
    for label, text in {
        "duplicate YAML key": meta_text + "target: other\n",
        "duplicate nested YAML key": meta_text.replace("  eagle:\n", "  eagle:\n    kind: eagle\n", 1),
        "YAML tag": meta_text + "extra: !!python/object/apply:os.system ['true']\n",
        "unknown key": meta_text + "targets: x\n",
        "deep YAML": meta_text + "extra: " + "[" * 3000 + "]" * 3000 + "\n",
        "YAML alias bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh")) + meta_text,
        "not a mapping": "- " + meta_text.replace("\n", "\n  "),
    }.items():
        fresh(False)
        (case_dir / "trace.yaml").write_text(text)
        run(label, False)
    fresh(False)
    (case_dir / "trace.yaml").write_bytes(meta_text.replace("fuzz", "f\xe9zz").encode("latin-1"))
    run("trace.yaml in Latin-1", False)
    tally.assert_clean(min_cases=300)


def test_fuzz_bundles_blind_mutations(base, tmp_path):
    """Byte flips, truncation and gzip corruption: a clean error naming the file, or a consistent bundle."""
    from experiments.run import run_experiment

    folder, lines, meta_text = base
    rng = random.Random(SEED + 1)
    tally = FuzzTally("bundles mutated blindly")
    sim = FuzzTally("simulations of accepted mutated bundles")
    plain = (folder / "requests.jsonl").read_bytes()
    gz = gzip.compress(plain, mtime=0)
    targets = {"trace.yaml": meta_text.encode(), "requests.jsonl": plain, "requests.jsonl.gz": gz}
    simulated = 0
    for case in range(240):
        name = rng.choice(list(targets))
        data = bytearray(targets[name])
        how = rng.choice(["flip", "flip", "truncate", "splice", "gz-trailer"])
        if how == "flip":
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif how == "truncate":
            data = data[:rng.randrange(len(data))]
        elif how == "splice":
            a, b = sorted(rng.randrange(len(data)) for _ in range(2))
            data = data[:a] + data[b:] + data[a:b]
        elif name.endswith(".gz"):
            data[-rng.randint(1, 8)] ^= 0xFF  # CRC or length trailer
        else:
            data += bytes([rng.randrange(256) for _ in range(8)])
        case_dir = tmp_path / f"c{case}"
        case_dir.mkdir()
        for other, content in (("trace.yaml", targets["trace.yaml"]),):
            (case_dir / other).write_bytes(content)
        req_name = name if name != "trace.yaml" else rng.choice(["requests.jsonl", "requests.jsonl.gz"])
        (case_dir / req_name).write_bytes(targets[req_name])
        (case_dir / name).write_bytes(bytes(data))
        outcome = tally.run(f"{how} {name} (case {case})", lambda: load_bundle(case_dir),
                            clean=(TraceFormatError,), must_reject=False, cpu_s=5,
                            check_accepted=_consistent, check_message=_names_file(case_dir))
        if outcome == "accepted" and simulated < 12:
            simulated += 1
            cfg = _tiny_experiment(str(case_dir))
            sim.run(f"simulate {how} {name} (case {case})", lambda: run_experiment(cfg), clean=(ValueError,),
                    must_reject=False, cpu_s=20)
        shutil.rmtree(case_dir)
    tally.assert_clean(min_cases=240)
    print(sim.report())
    assert not any(sim.counts[k] for k in ("traceback", "hang")), sim.report()


def _tiny_experiment(traces: str) -> dict:
    return {
        "name": "fuzz", "traces": traces,
        "workload": {"num_requests": 6, "arrival": {"kind": "poisson", "rate": 50.0},
                     "sample": {"with_replacement": True}},
        "server": {"target_profile": "llama3.1-8b-h100-specbench", "kv_capacity_tokens": 4096, "max_num_seqs": 4},
        "drafters": {"eagle": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"},
                     "ngram": {"kind": "fraction_of_verify", "fraction": 0.01}},
        "runs": [{"name": "AR", "mode": "ar"},
                 {"name": "sd", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle", "k": 3}},
                 {"name": "psd", "mode": "psd", "policy": {"name": "fixed", "drafter": "ngram", "k": 2}}],
    }
