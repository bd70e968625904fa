"""What a run borrowed: the default config, a Qwen3-32B target on the Llama-8B bundle, acceptance at a level and
extrapolated; the plan's borrowed-acceptance note reads the same rule."""
from __future__ import annotations

import json
from types import SimpleNamespace

import yaml

from experiments.cli import main
from experiments.config import builtin_configs
from experiments.provenance import RunProvenance, acceptance_provenance
from experiments.run import run_experiment
from traces.bundle import BundleMeta, DrafterSpec


def _tiny(tmp_path, **changes):
    doc = yaml.safe_load(builtin_configs()["default"].read_text())
    doc["workload"]["num_requests"] = 40
    doc["runs"] = [doc["runs"][0], doc["runs"][2], doc["runs"][5]]  # AR, eagle3-k3, ngram-k3
    doc.update(changes)
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_default_config_states_its_sources_in_summary_and_under_the_table(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["run", str(_tiny(tmp_path)), "--out", str(out), "--no-progress", "--no-plots"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    for name in ("AR", "eagle3-k3", "ngram-k3"):
        prov = RunProvenance.from_dict(summary[name]["provenance"])
        assert prov.step_prices == "published fit"  # the shipped profile says source: published
        assert prov.target == "llama3.1-8b"
    e3 = RunProvenance.from_dict(summary["eagle3-k3"]["provenance"])
    (acc,), (cost,) = e3.acceptance, e3.draft_costs
    assert acc.origin == "synthetic" and acc.recorded_target == "llama3.1-8b" and acc.level == "per_request"
    assert cost.source == "published fit" and not cost.borrowed
    assert summary["AR"]["provenance"]["acceptance"] == []  # AR drafts nothing
    assert "what the runs borrowed" in printed and "published fit" in printed
    assert "borrowed:" not in printed


def test_a_qwen3_32b_target_on_the_llama_bundle_says_borrowed(tmp_path):
    server = yaml.safe_load(builtin_configs()["default"].read_text())["server"]
    server["target_profile"] = {"kind": "roofline", "model": "qwen3-32b", "gpu": "h100-80gb"}
    res = run_experiment(_tiny(tmp_path, server=server), out=None)
    e3 = RunProvenance.from_dict(res.summary["eagle3-k3"]["provenance"])
    assert e3.target == "qwen3-32b" and e3.step_prices == "roofline"
    assert e3.acceptance[0].origin == "borrowed" and "borrowed" in e3.acceptance[0].note
    assert "llama3.1-8b" in e3.acceptance[0].note and "qwen3-32b" in e3.acceptance[0].note
    assert e3.draft_costs[0].borrowed  # the Llama-8B EAGLE head's price
    ng = RunProvenance.from_dict(res.summary["ngram-k3"]["provenance"])
    assert ng.acceptance[0].origin == "borrowed" and not ng.draft_costs[0].borrowed  # n-gram has no head


def test_a_scalar_level_run_above_its_k_says_extrapolated_and_warns_about_tails(tmp_path):
    traces = {"acceptance": {"base": "builtin:default", "drafters": {"eagle3": {"mean_length": 2.4, "k": 3}}}}
    runs = [{"name": "AR", "mode": "ar"},
            {"name": "e5", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 5}},
            {"name": "e3", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3}}]
    res = run_experiment(_tiny(tmp_path, traces=traces, runs=runs), out=None)
    e5 = RunProvenance.from_dict(res.summary["e5"]["provenance"])
    acc = e5.acceptance[0]
    assert acc.level == "mean_length" and acc.measured_k == 3 and acc.run_k == 5 and acc.extrapolated
    assert "extrapolated to k = 5 from the measured k = 3" in acc.note
    assert acc.origin == "unattributed"  # a number typed in the config names no target
    assert any("tails need per-request data" in n for n in e5.notes)
    e3 = RunProvenance.from_dict(res.summary["e3"]["provenance"])
    assert not e3.acceptance[0].extrapolated  # k = 3 is the measured k


