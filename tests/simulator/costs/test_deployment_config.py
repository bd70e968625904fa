"""simulator/costs/deployment_config.py: `server.deployment` is a typed DeploymentConfig from load to placement; it
dumps as the config gave it (keys, order, integers), `--set` reaches it, and a bad value names the file and key."""
from __future__ import annotations

import json

import pytest
import yaml

from experiments.config import ConfigError, load_config
from simulator.costs.deployment_config import DeploymentConfig
from simulator.server_config import ServerConfig

DEP = {"gpu": "h100-80gb", "target": "qwen3-32b", "tp": 4, "num_gpus": 4, "reserve_gib": 2}


def test_a_servers_deployment_is_typed_and_dumps_as_given():
    server = ServerConfig.model_validate({"target_profile": "x", "deployment": DEP})
    assert isinstance(server.deployment, DeploymentConfig)
    assert (server.deployment.target, server.deployment.tp, server.deployment.max_model_len) == ("qwen3-32b", 4, None)
    assert server.max_model_len is None  # not given: no request length is bounded
    # the keys given, in the config's order, the integer reserve an integer: what hashes and --set read
    assert json.dumps(server.model_dump(mode="json")["deployment"]) == json.dumps(DEP)
    assert ServerConfig.model_validate(server.model_dump()).deployment == server.deployment


def test_set_reaches_the_deployment_and_the_built_in_one_is_typed():
    cfg = load_config("psd_vs_sd", ["server.deployment.max_model_len=4096"])
    assert isinstance(cfg.server.deployment, DeploymentConfig)
    assert cfg.server.deployment.max_model_len == cfg.server.max_model_len == 4096
    assert cfg.model_dump(mode="json")["server"]["deployment"]["max_model_len"] == 4096


@pytest.mark.parametrize("dep, message", [
    ({**DEP, "tp": "4"}, r"server\.deployment\.tp: expected a valid integer"),
    ({**DEP, "gpus": 4}, r"server\.deployment\.gpus: unknown key"),
    ({**DEP, "reserve_gib": True}, r"server\.deployment\.reserve_gib: expected a valid integer"),
])
def test_a_bad_deployment_value_names_the_file_and_key(tmp_path, dep, message):
    doc = load_config("default").model_dump(mode="json", exclude={"sweep"})
    server = {k: v for k, v in doc["server"].items() if k not in ("num_target_gpus", "num_draft_gpus")}
    doc["server"] = {**server, "deployment": dep, "kv_capacity_tokens": None}
    path = tmp_path / "my_config.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message) as err:
        load_config(str(path))
    assert str(path) in str(err.value)


def test_the_placements_rules_name_the_callers_key():
    with pytest.raises(ValueError, match=r"runs\[r\] server\.deployment\.tp: 3 does not divide num_gpus 4"):
        DeploymentConfig(**{**DEP, "tp": 3}).placement("runs[r] server.deployment")
    with pytest.raises(ValueError, match=r"server\.deployment\.target: required"):
        DeploymentConfig(gpu="h100-80gb").deployment("server.deployment")


def test_max_num_seqs_defaults_only_when_not_given():
    dep = DeploymentConfig.model_validate(DEP)
    assert dep.with_default_seqs(16).max_num_seqs == 16
    assert dep.with_default_seqs(16).model_dump() == {**DEP, "max_num_seqs": 16}
    given = DeploymentConfig.model_validate({**DEP, "max_num_seqs": 128})
    assert given.with_default_seqs(16).max_num_seqs == 128


def test_a_typed_deployment_counts_the_gpus():
    dep = DeploymentConfig(target="llama3.1-70b", gpu="h100-80gb", tp=4, num_gpus=4, drafter="llama3.2-1b",
                           drafter_placement="dedicated", drafter_gpus=2)
    server = ServerConfig(target_profile="x", deployment=dep)
    assert (server.num_target_gpus, server.num_draft_gpus) == (4, 2)
