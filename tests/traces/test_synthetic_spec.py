"""Synthetic specs: validation with named keys, YAML round trip, seeded bundles, fitting from bundles."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from tests.traces.synth_helpers import bundle_from
from traces.errors import TraceFormatError
from traces.synthetic import (IidAcceptance, PositionalAcceptance, fit_synth_spec, load_synth_spec,
                              make_synthetic_bundle, parse_synth_spec, spec_to_yaml, split_by_category)

DOC = {
    "target": "t", "num_requests": 400,
    "drafters": {"e": {"kind": "eagle", "cost_model": "c1"}, "n": {"kind": "ngram", "cost_model": "c2"}},
    "categories": {
        "a": {"weight": 3, "prompt": {"dist": "constant", "value": 10}, "output": {"dist": "constant", "value": 50},
              "acceptance": {"e": {"model": "iid", "rate": 0.7},
                             "n": {"model": "bursty", "rate_off": 0.0, "rate_on": 0.9, "stay_off": 0.9,
                                   "stay_on": 0.9, "max_proposal": 30}}},
        "b": {"weight": 1, "prompt": {"dist": "uniform", "low": 5, "high": 9},
              "output": {"dist": "lognormal", "median": 40, "sigma": 0.3, "max": 100},
              "acceptance": {"e": {"model": "positional", "rates": [0.5, 0.4]},
                             "n": {"model": "iid", "rate": 0.1}}},
    },
}


def test_make_bundle_is_seeded_and_follows_the_spec():
    spec = parse_synth_spec(DOC, "<doc>")
    b1 = make_synthetic_bundle(spec, seed=1, command="draftsim traces synth ...")
    b2 = make_synthetic_bundle(spec, seed=1)
    assert [r.drafters["e"].acc_len.tolist() for r in b1.requests] == \
           [r.drafters["e"].acc_len.tolist() for r in b2.requests]
    cats = [r.category for r in b1.requests]
    assert cats.count("a") / len(cats) == pytest.approx(0.75, abs=0.06)
    for r in b1.requests:
        if r.category == "a":
            assert (r.prompt_len, r.output_len) == (10, 50)
            assert r.drafters["n"].proposal_len is not None
        else:
            assert 5 <= r.prompt_len <= 9 and r.output_len <= 100
            assert r.drafters["n"].proposal_len is None
            assert r.drafters["e"].acc_len.max() <= 32
    assert b1.meta.source["command"] == "draftsim traces synth ..."
    assert b1.meta.source["seed"] == 1 and b1.meta.drafters["n"].kind == "ngram"


def test_yaml_round_trip(tmp_path):
    spec = parse_synth_spec(DOC, "<doc>")
    p = tmp_path / "s.yaml"
    p.write_text(spec_to_yaml(spec), encoding="utf-8")
    assert load_synth_spec(str(p)) == spec


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(surprise=1), "surprise"),
    (lambda d: d["categories"]["a"]["acceptance"]["e"].update(rate=2), "categories.a.acceptance.e.rate"),  # the keys written, not the union tag
    (lambda d: d["categories"]["a"]["acceptance"].pop("n"), "categories"),
    (lambda d: d["categories"]["b"]["output"].update(dist="zipf"), "categories.b.output"),
    (lambda d: d["categories"]["a"].update(weight=0), "categories.a.weight"),
])
def test_bad_spec_names_key(tmp_path, mutate, field):
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    mutate(doc)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(TraceFormatError) as e:
        load_synth_spec(str(p))
    assert e.value.path == str(p)
    assert e.value.field is not None and e.value.field.startswith(field)


def test_bad_yaml_and_missing_file(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("target: [", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="YAML"):
        load_synth_spec(str(p))
    with pytest.raises(TraceFormatError, match="cannot be read"):
        load_synth_spec(str(tmp_path / "nope.yaml"))


def test_fit_spec_recovers_generators_per_category():
    a = bundle_from(IidAcceptance(rate=0.8), n=100, length=200, seed=1)
    b = bundle_from(IidAcceptance(rate=0.3), n=100, length=100, seed=2)
    spec = fit_synth_spec({"hi": a, "lo": b}, models={"d": "iid"})
    assert spec.categories["hi"].acceptance["d"].rate == pytest.approx(0.8, abs=0.02)
    assert spec.categories["lo"].acceptance["d"].rate == pytest.approx(0.3, abs=0.02)
    assert spec.categories["hi"].weight == 100 and spec.num_requests == 200
    auto = fit_synth_spec({"hi": a})
    assert isinstance(auto.categories["hi"].acceptance["d"], PositionalAcceptance)
    with pytest.raises(ValueError, match="unknown acceptance model"):
        fit_synth_spec({"hi": a}, models={"d": "magic"})


def test_split_by_category():
    b = make_synthetic_bundle(parse_synth_spec(DOC, "<doc>"), seed=0, num_requests=50)
    parts = split_by_category(b)
    assert set(parts) == {"a", "b"}
    assert sum(len(p.requests) for p in parts.values()) == 50


def test_model_names_are_the_models_discriminators():
    from traces.synthetic import MODEL_NAMES, MODELS

    assert tuple(MODELS) == MODEL_NAMES
    assert all(cls.model_fields["model"].default == name for name, cls in MODELS.items())


def test_importing_the_package_loads_no_generator_until_one_is_used():
    import json
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import sys, json, traces.synthetic as s\nbefore = sorted(sys.modules)\ns.IidAcceptance\n"
             "print(json.dumps([before, sorted(sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, check=True)
    before, after = (set(x) for x in json.loads(out.stdout))
    assert not {"pydantic", "scipy", "traces.synthetic.iid"} & before
    assert "traces.synthetic.iid" in after and "scipy" not in after  # scipy only when a model is fitted


def test_synth_request_ids_are_zero_padded_in_order_and_keep_a_prefix_literal():
    from traces.synthetic.spec import synth_request_ids

    assert synth_request_ids(3) == ["syn-000000", "syn-000001", "syn-000002"]
    assert synth_request_ids(2, "a{b}") == ["a{b}-000000", "a{b}-000001"]
    ids = synth_request_ids(1_234_567)  # 7 digits: wider than the default 6
    assert ids[0] == "syn-0000000" and ids[-1] == "syn-1234566" and len(set(ids)) == len(ids)


def test_draw_shapes_gives_each_request_its_own_categorys_lengths():
    from traces.lengths import ConstantLengths
    from traces.synthetic.spec import CategoryLengths, draw_shapes

    cats = {c: CategoryLengths(w, ConstantLengths(value=p), ConstantLengths(value=o))
            for c, w, p, o in (("chat", 1.0, 11, 21), ("code", 2.0, 12, 22), ("math", 0.5, 13, 23))}
    names, prompt, output = draw_shapes(cats, 5_000, np.random.default_rng(3))
    assert set(names) == set(cats)
    want_p = np.array([cats[c].prompt.value for c in names])
    want_o = np.array([cats[c].output.value for c in names])
    assert np.array_equal(prompt, want_p) and np.array_equal(output, want_o)
    again = draw_shapes(cats, 5_000, np.random.default_rng(3))
    assert again[0] == names and np.array_equal(again[1], prompt)
