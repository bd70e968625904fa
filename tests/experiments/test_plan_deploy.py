"""Deploy what was simulated (experiments/plan/deploy.py): vLLM 0.32.0's speculative-config rules, the deploy line of
every mode against its simulated policy, research rows never deployed, and each shipped plan config planned small."""
from __future__ import annotations

import json
import re

import pytest

from experiments.config import ConfigError
from experiments.plan.config import Mode, load_plan_config
from experiments.plan.deploy import check_speculative_config, deploy_of
from traces.bundle import DrafterSpec

EAGLE = {"eagle3": DrafterSpec("eagle3", "eagle", "c"), "ngram": DrafterSpec("ngram", "ngram", "c")}


def vllm_k(schedule: list[list[int]], num_speculative_tokens: int, batch_size: int) -> int:
    """vLLM's k at a batch size, as vllm/v1/spec_decode/dynamic/utils.py documents it: the k of the inclusive range
    holding it, else the k of the last range before it (carried on), capped by num_speculative_tokens."""
    k = None
    for lo, hi, kk in sorted(schedule):
        if lo <= batch_size:
            k = kk
    return min(num_speculative_tokens, k)


@pytest.mark.parametrize("doc, message", [
    ({"method": "eagle-3", "model": "m", "num_speculative_tokens": 3}, r"method: 'eagle-3' is not a vLLM 0.32.0"),
    ({"model": "m", "num_speculative_tokens": 3}, r"\.method: required"),
    ({"method": "eagle3", "num_speculative_tokens": 3}, r"\.model: method 'eagle3' needs the draft model"),
    ({"method": "ngram", "num_speculative_tokens": 0}, r"num_speculative_tokens: expected an integer >= 1"),
    ({"method": "ngram", "num_speculative_tokens": True}, r"num_speculative_tokens: expected an integer >= 1"),
    ({"method": "ngram", "tensor_parallel_size": 2}, r"tensor_parallel_size: not allowed: vLLM refuses it"),
    ({"method": "ngram", "speculative_model": "foo"}, r"unknown key\(s\) \['speculative_model'\]"),
    ({"method": "ngram", "target_model_config": {}}, r"target_model_config: not allowed: set by vLLM"),
    ({"method": "ngram", "prompt_lookup_min": 6, "prompt_lookup_max": 4}, r"prompt_lookup_min 6 > prompt_lookup_max 4"),
    ({"method": "ngram", "prompt_lookup_max": 0}, r"prompt_lookup_max: expected an integer >= 1"),
    ({"method": "eagle3", "model": "m", "prompt_lookup_max": 3}, r"only n-gram methods take prompt lookup bounds"),
    ({"method": "ngram", "rejection_sample_method": "synthetic"}, r"rejection_sample_method: expected 'standard'"),
    ({"method": "ngram", "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}, r"must start at 1"),
    ({"method": "ngram", "num_speculative_tokens_per_batch_size": [[1, 8, 3], [8, 16, 2]]}, r"ranges overlap"),
    ({"method": "ngram", "num_speculative_tokens_per_batch_size": [[1, 8]]}, r"\[0\]: expected \[range_start"),
    ({"method": "ngram", "num_speculative_tokens_per_batch_size": [[4, 2, 1]]}, r"range start 4 > end 2"),
])
def test_vllm_rules_refuse_bad_speculative_configs(doc, message):
    with pytest.raises(ValueError, match=message):
        check_speculative_config(doc, "x")


def test_ngram_lookup_bounds_take_vllm_defaults():
    # vLLM 0.32.0 (SpeculativeConfig.__post_init__): neither given -> 5/5; one given -> the other equal to it
    assert check_speculative_config({"method": "ngram"}, "x")["prompt_lookup_min"] == 5
    got = check_speculative_config({"method": "ngram", "prompt_lookup_max": 4}, "x")
    assert (got["prompt_lookup_min"], got["prompt_lookup_max"]) == (4, 4)
    got = check_speculative_config({"method": "ngram", "prompt_lookup_min": 2}, "x")
    assert (got["prompt_lookup_min"], got["prompt_lookup_max"]) == (2, 2)
    assert check_speculative_config({"method": "deepseek_mtp"}, "x")["method"] == "mtp"  # a deprecated alias


def _mode(**kw) -> Mode:
    return Mode.model_validate({"name": "m", "mode": "sd", **kw})


@pytest.mark.parametrize("kw, message", [
    ({"policy": {"name": "fixed", "drafter": "eagle3", "k": 3},
      "vllm_speculative_config": {"method": "eagle3", "model": "m", "num_speculative_tokens": 7}},
     r"num_speculative_tokens: 7 but the simulated policy proposes k = 3"),
    ({"policy": {"name": "adaptive-k", "drafter": "eagle3"},
      "vllm_speculative_config": {"method": "eagle3", "model": "m", "num_speculative_tokens": 3}},
     r"no acceptance-driven per-step k; the mode is planned as a research row"),
    ({"mode": "psd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3},
      "vllm_speculative_config": {"method": "eagle3", "model": "m", "num_speculative_tokens": 3}},
     r"PSD .* has no vLLM 0.32.0 equivalent"),
    ({"policy": {"name": "k-by-batch", "drafter": "ngram", "ranges": [{"min_batch": 1, "max_batch": 8, "k": 4},
                                                                     {"min_batch": 9, "max_batch": None, "k": 2}]},
      "vllm_speculative_config": {"method": "ngram", "num_speculative_tokens": 2}},
     r"largest k is 4"),
    ({"policy": {"name": "k-by-batch", "drafter": "ngram", "ranges": [{"min_batch": 1, "max_batch": 8, "k": 4},
                                                                     {"min_batch": 9, "max_batch": None, "k": 2}]},
      "vllm_speculative_config": {"method": "ngram", "num_speculative_tokens_per_batch_size": [[1, 16, 4],
                                                                                               [17, 64, 2]]}},
     r"is not the simulated policy's ranges"),
])
def test_a_speculative_config_that_is_not_the_simulated_policy_is_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        _mode(**kw)


def test_a_plan_config_names_the_file_and_field_of_a_bad_speculative_config(tmp_path):
    modes = [{"name": "x", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3},
              "vllm_speculative_config": {"method": "eagle3", "model": "m", "num_speculative_tokens": 5}}]
    with pytest.raises(ConfigError, match=r"plan_llama8b.yaml.*\n.*modes\[x\]\.vllm_speculative_config"
                                          r"\.num_speculative_tokens: 5 but the simulated policy proposes k = 3"):
        load_plan_config("plan_llama8b", [f"candidates.modes={json.dumps(modes)}"])


def test_fixed_k_deploys_exactly_the_simulated_method_and_k():
    d = deploy_of(_mode(policy={"name": "fixed", "drafter": "eagle3", "k": 3},
                        vllm_speculative_config={"method": "eagle3", "model": "m"}), EAGLE, 1, 64, "w")
    assert d.deployable and d.speculative_config == {"method": "eagle3", "model": "m", "num_speculative_tokens": 3}
    assert d.cli_arg() == """--speculative-config '{"method":"eagle3","model":"m","num_speculative_tokens":3}'"""
    # an n-gram drafter needs no model: the plan writes the config itself, with vLLM's resolved lookup bounds
    d = deploy_of(_mode(policy={"name": "fixed", "drafter": "ngram", "k": 2}), EAGLE, 1, 64, "w")
    assert d.speculative_config == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5,
                                    "prompt_lookup_max": 5}
    # an EAGLE drafter without a config: the plan cannot name the head vLLM would load
    assert not deploy_of(_mode(policy={"name": "fixed", "drafter": "eagle3", "k": 3}), EAGLE, 1, 64, "w").deployable


