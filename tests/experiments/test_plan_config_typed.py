"""A plan config keeps typed objects from load to use: `drafters` as DraftCostConfigs, `candidates.scheduler` a grid
typed by ServerConfig's fields, `candidates.roofline` and `candidates.deployment` typed records; each dumps to the
document the plan gave (what the candidates' documents and their hashes read), and a bad value names its key."""
from __future__ import annotations

import json

import pytest

from experiments.config import ConfigError
from experiments.plan.candidates import _deployment, _target_profile, base_experiment
from experiments.plan.config import RooflineKnobs, load_plan_config
from simulator.costs.deployment_config import DeploymentConfig
from simulator.costs.draft_cost import DraftCostConfig
from simulator.costs.roofline import profile_from_ref
from tests.experiments.test_plan import SPACE


def _with(**candidates) -> dict:
    return {**SPACE, "candidates": {**SPACE["candidates"], **candidates}}


def test_plan_drafters_are_draft_cost_configs_that_reach_the_base_config_as_given():
    given = {"eagle3": {"kind": "whole_proposal", "profile": {"kind": "linear", "name": "e", "coefficients": {"const": 1}}},
             "ngram": {"kind": "fraction_of_verify", "fraction": 0.006}}
    plan = load_plan_config({**SPACE, "drafters": given})
    assert all(isinstance(spec, DraftCostConfig) for spec in plan.drafters.values())
    assert (plan.drafters["ngram"].kind, plan.drafters["ngram"].fraction) == ("fraction_of_verify", 0.006)
    # only the keys given (no defaults added), the inline profile's integer kept: the document the hashes read
    assert json.dumps(base_experiment(plan)["drafters"]) == json.dumps(given)
    assert load_plan_config(SPACE).drafters is None


