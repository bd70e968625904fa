"""MTP as a plan mode (experiments/plan/deploy.py check_mtp, planner.py): the target's own head is placed beside it,
priced by traces/mtp.py, its acceptance taken from the plan's traces, and its deploy line runs exactly the simulated
method and k under vLLM 0.32.0's n_predict rule; a target without a head is refused naming the file and field."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from experiments.config import ConfigError
from experiments.plan.config import Mode, load_plan_config
from experiments.plan.deploy import check_mtp, check_speculative_config, deploy_of
from traces.bundle import DrafterSpec

MTP_TRACES = {"acceptance": {"base": "builtin:default", "drafters": {
    "mtp": {"per_position": [0.8, 0.6], "kind": "mtp", "cost_model": "mimo-7b:mtp"}}}}
SMALL = {"seeds": 1, "max_tests": 2, "tail_requests": 1, "requests_per_replica": 40, "curve_fractions": [0.5],
         "service_probe": False}


def _plan_doc(modes: list[dict], target: str = "mimo-7b") -> dict:
    return {"kind": "plan", "name": "mtp-small", "seed": 0, "base": "default", "traces": MTP_TRACES,
            "traffic": {"target_rate": 4, "num_requests": 40},
            "slo": {"ttft_s": 2.0, "tpot_s": 0.1, "attainment": 0.9}, "search": SMALL,
            "candidates": {"target": target, "gpus": ["h100-80gb"], "tp": [1], "modes": modes,
                           "scheduler": {"max_num_seqs": [16]},
                           "deployment": {"max_model_len": 4096, "gpu_memory_utilization": 0.9}}}


MTP_K2 = {"name": "mtp-k2", "mode": "sd", "policy": {"name": "fixed", "drafter": "mtp", "k": 2},
          "drafter_model": "mimo-7b:mtp"}
MTP_K3_ALIAS = {"name": "mtp-k3", "mode": "sd", "policy": {"name": "fixed", "drafter": "mtp", "k": 3},
                "drafter_model": "mimo-7b:mtp", "vllm_speculative_config": {"method": "mimo_mtp"}}


def test_an_mtp_plan_deploys_exactly_the_simulated_mode(tmp_path):
    from experiments.plan.candidates import base_experiment, build_candidates
    from experiments.plan.planner import run_plan
    from experiments.plan.prices import price_table
    from simulator.costs.placement import Deployment, plan as place
    from traces.mtp import mtp_draft_cost

    plan = load_plan_config(_plan_doc([{"name": "AR", "mode": "ar"}, MTP_K2, MTP_K3_ALIAS]))
    cands = {c.mode.name: c for c in build_candidates(plan, base_experiment(plan), price_table())}
    # what is simulated: the policy's drafter and k, the head priced by traces/mtp.py on the candidate's GPU and TP,
    # and its weights and KV placed beside the target's (the same placement as the catalog head's, by hand)
    for name, k in (("mtp-k2", 2), ("mtp-k3", 3)):
        c = cands[name]
        assert c.config["runs"][0]["policy"] == {"name": "fixed", "drafter": "mtp", "k": k}
        assert c.config["drafters"]["mtp"] == mtp_draft_cost("mimo-7b", "h100-80gb", 1)
        assert c.config["server"]["deployment"]["drafter"] == "mimo-7b:mtp"
        head = place(Deployment("mimo-7b", "h100-80gb", drafter="mimo-7b:mtp", max_model_len=4096))
        assert c.placement["kv_capacity_tokens"] == head.kv_capacity_tokens
    alone = place(Deployment("mimo-7b", "h100-80gb", max_model_len=4096)).kv_capacity_tokens
    assert cands["AR"].placement["kv_capacity_tokens"] == alone > cands["mtp-k2"].placement["kv_capacity_tokens"]

    doc = run_plan(plan, tmp_path / "out", backend="serial", progress=False)
    simulated = {m.name: m.policy for m in plan.candidates.modes if m.policy}
    for c in doc["candidates"]:
        if c["mode"] == "AR":
            assert c["deploy"]["speculative_config"] is None
            continue
        assert c["deploy"]["deployable"], c["id"]
        spec = json.loads(re.search(r"--speculative-config '(.*)'", c["vllm_serve"]["command"]).group(1))
        # the line runs what was simulated: vLLM's MTP method (an alias written as its current name) and the k
        assert spec == {"method": "mtp", "num_speculative_tokens": simulated[c["mode"]].k}
        assert check_speculative_config(spec, "deployed") == spec  # and it passes vLLM's own rules
        assert "vllm serve XiaomiMiMo/MiMo-7B-RL " in c["vllm_serve"]["command"]
    # the plan says where the MTP acceptance came from (inline rates: no target recorded) and what it modelled
    assert any("without a target" in n and "'mtp'" in n for n in doc["notes"])
    assert any(line.startswith("MTP (mtp-k2, mtp-k3)") for line in doc["assumptions"]["modelled"])


def test_a_target_without_an_mtp_head_is_refused_naming_the_file_and_field():
    modes = [{"name": "mtp", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 1},
              "drafter_model": "llama3.1-8b:mtp", "vllm_speculative_config": {"method": "mtp"}}]
    with pytest.raises(ConfigError, match=r"plan_llama8b\.yaml.*\n.*candidates\.modes\[mtp\]: an MTP mode drafts "
                                          r"with the target's own MTP head, but the target 'llama3\.1-8b' has none"):
        load_plan_config("plan_llama8b", [f"candidates.modes={json.dumps(modes)}"])


@pytest.mark.parametrize("change, message", [
    ({"drafter_model": "glm-4.5-air:mtp"}, r"modes\[mtp-k2\]\.drafter_model: .* expected 'mimo-7b:mtp'"),
    ({"drafter_model": None, "vllm_speculative_config": {"method": "mtp"}}, r"expected 'mimo-7b:mtp'.*got None"),
    ({"mode": "psd"}, r"modes\[mtp-k2\]\.mode: an MTP head runs inside the target's forward .* expected sd"),
    ({"vllm_speculative_config": {"method": "mtp", "model": "other/model"}},
     r"vllm_speculative_config\.model: .* in 'XiaomiMiMo/MiMo-7B-RL' .* got 'other/model'"),
])
def test_an_mtp_mode_must_be_the_targets_own_head_in_sequential_sd(change, message):
    with pytest.raises(ValueError, match=message):
        load_plan_config(_plan_doc([{**MTP_K2, **change}]))


def test_an_mtp_mode_replays_mtp_acceptance():
    from experiments.plan.candidates import base_experiment, build_candidates
    from experiments.plan.prices import price_table

    plan = load_plan_config(_plan_doc([{**MTP_K2, "policy": {"name": "fixed", "drafter": "eagle3", "k": 2}}]))
    with pytest.raises(ValueError, match=r"drafter 'eagle3' replays acceptance of kind 'eagle' .* an MTP mode "
                                         r"replays an MTP head's acceptance"):
        build_candidates(plan, base_experiment(plan), price_table())


def test_mtp_k_follows_vllms_n_predict_rule(monkeypatch):
    """vLLM 0.32.0 (vllm/config/speculative.py): num_speculative_tokens > n_predict must be divisible by it; k <=
    n_predict is always accepted. A three-layer head, by hand: 1, 2, 3, 6, 9 pass; 4, 5, 7 fail."""
    import traces.catalog as catalog

    real = catalog.get_model
    monkeypatch.setattr(catalog, "get_model",
                        lambda name: replace(real(name), mtp_layers=3) if name == "mimo-7b" else real(name))
    for k in (1, 2, 3, 6, 9):
        assert check_mtp(Mode.model_validate({**MTP_K2, "policy": {"name": "fixed", "drafter": "mtp", "k": k}}),
                         "mimo-7b", "m") == 3
    for k in (4, 5, 7):
        with pytest.raises(ValueError, match=rf"num_speculative_tokens:{k} must be divisible by n_predict=3"):
            check_mtp(Mode.model_validate({**MTP_K2, "policy": {"name": "fixed", "drafter": "mtp", "k": k}}),
                      "mimo-7b", "m")
    # a k-by-batch policy is checked at its largest k (vLLM's num_speculative_tokens)
    ranges = [{"min_batch": 1, "max_batch": 8, "k": 4}, {"min_batch": 9, "max_batch": None, "k": 2}]
    with pytest.raises(ValueError, match=r"num_speculative_tokens:4 must be divisible by n_predict=3"):
        check_mtp(Mode.model_validate({**MTP_K2, "policy": {"name": "k-by-batch", "drafter": "mtp",
                                                            "ranges": ranges}}), "mimo-7b", "m")


def test_deploy_of_writes_the_mtp_config_and_checks_it_against_the_target():
    specs = {"mtp": DrafterSpec("mtp", "mtp", "mimo-7b:mtp"), "eagle3": DrafterSpec("eagle3", "eagle", "c")}
    mode = Mode.model_validate(MTP_K2)
    d = deploy_of(mode, specs, 1, 16, "w", target="mimo-7b")
    assert d.deployable and d.speculative_config == {"method": "mtp", "num_speculative_tokens": 2}
    assert d.cli_arg() == """--speculative-config '{"method":"mtp","num_speculative_tokens":2}'"""
    with pytest.raises(ValueError, match="needs the target"):
        deploy_of(mode, specs, 1, 16, "w")
    eagle = Mode.model_validate({**MTP_K2, "policy": {"name": "fixed", "drafter": "eagle3", "k": 2},
                                 "vllm_speculative_config": {"method": "mtp"}})
    with pytest.raises(ValueError, match=r"method: 'mtp' but the simulated drafter 'eagle3' replays acceptance of "
                                         r"kind 'eagle'"):
        deploy_of(eagle, specs, 1, 16, "w", target="mimo-7b")


def test_a_linear_attention_target_holds_each_candidates_sequences_state():
    """Qwen3-Next: the plan places its MTP head and the recurrent state of the candidate's max_num_seqs sequences."""
    from experiments.plan.candidates import base_experiment, build_candidates
    from experiments.plan.prices import price_table
    from simulator.costs.placement import Deployment, plan as place

    traces = {"acceptance": {"base": "builtin:default", "drafters": {
        "mtp": {"per_position": [0.8], "kind": "mtp", "cost_model": "qwen3-next-80b-a3b:mtp"}}}}
    mode = {"name": "mtp-k1", "mode": "sd", "policy": {"name": "fixed", "drafter": "mtp", "k": 1},
            "drafter_model": "qwen3-next-80b-a3b:mtp"}
    doc = {**_plan_doc([{"name": "AR", "mode": "ar"}, mode], target="qwen3-next-80b-a3b"), "traces": traces}
    doc["candidates"].update(tp=[4], scheduler={"max_num_seqs": [16, 64]})
    plan = load_plan_config(doc)
    for c in build_candidates(plan, base_experiment(plan), price_table()):
        seqs = c.scheduler.server()["max_num_seqs"]
        drafter = "qwen3-next-80b-a3b:mtp" if c.mode.name == "mtp-k1" else None
        expect = place(Deployment("qwen3-next-80b-a3b", "h100-80gb", num_gpus=4, tp=4, drafter=drafter,
                                  max_model_len=4096, max_num_seqs=seqs))
        assert c.placement["kv_capacity_tokens"] == expect.kv_capacity_tokens, c.id
        if drafter:
            assert c.deploy.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
            assert c.config["drafters"]["mtp"]["profile"] == {"kind": "roofline", "model": "qwen3-next-80b-a3b:mtp",
                                                              "gpu": "h100-80gb", "tp": 4}