def test_the_drafter_kind_and_recorded_lookup_bounds_tie_the_deploy_line_to_the_acceptance():
    with pytest.raises(ValueError, match=r"method: 'ngram' but the simulated drafter 'eagle3' replays acceptance of "
                                         r"kind 'eagle'"):
        deploy_of(_mode(policy={"name": "fixed", "drafter": "eagle3", "k": 3},
                        vllm_speculative_config={"method": "ngram"}), EAGLE, 1, 64, "w")
    recorded = {"ngram": DrafterSpec("ngram", "ngram", "c", params={"prompt_lookup_min": 2, "prompt_lookup_max": 4})}
    mode = _mode(policy={"name": "fixed", "drafter": "ngram", "k": 3},
                 vllm_speculative_config={"method": "ngram", "prompt_lookup_max": 3})
    with pytest.raises(ValueError, match=r"recorded with prompt_lookup_min/max \(2, 4\)"):
        deploy_of(mode, recorded, 1, 64, "w")
    d = deploy_of(_mode(policy={"name": "fixed", "drafter": "ngram", "k": 3}), recorded, 1, 64, "w")
    assert (d.speculative_config["prompt_lookup_min"], d.speculative_config["prompt_lookup_max"]) == (2, 4)
    with pytest.raises(ValueError, match=r"draft_tensor_parallel_size: 2 on a TP-4 candidate"):
        deploy_of(_mode(policy={"name": "fixed", "drafter": "eagle3", "k": 3},
                        vllm_speculative_config={"method": "eagle3", "model": "m", "draft_tensor_parallel_size": 2}),
                  EAGLE, 4, 64, "w")