def test_origin_rule_by_hand():
    meta = BundleMeta(target="meta-llama/Llama-3.1-8B-Instruct", drafters={"d": DrafterSpec("d", "eagle", "x")},
                      dataset="gsm8k", source={"generator": "import specbench"})
    assert acceptance_provenance(meta, "llama3.1-8b", "d").origin == "measured"  # hub id = catalog name
    assert acceptance_provenance(meta, "qwen3-32b", "d").origin == "borrowed"
    meta.extra["acceptance_levels"] = {"d": {"level": "per_position", "measured_k": 2, "extrapolation": None,
                                             "target": "llama3.1-8b", "dataset": "mt-bench", "source": {}}}
    a = acceptance_provenance(meta, "llama3.1-8b", "d", 4)
    assert a.origin == "borrowed" and "dataset mt-bench" in a.note and not a.extrapolated  # capped, not carried


def test_the_plans_note_reads_the_same_rule():
    from experiments.plan.assumptions import acceptance_note

    plan = SimpleNamespace(seed=0, candidates=SimpleNamespace(target="qwen3-32b"))
    note = acceptance_note(plan, {"traces": "builtin:default"})
    assert note is not None and "llama3.1-8b" in note and "qwen3-32b" in note and "eagle3" in note
    plan.candidates.target = "meta-llama/Llama-3.1-8B-Instruct"
    assert acceptance_note(plan, {"traces": "builtin:default"}) is None


def test_an_mtp_run_places_its_head_prices_it_and_says_it_reuses_it(tmp_path):
    cfg = {
        "name": "mtp", "seed": 0,
        "traces": {"acceptance": {"base": "builtin:default", "drafters": {
            "mtp": {"per_position": [0.8], "kind": "mtp", "cost_model": "mimo-7b:mtp"}}}},
        "workload": {"num_requests": 30, "arrival": {"kind": "poisson", "rate": 4.0}},
        "server": {"target_profile": {"kind": "roofline", "model": "mimo-7b", "gpu": "h100-80gb"},
                   "max_num_seqs": 16,
                   "deployment": {"target": "mimo-7b", "gpu": "h100-80gb", "drafter": "mimo-7b:mtp"}},
        "drafters": {"mtp": {"kind": "autoregressive",
                             "profile": {"kind": "roofline", "model": "mimo-7b:mtp", "gpu": "h100-80gb"}}},
        "runs": [{"name": "k1", "mode": "sd", "policy": {"name": "fixed", "drafter": "mtp", "k": 1}},
                 {"name": "k3", "mode": "sd", "policy": {"name": "fixed", "drafter": "mtp", "k": 3}}],
    }
    p = tmp_path / "mtp.yaml"
    p.write_text(yaml.safe_dump(cfg))
    res = run_experiment(p, out=None)
    k1, k3 = (RunProvenance.from_dict(res.summary[n]["provenance"]) for n in ("k1", "k3"))
    assert "mimo-7b:mtp" in k1.draft_costs[0].note and k1.draft_costs[0].source == "roofline"
    assert not any("MTP layer" in n for n in k1.notes)  # k = n_predict = 1: no reuse
    assert any("runs its 1 MTP layer(s) 3 times per step" in n for n in k3.notes)
    assert k3.acceptance[0].extrapolated and k3.acceptance[0].measured_k == 1
    assert res.summary["k3"]["mean_acceptance_length"] > res.summary["k1"]["mean_acceptance_length"]


def test_a_drafters_host_term_is_stated():
    from experiments.provenance import draft_cost_provenance
    from simulator.costs.draft_cost import draft_cost_from_config

    cost = draft_cost_from_config({"kind": "constant", "seconds": 0.002, "host_s": 0.0011})
    assert draft_cost_provenance("d", cost, None, None).note == ("constant: 0.002 s per drafting phase; + 1.1 ms host "
                                                                 "work per drafting phase")
    plain = draft_cost_from_config({"kind": "constant", "seconds": 0.002})
    assert "host" not in draft_cost_provenance("d", plain, None, None).note