@pytest.mark.parametrize("drafter, message", [
    ({"kind": "autoregressive"}, r"drafters\.eagle3: kind 'autoregressive' needs a latency profile"),
    ({"kind": "guess"}, r"drafters\.eagle3\.kind: expected 'autoregressive'"),
    ({"kind": "constant", "seconds": "0.1"}, r"drafters\.eagle3\.seconds: expected a valid number"),
])
def test_a_bad_plan_drafter_names_its_key(drafter, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_plan_config({**SPACE, "drafters": {"eagle3": drafter}}, where="my_plan.yaml")
    assert "my_plan.yaml" in str(err.value)


def test_the_scheduler_grid_is_typed_and_keeps_the_plans_key_order():
    plan = load_plan_config(_with(scheduler={"step_overhead_s": [0.001], "max_num_seqs": [8, 16]}))
    grid = plan.candidates.scheduler
    assert grid.max_num_seqs == [8, 16] and grid.step_overhead_s == [0.001] and grid.block_size is None
    assert grid.items() == [("step_overhead_s", [0.001]), ("max_num_seqs", [8, 16])]
    assert grid.model_dump() == {"step_overhead_s": [0.001], "max_num_seqs": [8, 16]}
    other = load_plan_config(_with(scheduler={"max_num_seqs": [8, 16], "step_overhead_s": [0.001]}))
    assert [k for k, _ in other.candidates.scheduler.items()] == ["max_num_seqs", "step_overhead_s"]
    assert load_plan_config(SPACE).candidates.scheduler.items() == []


@pytest.mark.parametrize("grid, message", [
    ({"max_num_seqs": [0]}, r"candidates\.scheduler\.max_num_seqs\.0: expected .*greater than or equal to 1"),
    ({"max_num_seqs": ["64"]}, r"candidates\.scheduler\.max_num_seqs\.0: expected a valid integer"),
    ({"prefill": ["both"]}, r"candidates\.scheduler\.prefill\.0: expected 'mixed' or 'separate'"),
    ({"max_num_sequences": [64]}, r"candidates\.scheduler\.max_num_sequences: unknown key"),
    ({"max_num_seqs": []}, r"candidates\.scheduler\.max_num_seqs: expected a non-empty list of values"),
    ({"deployment": [{}]}, r"candidates\.scheduler\.deployment: set by the candidate"),
])
def test_a_bad_scheduler_grid_value_names_its_key(grid, message):
    with pytest.raises(ConfigError, match=message):
        load_plan_config(_with(scheduler=grid))


def test_roofline_knobs_are_typed_and_unset_ones_are_the_profiles_defaults():
    plan = load_plan_config(_with(roofline={"overlap": "op", "mfu": 0.5}))
    knobs = plan.candidates.roofline
    default = profile_from_ref({"kind": "roofline", "model": "llama3.1-8b", "gpu": "l40s"})  # no knob given
    assert (knobs.mfu, knobs.overlap) == (0.5, "op")
    assert (knobs.bandwidth_util, knobs.floor_s, knobs.host_s) == (default.bandwidth_util, default.floor_s,
                                                                  default.host_s)
    assert knobs.given() == {"overlap": "op", "mfu": 0.5}  # the candidate's profile document adds only these
    doc, source = _target_profile(plan, "l40s", 1)
    assert doc == {"kind": "roofline", "model": "llama3.1-8b", "gpu": "l40s", "tp": 1, "overlap": "op", "mfu": 0.5}
    assert source == f"roofline (mfu 0.5, bandwidth {default.bandwidth_util}; not calibrated)"
    assert RooflineKnobs().given() == {}


def test_deployment_knobs_are_typed_and_reach_each_candidates_deployment_as_given():
    plan = load_plan_config(_with(deployment={"reserve_gib": 2, "max_model_len": 4096}))
    knobs = plan.candidates.deployment
    assert isinstance(knobs, DeploymentConfig) and (knobs.max_model_len, knobs.reserve_gib) == (4096, 2)
    assert knobs.gpu_memory_utilization is None  # not given: the placement's default applies
    ar = next(m for m in plan.candidates.modes if m.mode == "ar")
    dep = _deployment(plan, "l40s", 1, ar)
    assert dep == {"target": "llama3.1-8b", "gpu": "l40s", "num_gpus": 1, "tp": 1, "reserve_gib": 2,
                   "max_model_len": 4096}
    assert json.dumps(dep["reserve_gib"]) == "2"  # an integer stays one (the candidate document's hash)


@pytest.mark.parametrize("block, knobs, message", [
    ("roofline", {"mfu": [0.5]}, r"candidates\.roofline\.mfu: expected a number in \(0, 1\], got \[0.5\]"),
    ("roofline", {"mfu": True}, r"candidates\.roofline\.mfu: expected a number in \(0, 1\], got True"),
    ("roofline", {"floor_s": 11}, r"candidates\.roofline\.floor_s: expected a number in \[0, 10\], got 11"),
    ("roofline", {"mfu_": 0.5}, r"candidates\.roofline: unknown key\(s\) \['mfu_'\]"),
    ("deployment", {"max_model_len": "4096"}, r"candidates\.deployment\.max_model_len: expected a valid integer"),
    ("deployment", {"reserve_gib": "2"}, r"candidates\.deployment\.reserve_gib: "),
    ("deployment", {"max_len": 4096}, r"candidates\.deployment\.max_len: unknown key"),
    ("deployment", {"tp": 2}, r"candidates\.deployment: \['tp'\] are set per candidate"),
])
def test_a_bad_roofline_or_deployment_knob_names_its_key(block, knobs, message):
    with pytest.raises(ConfigError, match=message):
        load_plan_config(_with(**{block: knobs}))


def test_set_reaches_the_typed_plan_blocks():
    plan = load_plan_config(SPACE, ["candidates.roofline.mfu=0.5", "candidates.deployment.max_model_len=2048",
                                    "candidates.scheduler.max_num_seqs=[8, 16]",
                                    "drafters.ngram={kind: fraction_of_verify, fraction: 0.01}"])
    c = plan.candidates
    assert (c.roofline.mfu, c.deployment.max_model_len, c.scheduler.max_num_seqs) == (0.5, 2048, [8, 16])
    assert plan.drafters["ngram"].fraction == 0.01
