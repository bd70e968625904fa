"""A plan point's typed config (experiments/plan/point_config.py): the candidate's document validated once per process,
each point's workload and seed set on it; the result is the config the whole document validates to."""
from __future__ import annotations

import pytest

import experiments.plan.point_config as point_config
from experiments.config import load_config
from experiments.plan.candidates import SchedulerSetting, base_experiment, build_candidates
from experiments.plan.config import load_plan_config
from experiments.plan.point_config import point_experiment
from experiments.plan.prices import price_table
from experiments.plan.traffic import TrafficModel
from tests.experiments.test_plan import make_known_case


@pytest.fixture
def candidate(tmp_path):
    case = make_known_case(tmp_path)
    case["candidates"]["modes"] = [{"name": "AR", "mode": "ar"},
                                   {"name": "psd", "mode": "psd", "policy": {"name": "fixed", "drafter": "d", "k": 2}}]
    case["candidates"]["scheduler"] = {"max_num_seqs": [4]}
    plan = load_plan_config(case)
    base = base_experiment(plan)
    return build_candidates(plan, base, price_table()), TrafficModel.of(plan, base)


def _doc(c, traffic, rate: float, seed: int) -> dict:
    workload, _ = traffic.at_rate(rate, 200)
    return {**c.config, "workload": workload, "seed": seed}


def test_a_point_config_is_what_the_whole_document_validates_to(candidate):
    cands, traffic = candidate
    for c in cands:  # AR and PSD (its typed psd block read by concurrent_sequences)
        for rate, seed in ((2.0, 7), (3.5, 123456789)):
            doc = _doc(c, traffic, rate, seed)
            got, whole = point_experiment(doc), load_config(doc)
            assert got == whole
            assert got.model_dump(mode="json") == whole.model_dump(mode="json")
            assert (got.workload.arrival.rate, got.seed) == (rate, seed)


def test_a_candidate_is_validated_once_per_process_whatever_its_rates_and_seeds(candidate, monkeypatch):
    cands, traffic = candidate
    calls = []
    real = point_config.load_config
    monkeypatch.setattr(point_config, "_typed", {})
    monkeypatch.setattr(point_config, "load_config", lambda doc, label=None: calls.append(label) or real(doc, label=label))
    for rate in (1.0, 2.0, 4.0):
        for seed in (1, 2):
            point_experiment(_doc(cands[0], traffic, rate, seed))
    assert len(calls) == 1  # 6 points of one candidate: one validation
    point_experiment(_doc(cands[1], traffic, 1.0, 1))
    assert len(calls) == 2  # another candidate's document: its own


def test_a_bad_point_workload_is_refused_naming_the_key(candidate):
    cands, traffic = candidate
    doc = _doc(cands[0], traffic, 1.0, 1)
    doc["workload"] = {**doc["workload"], "num_requests": 0}
    with pytest.raises(ValueError, match=r"candidate x: workload\.num_requests"):
        point_experiment(doc, "candidate x")


def test_a_scheduler_setting_labels_the_keys_the_grid_varies():
    s = SchedulerSetting((("max_num_seqs", 64), ("scheduler", "draftsim")))
    assert s.server() == {"max_num_seqs": 64, "scheduler": "draftsim"}
    assert s.label({"scheduler"}) == " scheduler=draftsim" and s.label(set()) == ""
    assert s.key() == SchedulerSetting((("scheduler", "draftsim"), ("max_num_seqs", 64))).key()