@pytest.mark.parametrize("ranges, max_num_seqs", [
    ([{"min_batch": 1, "max_batch": 8, "k": 5}, {"min_batch": 9, "max_batch": 32, "k": 3},
      {"min_batch": 33, "max_batch": None, "k": 0}], 64),
    ([{"min_batch": 1, "max_batch": None, "k": 2}], 16),
    ([{"min_batch": 1, "max_batch": 4, "k": 1}, {"min_batch": 5, "max_batch": None, "k": 4}], 3),
])
def test_k_by_batch_deploys_a_schedule_with_the_simulated_k_at_every_batch_size(ranges, max_num_seqs):
    from policies.k_by_batch import KByBatchPolicy

    mode = _mode(policy={"name": "k-by-batch", "drafter": "ngram", "ranges": ranges})
    d = deploy_of(mode, EAGLE, 1, max_num_seqs, "w")
    spec = d.speculative_config
    assert d.deployable and spec["method"] == "ngram"
    check_speculative_config(spec, "deployed")  # the line passes vLLM's own rules
    policy = KByBatchPolicy("ngram", ranges)
    assert spec["num_speculative_tokens"] == max(r["k"] for r in ranges)
    for bs in range(1, max_num_seqs + 1):
        assert vllm_k(spec["num_speculative_tokens_per_batch_size"], spec["num_speculative_tokens"], bs) == \
            policy.k_for(bs), bs


@pytest.mark.parametrize("policy", [{"name": "adaptive-k", "drafter": "eagle3"},
                                    {"name": "combine-match", "ngram": "ngram", "eagle": "eagle3"},
                                    {"name": "ucb", "drafters": ["eagle3", "ngram"]}])
def test_policies_vllm_cannot_run_are_research_rows(policy):
    d = deploy_of(_mode(policy=policy), EAGLE, 1, 64, "w")
    assert not d.deployable and d.speculative_config is None and "research row" in d.why
    assert not deploy_of(Mode(name="p", mode="psd", policy={"name": "fixed", "drafter": "eagle3", "k": 3}),
                         EAGLE, 1, 64, "w").deployable


SMALL = ["search.seeds=1", "search.max_tests=2", "search.tail_requests=1", "search.requests_per_replica=40",
         "search.curve_fractions=[0.5]", "search.service_probe=false", "traffic.num_requests=40"]
K_BY_BATCH = {"name": "sd-ngram-kbb", "mode": "sd", "policy": {
    "name": "k-by-batch", "drafter": "ngram", "ranges": [{"min_batch": 1, "max_batch": 16, "k": 4},
                                                         {"min_batch": 17, "max_batch": None, "k": 2}]}}


