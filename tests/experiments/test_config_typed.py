"""Configs keep their typed objects from load to use: traces as a typed source, policies as records, a drafter's
inline profile resolved once; the dumped document (what --set, sweeps and hashes read) round-trips."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import simulator.costs.draft_cost as draft_cost
from experiments.config import builtin_configs, load_config
from experiments.run import prepare
from policies.registry import PolicySpec
from traces.source import AnySource, PoolSource, SynthSource

ROOT = Path(__file__).resolve().parents[2]
RUN_CONFIGS = [n for n in builtin_configs() if not n.startswith("plan_")]
EXAMPLES = sorted(str(p) for p in (ROOT / "docs" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("source", RUN_CONFIGS + EXAMPLES)
def test_shipped_configs_hold_typed_parts_and_their_dump_round_trips(source, monkeypatch):
    monkeypatch.chdir(ROOT)  # docs examples name files from the repository root
    try:
        cfg = load_config(source)
    except Exception as e:  # a docs example that is not an experiment config (a plan) is not this test's
        pytest.skip(f"not an experiment config: {e}")
    assert isinstance(cfg.traces, AnySource.__args__)
    assert all(r.policy is None or isinstance(r.policy, PolicySpec) for r in cfg.runs)
    doc = cfg.model_dump(mode="json")
    again = load_config(doc)
    assert json.dumps(again.model_dump(mode="json"), sort_keys=True) == json.dumps(doc, sort_keys=True)
    assert again.traces == cfg.traces and [r.policy for r in again.runs] == [r.policy for r in cfg.runs]


def test_generated_sources_are_typed_and_set_reaches_them():
    cfg = load_config("bandit_drafters", ["traces.pool.strong=0.7"])
    assert isinstance(cfg.traces, PoolSource) and cfg.traces.pool.strong == 0.7
    assert cfg.model_dump(mode="json")["traces"]["pool"]["strong"] == 0.7
    psd = load_config("psd_vs_sd", ["traces.synthetic.num_requests=24"])
    assert isinstance(psd.traces, SynthSource) and psd.traces.synthetic.num_requests == 24


def test_an_inline_roofline_drafter_profile_resolves_once(monkeypatch):
    calls = []
    real = draft_cost.profile_from_ref

    def counting(ref, where):
        calls.append(where)
        return real(ref, where)

    monkeypatch.setattr(draft_cost, "profile_from_ref", counting)
    inline = "{kind: autoregressive, profile: {kind: roofline, model: qwen3-0.6b, gpu: h100-80gb, tp: 1}}"
    cfg = load_config("default", [f"drafters.eagle3={inline}"])
    assert calls == ["drafters.eagle3.profile"]  # at load: the model and GPU resolve there
    scenarios = prepare(cfg)  # three eagle3 runs
    assert sum(1 for sc in scenarios if "eagle3" in sc.name) == 3
    assert calls == ["drafters.eagle3.profile"]  # not again per run (ngram's fraction has no profile)
    costs = [sc.draft_costs["eagle3"] for sc in scenarios]
    assert all(c is costs[0] for c in costs) and costs[0].profile.name == cfg.drafters["eagle3"].cost().profile.name
