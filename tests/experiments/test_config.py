"""Experiment config validation: every bad key is named with its file."""
from __future__ import annotations

import pytest
import yaml

from experiments.config import ConfigError, apply_overrides, builtin_configs, load_config, override_path


def _doc(**extra):
    doc = yaml.safe_load(builtin_configs()["default"].read_text())
    doc.update(extra)
    return doc


def _write(tmp_path, doc):
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_builtin_default_config_validates():
    cfg = load_config("default")
    assert cfg.baseline_run == "AR"
    assert [r.mode for r in cfg.runs].count("sd") == 6


def test_unknown_top_level_key_names_file_and_key(tmp_path):
    p = _write(tmp_path, _doc(worklaod={}))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and "worklaod: unknown key" in str(e.value)


def test_wrong_type_and_range_name_the_nested_key(tmp_path):
    doc = _doc()
    doc["server"]["max_num_seqs"] = 0
    doc["runs"][1]["mode"] = "turbo"
    p = _write(tmp_path, doc)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "server.max_num_seqs" in msg and "runs.1.mode" in msg


def test_sd_run_without_policy_is_refused(tmp_path):
    doc = _doc()
    doc["runs"].append({"name": "bad", "mode": "sd"})
    with pytest.raises(ConfigError, match="needs a policy"):
        load_config(_write(tmp_path, doc))


def test_duplicate_run_names_and_unknown_baseline_are_refused():
    doc = _doc()
    doc["runs"].append(dict(doc["runs"][0]))
    with pytest.raises(ConfigError, match="repeated"):
        load_config(doc)
    with pytest.raises(ConfigError, match="baseline"):
        load_config(_doc(baseline="nope"))


def test_set_overrides_nested_keys_and_list_items_and_seed():
    cfg = load_config("default", ["workload.arrival.rate=12.5", "runs.1.policy.k=4", "server.scheduler=draftsim",
                                  "server.chunked_prefill=true"], seed=9)
    assert cfg.workload.arrival.rate == 12.5
    assert cfg.runs[1].policy.k == 4
    # draftsim's rules leave chunked prefill off unless set: the override set it
    assert cfg.server.scheduler == "draftsim" and cfg.server.chunked_prefill is True and cfg.seed == 9


def test_set_reaches_keys_with_dots_in_their_names():
    """A drafter named qwen3-0.6b is set by its name; elsewhere a key splits at its dots; the longest key held wins."""
    cfg = load_config("psd_vs_sd", ["drafters.qwen3-0.6b.profile.overlap=op", "server.target_profile.overlap=op"])
    dumped = cfg.model_dump(mode="json")
    assert dumped["drafters"]["qwen3-0.6b"]["profile"]["overlap"] == "op"
    assert dumped["server"]["target_profile"]["overlap"] == "op"
    assert "overlap" not in dumped["drafters"]["qwen3-1.7b"]["profile"]
    doc = {"a": {"b": 1}, "a.b": {"c": 2}, "runs": [{"x.y": 3}]}
    out = apply_overrides(doc, ["a.b.c=5", "runs.0.x.y=4", "a.new.key=6"])
    assert out["a.b"] == {"c": 5} and out["a"] == {"b": 1, "new": {"key": 6}} and out["runs"] == [{"x.y": 4}]
    assert override_path(doc, "drafters.qwen3-0.6b") == ("drafters", "qwen3-0", "6b")  # no such mapping: split
    assert override_path({"drafters": {"qwen3-0.6b": {}}}, "drafters.qwen3-0.6b.k") == ("drafters", "qwen3-0.6b", "k")


def test_bad_set_expressions_are_clear():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides({}, ["novalue"])
    with pytest.raises(ConfigError, match="out of range"):
        apply_overrides({"runs": [1]}, ["runs.5.k=1"])