@pytest.mark.parametrize("name, overrides", [
    ("plan_llama8b", ["candidates.gpus=[h100-80gb,a100-80gb]", "candidates.tp=[1]"]),
    ("plan_llama70b", ["candidates.replicas=[2]"]),
])
def test_every_deploy_line_of_a_shipped_plan_runs_the_simulated_mode(name, overrides, tmp_path):
    from experiments.plan.deploy import KIND_METHODS
    from experiments.plan.planner import run_plan
    from experiments.run import resolve_bundle
    from policies.registry import make_policy

    plan = load_plan_config(name, SMALL + overrides)
    modes = [m.model_dump(mode="json", exclude_none=True) for m in plan.candidates.modes] + [K_BY_BATCH]
    plan = load_plan_config(name, SMALL + overrides + [f"candidates.modes={json.dumps(modes)}"])
    doc = run_plan(plan, tmp_path / name, backend="serial", progress=False)
    kinds = {d: s.kind for d, s in resolve_bundle("builtin:default", 0).meta.drafters.items()}
    by_mode = {m.name: m for m in plan.candidates.modes}
    research = set()
    for c in doc["candidates"]:
        mode, dep = by_mode[c["mode"]], c["deploy"]
        if mode.mode == "psd" or (mode.policy is not None and mode.policy.name in ("adaptive-k", "combine-match")):
            assert not dep["deployable"] and c.get("vllm_serve") is None
            research.add(c["id"])
            continue
        assert dep["deployable"], c["id"]
        if c["status"] != "ok":
            continue
        command = c["vllm_serve"]["command"]
        assert f"--tensor-parallel-size {c['tp']} " in command
        found = re.search(r"--speculative-config '(.*)'", command)
        if mode.mode == "ar":
            assert found is None
            continue
        spec = json.loads(found.group(1))
        policy = make_policy(mode.policy)
        assert spec["method"] in KIND_METHODS[kinds[policy.drafter]]
        if "ranges" in mode.policy.given():  # the schedule gives the simulated k at every batch size the candidate runs
            seqs = int(re.search(r"--max-num-seqs (\d+)", command).group(1))
            assert spec["num_speculative_tokens"] == policy.max_draft_tokens()
            assert [vllm_k(spec["num_speculative_tokens_per_batch_size"], spec["num_speculative_tokens"], b)
                    for b in range(1, seqs + 1)] == [policy.k_for(b) for b in range(1, seqs + 1)]
        else:
            assert spec["num_speculative_tokens"] == policy.k and "num_speculative_tokens_per_batch_size" not in spec
            assert spec == {**mode.vllm_speculative_config, **{k: spec[k] for k in ("prompt_lookup_min",
                                                                                   "prompt_lookup_max") if k in spec}}
    assert bool(research) == (name == "plan_llama8b") and doc["cheapest"] not in research
    if doc["cheapest"] is not None:
        answer = next(c for c in doc["candidates"] if c["id"] == doc["cheapest"])
        assert answer["deploy"]["deployable"] and doc["deploy"] == answer["vllm_serve"]
    if doc["best_research"] is not None:
        assert doc["best_research"]["id"] in research


def test_deploy_line_and_assumptions_state_async_scheduling_and_lookahead_as_simulated(tmp_path):
    """A vLLM V1 plan over async scheduling on and off: each deploy line says which the candidate simulated
    (vLLM 0.32.0 schedules asynchronously unless told --no-async-scheduling), and the assumptions give the KV
    lookahead slots each SD mode's servers reserved (k = 3 for EAGLE-3, none for n-gram)."""
    from experiments.plan.planner import run_plan

    modes = [{"name": "AR", "mode": "ar"},
             {"name": "sd-eagle3-k3", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3},
              "vllm_speculative_config": {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                          "num_speculative_tokens": 3}},
             {"name": "sd-ngram-k2", "mode": "sd", "policy": {"name": "fixed", "drafter": "ngram", "k": 2}}]
    plan = load_plan_config("plan_llama8b", SMALL + [
        "candidates.gpus=[h100-80gb]", "candidates.tp=[1]", f"candidates.modes={json.dumps(modes)}",
        'candidates.scheduler={"max_num_seqs": [64], "scheduler": ["vllm-v1"], "chunked_prefill": [true], '
        '"async_scheduling": [true, false]}'])
    doc = run_plan(plan, tmp_path / "plan", backend="serial", progress=False)
    seen = set()
    for c in doc["candidates"]:
        if c.get("vllm_serve") is None:
            continue
        command, on = c["vllm_serve"]["command"], c["scheduler"]["async_scheduling"]
        assert (" --async-scheduling" in command) == on and (" --no-async-scheduling" in command) == (not on)
        seen.add(on)
    assert seen == {True, False}
    modelled = doc["assumptions"]["modelled"]
    assert any(line.startswith("KV lookahead slots per running request") and line.endswith(": sd-eagle3-k3 3")
               for line in modelled), modelled
    assert "async scheduling: on for some candidates, off for others (each deploy line says which)" in modelled
