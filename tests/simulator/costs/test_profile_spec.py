"""simulator/costs/profile_spec.py: an inline profile (`server.target_profile`, a drafter's `profile`) is a typed spec
chosen by its `kind`, dumps as the config wrote it, and builds its profile through the loaders, which keep the value
rules; a bad value names its key."""
from __future__ import annotations

import json

import pytest

from experiments.config import ConfigError, load_config
from simulator.costs.draft_cost import DraftCostConfig, draft_cost_from_config
from simulator.costs.latency import LinearProfile
from simulator.costs.profile_spec import LinearSpec, RooflineSpec, StructuredSpec, TableSpec
from simulator.server_config import ServerConfig

ROOFLINE = {"kind": "roofline", "model": "llama3.2-1b", "gpu": "h100-80gb", "tp": 1, "mfu": 1}
LINEAR = {"kind": "linear", "name": "c", "coefficients": {"const": 0.002, "num_seqs": 1}}
MEASURED = [{"num_seqs": n, "batched_tokens": b, "kv_tokens": 64, "seconds": 0.01 + 0.001 * n + 1e-5 * b}
            for n in (1, 2, 4) for b in (1, 64, 128)]


def _server(profile) -> ServerConfig:
    return ServerConfig.model_validate({"target_profile": profile, "kv_capacity_tokens": 1000})


@pytest.mark.parametrize("doc, spec", [
    (ROOFLINE, RooflineSpec), (LINEAR, LinearSpec), ({"kind": "table", "name": "t", "measurements": MEASURED}, TableSpec),
    ({"kind": "structured", "name": "s", "form": "linear", "coefficients": {"const": 0.01}}, StructuredSpec),
])
def test_each_kind_is_its_spec_and_dumps_as_given(doc, spec):
    server = _server(doc)
    assert type(server.target_profile) is spec and server.target_profile.kind == doc["kind"]
    # the keys given, in their order, integers kept (mfu: 1, num_seqs: 1): what hashes and --set read
    assert json.dumps(server.model_dump(mode="json")["target_profile"]) == json.dumps(doc)
    assert _server(server.model_dump()["target_profile"]).target_profile == server.target_profile
    assert server.target().kind == doc["kind"]


def test_specs_build_the_profile_they_describe():
    roofline = _server(ROOFLINE).target()
    assert (roofline.model.name, roofline.gpu.name, roofline.tp, roofline.mfu) == ("llama3.2-1b", "h100-80gb", 1, 1)
    cost = draft_cost_from_config({"kind": "whole_proposal", "profile": LINEAR})
    assert isinstance(cost.profile, LinearProfile)
    # 2 ms + 1 s per sequence: 3 sequences, whatever the tokens (hand-worked from the coefficients)
    assert cost.profile.step_time(3, 9, 100) == pytest.approx(0.002 + 3 * 1)


def test_set_reaches_an_inline_profile():
    cfg = load_config("psd_vs_sd", ["server.target_profile.mfu=0.5", "drafters.qwen3-0.6b.profile.tp=1"])
    assert isinstance(cfg.server.target_profile, RooflineSpec) and cfg.server.target_profile.mfu == 0.5
    assert cfg.server.target().mfu == 0.5
    assert isinstance(cfg.drafters["qwen3-0.6b"].profile, RooflineSpec)


@pytest.mark.parametrize("profile, message, below", [
    ({"kind": "guess"}, r"server\.target_profile: .*expected an inline profile whose kind is one of \('roofline'", False),
    ({"name": "no kind", "coefficients": {"const": 1}}, r"server\.target_profile: .*whose kind is one of", False),
    ({**ROOFLINE, "tp": "1"}, r"server\.target_profile\.tp: expected a valid integer", True),
    ({**LINEAR, "coefficients": {"const": "x"}}, r"server\.target_profile\.coefficients\.const: expected a valid ", True),
    ({**ROOFLINE, "mfu_": 0.5}, r"server\.target_profile\.mfu_: unknown key \(did you mean 'mfu'\?\)", True),
])
def test_a_bad_inline_profile_names_its_key(profile, message, below):
    doc = load_config("default").model_dump(mode="json", exclude={"sweep"})
    doc["server"]["target_profile"] = profile
    with pytest.raises(ConfigError, match=message) as err:
        load_config(doc, label="my_config.yaml")
    assert str(err.value).startswith("my_config.yaml: invalid experiment config")
    # a mapping with a kind is an inline profile: only what is wrong inside it is said, not "expected a string"
    assert ("expected a valid string" in str(err.value)) is not below


def test_the_loaders_keep_the_value_rules():
    spec = DraftCostConfig.model_validate({"kind": "whole_proposal", "profile": {**LINEAR, "coefficients":
                                                                                 {"constant": 1}}})
    with pytest.raises(ValueError, match=r"drafters\.d\.profile, field 'coefficients\.constant': unknown term"):
        spec.cost("drafters.d")
    with pytest.raises(ValueError, match=r"drafter cost\.profile\.gpu: required"):
        draft_cost_from_config({"kind": "autoregressive", "profile": {"kind": "roofline", "model": "llama3.2-1b"}})