def test_missing_config_file_is_clear(tmp_path):
    with pytest.raises(ConfigError, match="no such config"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name", sorted(builtin_configs()))
def test_every_builtin_config_validates(name):
    from experiments.config import read_config_doc

    doc, where = read_config_doc(name)
    if doc.get("kind") == "plan":
        from experiments.plan.config import load_plan_config

        assert load_plan_config(name).candidates.modes
    else:
        assert load_config(name).runs


@pytest.mark.parametrize("override, match", [
    ("name=../../x", r"name: expected a plain name"),
    ("name=/abs/path", r"name: expected a plain name"),
    ("runs.1.policy.k=1.5", r"runs.1.policy.k: expected a valid integer \(got 1.5\)"),
    ("runs.1.policy.k=1000", r"runs.1.policy.k: expected a draft length in \[0, 64\]"),
    ("runs.1.policy.k=100000000000000000000", r"--set 'runs.1.policy.k=1000.*': expected an integer that fits in 64"),
    ("drafters.ngram.fraction=-0.5", r"drafters.ngram.fraction: expected greater than or equal to 0"),
    ("workload.num_requests=1000000000000", r"workload.num_requests: expected less than or equal to"),
    ("workload.arrival={kind: gamma, rate: 5, cv: .inf}", r"workload.*cv.*finite number"),
    ("runs.1.policy={name: adaptive-k, drafter: eagle3, prior_weight: 0}", r"runs.1.policy.*prior_weight must be > 0"),
    ("server.kv_capacity_tokens=8", r"server.kv_capacity_tokens: 8 tokens is less than one KV block"),
    ("seed=-1", r"seed: expected greater than or equal to 0"),
    ("server.step_overhead_s=.nan", r"--set 'server.step_overhead_s=.nan': expected a finite number"),
    ("traces=no/such/bundle", r"traces: 'no/such/bundle' is not a trace bundle folder"),
    ("server.target_profile=nope", r"server.target_profile: 'nope' is neither a built-in latency profile"),
])
def test_invalid_values_are_refused_at_load_naming_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("default", [override])


@pytest.mark.parametrize("item, match", [
    ("workload.arrival.rate=[1", r"--set 'workload.arrival.rate=\[1', line 1: not valid YAML value"),
    ("name=!!python/object/apply:os.system [x]", r"--set 'name=.*', line 1: not valid YAML value: could not"),
    ("server..max_num_seqs=3", r"--set 'server..max_num_seqs=3': expected a dotted key"),
    ("server={max_num_seqs: 3, max_num_seqs: 4}", r"duplicate key 'max_num_seqs'"),
])
def test_malformed_set_items_name_the_item(item, match):
    with pytest.raises(ConfigError, match=match):
        load_config("default", [item])


def test_duplicate_key_in_a_config_file_names_file_and_line(tmp_path):
    p = tmp_path / "exp.yaml"
    p.write_text(builtin_configs()["default"].read_text() + "seed: 3\n")
    with pytest.raises(ConfigError, match=rf"{p}, line \d+: duplicate key 'seed' \(first on line 5\)"):
        load_config(str(p))
    p.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match=rf"{p}, line 1: not UTF-8 text"):
        load_config(str(p))


def _message(source, overrides=()) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(source, list(overrides))
    return str(e.value)


def test_a_typo_in_a_required_key_is_named_beside_the_missing_key(tmp_path):
    doc = _doc()
    doc["workload"]["arival"] = doc["workload"].pop("arrival")
    text = _message(str(_write(tmp_path, doc)))
    assert "workload.arrival: required key is missing (given as 'arival'?)" in text


@pytest.mark.parametrize("path, typo, meant", [
    (("server",), "max_num_seqz", "max_num_seqs"),  # an optional key of a nested model
    (("runs", 1), "polcy", "policy"),  # a model inside a list
    ((), "baselin", "baseline"),  # the top level
])
def test_a_typo_in_an_optional_key_gets_did_you_mean(tmp_path, path, typo, meant):
    doc = _doc()
    node = doc
    for part in path:
        node = node[part]
    node[typo] = node.pop(meant) if meant in node else "AR"
    text = _message(str(_write(tmp_path, doc)))
    loc = ".".join([*map(str, path), typo])
    assert f"{loc}: unknown key (did you mean {meant!r}?)" in text


def test_an_unknown_key_like_no_known_key_gets_no_guess(tmp_path):
    text = _message(str(_write(tmp_path, _doc(zzzz=1))))
    assert "zzzz: unknown key" in text and "did you mean" not in text


def test_errors_from_set_items_name_the_item_not_the_base_file(tmp_path):
    text = _message("default", ["workload.arival.rate=3"])
    assert text.splitlines()[0].startswith("--set 'workload.arival.rate=3': invalid experiment config")
    assert "workload.arival: unknown key (did you mean 'arrival'?)" in text
    # inside a discriminated union (arrival kinds) the path is the keys the user wrote, without the union's tag
    text = _message("default", ["workload.arrival.rat=3"])
    assert text.startswith("--set 'workload.arrival.rat=3'")
    assert "  workload.arrival.rat: unknown key (did you mean 'rate'?)" in text
    # an item's negative index names the run it reached; a value set whole credits the keys missing below it
    assert _message("default", ["runs.-1.policy.k=1000"]).startswith("--set 'runs.-1.policy.k=1000'")
    assert _message("default", ["workload={num_requests: 5}"]).startswith("--set 'workload={num_requests: 5}'")
    # errors of the file and of an item: the file heads the message, the item's line names it; a valid item is
    # credited with nothing
    p = _write(tmp_path, _doc(zzzz=1))
    text = _message(str(p), ["server.max_num_seqs=0", "seed=3"])
    lines = text.splitlines()
    assert lines[0] == f"{p}: invalid experiment config"
    assert any(ln.startswith("  server.max_num_seqs:") and ln.endswith("(from --set 'server.max_num_seqs=0')")
               for ln in lines)
    assert any(ln == "  zzzz: unknown key" for ln in lines) and "seed=3" not in text


def test_plan_config_set_errors_name_the_item():
    from experiments.plan.config import load_plan_config

    with pytest.raises(ConfigError) as e:
        load_plan_config("plan_llama8b", ["traffic.target_rat=3"])
    assert str(e.value).startswith("--set 'traffic.target_rat=3': invalid plan config")
    assert "traffic.target_rat: unknown key (did you mean 'target_rate'?)" in str(e.value)
