"""`traces:` parsed once into a typed source (traces/source.py): each kind, its dump, its seed, its errors."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from traces.pool import PoolSpec, make_pool_bundle
from traces.source import (AcceptanceSource, BundleRef, PoolSource, SpecbenchSource, SynthSource, load_source,
                           parse_source)

SYNTH = {"target": "t", "num_requests": 12,
         "drafters": {"d": {"kind": "eagle", "cost_model": "c"}},
         "categories": {"chat": {"weight": 1, "prompt": {"dist": "lognormal", "median": 200, "sigma": 0.5, "max": 800},
                                 "output": {"dist": "constant", "value": 40},
                                 "acceptance": {"d": {"model": "iid", "rate": 0.6}}}}}


def _same_bundle(a, b) -> bool:
    return [(r.id, r.prompt_len, r.output_len) for r in a.requests] == [
        (r.id, r.prompt_len, r.output_len) for r in b.requests] and all(
        np.array_equal(x.drafters[d].acc_len, y.drafters[d].acc_len)
        for x, y in zip(a.requests, b.requests) for d in x.drafters)


@pytest.mark.parametrize("doc, kind", [
    ("builtin:default", BundleRef),
    ({"pool": {"num_requests": 20, "output_len": [10, 20]}}, PoolSource),
    ({"pool": None}, PoolSource),
    ({"synthetic": SYNTH}, SynthSource),
    ({"specbench": {"file": "x.jsonl", "on_mismatch": "skip", "prompt_lookup": {"min_n": 2, "max_n": 5}}},
     SpecbenchSource),
    ({"acceptance": {"drafters": {"eagle3": {"mean_length": 2.5, "k": 3}}}}, AcceptanceSource),
])
def test_each_kind_parses_to_its_record_and_dumps_the_document_given(doc, kind):
    src = parse_source(doc)
    assert type(src) is kind
    text = json.dumps(doc, sort_keys=True)
    assert json.dumps(src.model_dump(mode="json"), sort_keys=True) == text  # `median: 200` stays 200, not 200.0:
    # config hashes and the sweep seeds derived from them do not move
    again = parse_source(src.model_dump(mode="json"))
    assert json.dumps(again.model_dump(mode="json"), sort_keys=True) == text and parse_source(src) is src
    assert json.dumps(pickle.loads(pickle.dumps(src)).model_dump(mode="json"), sort_keys=True) == text


def test_parsed_fields_are_typed():
    pool = parse_source({"pool": {"num_requests": 20, "output_len": [10, 20]}})
    assert pool.pool.num_requests == 20 and pool.pool.output_len == (10, 20) and pool.pool.strong == 0.8
    synth = parse_source({"synthetic": SYNTH})
    assert synth.synthetic.num_requests == 12 and synth.synthetic.categories["chat"].prompt.median == 200.0
    sb = parse_source({"specbench": {"file": "x.jsonl", "prompt_lookup": {"min_n": 2}}})
    assert (sb.specbench.on_mismatch, sb.specbench.prompt_lookup.min_n, sb.specbench.prompt_lookup.max_n) == (
        "error", 2, 4)
    acc = parse_source({"acceptance": {"drafters": {"eagle3": {"level": "mean_length", "mean_length": 2, "k": 3}}}})
    assert isinstance(acc.acceptance.base, BundleRef) and acc.acceptance.base.ref == "builtin:default"
    eagle = acc.acceptance.drafters["eagle3"]
    assert (eagle.level, eagle.mean_length, eagle.k, eagle.extrapolate, eagle.file) == ("mean_length", 2.0, 3,
                                                                                        "geometric", None)


def test_a_pool_is_drawn_from_the_runs_seed_unless_it_gives_its_own():
    free = parse_source({"pool": {"num_requests": 6, "output_len": [8, 12]}})
    own = parse_source({"pool": {"num_requests": 6, "output_len": [8, 12], "seed": 3}})
    direct = make_pool_bundle(PoolSpec(num_requests=6, output_len=(8, 12), seed=11))
    assert free.spec(11).seed == 11 and _same_bundle(free.bundle(11), direct)
    assert own.spec(11).seed == 3
    assert _same_bundle(own.bundle(11), make_pool_bundle(PoolSpec(num_requests=6, output_len=(8, 12), seed=3)))
    # a document and its parsed source load the same bundle
    assert _same_bundle(load_source({"pool": {"num_requests": 6, "output_len": [8, 12]}}, 11), direct)


def test_a_synthetic_source_draws_as_make_synthetic_bundle_does():
    from traces.synthetic.spec import make_synthetic_bundle, parse_synth_spec

    a = parse_source({"synthetic": SYNTH}).bundle(5)
    b = make_synthetic_bundle(parse_synth_spec(SYNTH, "x"), seed=5)
    assert len(a.requests) == 12 and _same_bundle(a, b)


@pytest.mark.parametrize("doc, match", [
    ("no/such/bundle", r"^traces: 'no/such/bundle' is not a trace bundle folder"),
    ({"pool": {"strong": 2}}, r"^traces\.pool: strong must be in \(0, 1\)"),
    ({"pool": {"stron": 0.5}}, r"^traces\.pool: unknown key\(s\) \['stron'\]"),
    ({"pools": {}}, r"^traces: a generated source is one of .* got keys \['pools'\]"),
    ({"pool": {}, "synthetic": {}}, r"got keys \['pool', 'synthetic'\]"),
    (5, r"^traces: expected a bundle folder, builtin:NAME or a generated source mapping"),
    ({"specbench": {"file": "x", "on_mismatch": "zz"}}, r"^traces\.specbench\.on_mismatch: expected one of"),
    ({"specbench": {"fil": "x"}}, r"^traces\.specbench\.fil"),
    ({"synthetic": {"target": "x"}}, r"^traces\.synthetic\.drafters: required key is missing"),
    ({"acceptance": {"base": {"pool": {"weak": 7}}, "drafters": {"d": {}}}}, r"^traces\.acceptance\.base\.pool: weak"),
    ({"acceptance": {"drafters": {"d": {"level": "mean"}}}}, r"^traces\.acceptance\.drafters\.d\.level: expected "
                                                              r"'mean_length', 'per_position' or 'per_request'"),
    ({"acceptance": {"drafters": {"d": {"mean_length": "2"}}}}, r"^traces\.acceptance\.drafters\.d\.mean_length: "),
    ({"acceptance": {"drafters": {"d": {"k": 2.0, "mean_length": 2}}}}, r"^traces\.acceptance\.drafters\.d\.k: "),
    ({"acceptance": {"drafters": {"d": {"per_position": [0.5, "x"]}}}},
     r"^traces\.acceptance\.drafters\.d\.per_position\.1: "),
    ({"acceptance": {"drafters": {"d": {"extrapolate": "linear"}}}}, r"^traces\.acceptance\.drafters\.d\.extrapolate: "
                                                                    r"expected 'geometric' or 'none'"),
    ({"acceptance": {"drafters": {"d": {"mean_lenght": 2}}}}, r"^traces\.acceptance\.drafters\.d\.mean_lenght: unknown key"),
    ({"acceptance": {"drafters": {"d": 2.5}}}, r"^traces\.acceptance\.drafters\.d: "),
])
def test_errors_name_the_key(doc, match):
    with pytest.raises(ValueError, match=match):
        parse_source(doc, "traces")


def test_a_missing_specbench_file_is_refused_when_loaded_not_when_parsed(tmp_path):
    src = parse_source({"specbench": {"file": str(tmp_path / "none.jsonl")}})
    with pytest.raises(ValueError, match=r"traces\.specbench\.file: .*none\.jsonl not found"):
        src.bundle(0)
