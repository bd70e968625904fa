"""The `cluster:` block: validated early, errors name the key; per-replica overrides resolved by the scenario
builder (bad values name the run and replica); seeds per replica."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from simulator.cluster.config import ClusterSpec
from simulator.scenario import make_cluster_scenario, make_scenario, simulation
from simulator.seeds import replica_seeds
from simulator.server_config import RunSpec, ServerConfig

SERVER = ServerConfig(target_profile={"kind": "linear", "coefficients": {"const": 0.01}}, kv_capacity_tokens=10_000)


@pytest.mark.parametrize("doc, where", [
    ({"replicas": 0}, "replicas.*\n.*greater than or equal to 1"),
    ({"replicas": 10**6}, "replicas.*\n.*less than or equal to 1024"),
    ({"replicas": True}, "replicas"),
    ({"replicas": []}, "at least 1 item"),
    ({"replicas": 2, "router": {"name": "random"}}, "router.name"),
    ({"replicas": 2, "router": {"name": "round_robin", "key": "trace"}}, r"\['key'\] only apply to router affinity"),
    ({"replicas": 2, "router": {"name": "affinity", "key": "session"}}, "router.key"),
    ({"replicas": 2, "router": {"name": "affinity", "max_outstanding": 0}}, "router.max_outstanding"),
    ({"replicas": 2, "routr": {}}, "routr"),
])
def test_bad_cluster_blocks_name_the_key(doc, where):
    with pytest.raises(ValidationError, match=where):
        ClusterSpec.model_validate(doc)


def test_an_unknown_replica_override_key_is_refused_where_the_server_keys_are_known():
    with pytest.raises(ValidationError, match=r"cluster.replicas\[1\]: unknown server key\(s\) \['max_num_seq'\]"):
        RunSpec(name="ar", mode="ar", cluster={"replicas": [{}, {"max_num_seq": 3}]})
    ClusterSpec.model_validate({"replicas": [{}, {"max_num_seq": 3}]})  # the block alone does not know them


def test_defaults_and_overrides():
    spec = ClusterSpec(replicas=3)
    assert spec.router.name == "least_outstanding" and spec.num_replicas == 3 and spec.overrides() == [{}, {}, {}]
    assert ClusterSpec(replicas=2, router={"name": "affinity"}).router.affinity_key == "trace"
    het = ClusterSpec(replicas=[{}, {"max_num_seqs": 4}])
    assert het.num_replicas == 2 and het.overrides()[1] == {"max_num_seqs": 4}


def test_a_bad_replica_override_value_names_run_and_replica():
    spec = ClusterSpec(replicas=[{}, {"max_num_seqs": 0}])
    with pytest.raises(ValueError, match=r"(?s)runs\[ar\] cluster.replicas\[1\]: .*max_num_seqs"):
        make_cluster_scenario(RunSpec(name="ar", mode="ar"), SERVER, {}, 0, spec)


def test_replicas_get_their_own_servers_and_seeds_from_the_run_seed():
    spec = ClusterSpec(replicas=[{"max_num_seqs": 2}, {}, {"kv_capacity_tokens": 500, "num_target_gpus": 4}])
    sc = make_cluster_scenario(RunSpec(name="ar", mode="ar", server={"max_num_seqs": 7}), SERVER, {}, 42, spec)
    assert [r.server.max_num_seqs for r in sc.replicas] == [2, 7, 7]  # replica overrides over run overrides
    assert [r.kv_capacity_tokens for r in sc.replicas] == [10_000, 10_000, 500]
    assert sc.num_target_gpus == 6 and sc.num_draft_gpus == 0
    seeds = [r.seeds.policy for r in sc.replicas]
    assert len(set(seeds)) == 3  # every replica its own stream, replica 0 the single server's
    assert seeds[0] == make_scenario(RunSpec(name="ar", mode="ar"), SERVER, {}, replica_seeds(
        np.random.SeedSequence(42), 0)).seeds.policy
    other = make_cluster_scenario(RunSpec(name="ar", mode="ar"), SERVER, {}, 43, spec)
    assert [r.seeds.policy for r in other.replicas] != seeds


def test_a_replica_that_does_not_fit_makes_the_cluster_not_fit():
    dep = {"target": "llama3.1-8b", "gpu": "h100-80gb"}
    big = {"target": "llama3.3-70b", "gpu": "l40s"}
    server = ServerConfig(target_profile={"kind": "linear", "coefficients": {"const": 0.01}}, deployment=dep)
    sc = make_cluster_scenario(RunSpec(name="ar", mode="ar"), server, {}, 0,
                               ClusterSpec(replicas=[{}, {"deployment": big}]))
    assert not sc.fits and sc.info["does_not_fit"].startswith("replica 1: ")
    with pytest.raises(ValueError, match="replica 1"):
        simulation(sc, None)
