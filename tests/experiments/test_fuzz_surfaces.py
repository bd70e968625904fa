"""Seeded fuzzing of the config families beside the experiment config: plan, sweep, cluster/router and
validate configs (issue 17, class 1 and 2).

Built-invalid documents (a value of the wrong type, out of range, a cross-field contradiction, a size that
would expand without bound) must be refused with a ValueError naming the key; blind mutations (a random value
at a random key) may be accepted, and an accepted document must then hold only the types its schema states
(nothing coerced). Every case runs under a CPU-time limit; no other exception may escape.
"""
from __future__ import annotations

import copy
import random

import pytest

from calibration.vllm_steps.validate_run import ValidateConfig
from experiments.config import ConfigError, load_config, read_config_doc
from experiments.plan.config import load_plan_config
from experiments.sweep.experiment import sweep_points
from tests.experiments.test_fuzz_config import BASE, _set
from tests.fuzz_support import FuzzTally
from traces.config_base import validate_document
from traces.limits import MAX_PLAN_CANDIDATES, MAX_SWEEP_POINTS

SEED = 20261217
NAN, INF = float("nan"), float("inf")
COERCIBLE = ["20", True, "inf", NAN, INF, -INF]  # never a number or an integer of a strict schema
INT_ONLY = [1.0, 2.5]  # never an integer

PLAN, _ = read_config_doc("plan_llama8b")
PLAN_MUST_REJECT = {
    "search.seeds": [0, 101, *INT_ONLY],
    "search.max_tests": [0, 61, *INT_ONLY],
    "search.tail_requests": [0, *INT_ONLY],
    "search.rel_tol": [0, 1, -0.5],
    "search.rate_max": [0, -1, 1e12],
    "search.curve_fractions": [[0.0], [1.0], [1.5], ["x"]],
    "traffic.target_rate": [0, -1, 1e12],
    "traffic.num_requests": [0, 10**12, *INT_ONLY],
    "traffic.arrival": ["nope", "gamma"],
    "traffic.cv": [0.5],
    "slo.ttft_s": [0, -1],
    "slo.attainment": [0, 1.5],
    "candidates.gpus": [[], ["h100-80gb", "H100-80GB"], ["h100-81gb"], [5]],
    "candidates.tp": [[], [0], [1, 1], [1, True], [1.0], [2000]],
    "candidates.replicas": [[0], [10**6], [1, 1], ["2"]],
    "candidates.target": ["llama3.1-70b", 5],
    "candidates.modes": [[], [{"name": "a", "mode": "ar"}, {"name": "a", "mode": "ar"}],
                         [{"name": "p", "mode": "psd", "placement": "colocated"}]],
    "candidates.router": [{"name": "nope"}, {"name": "round_robin", "key": "trace"},
                          {"name": "affinity", "max_outstanding": 0}, {"name": "affinity", "max_outstanding": "3"}],
    "candidates.roofline": [{"mfu": 0}, {"mfu": 1.5}, {"floor_s": -1}, {"bandwidth_util": 0}, {"nope": 1},
                            {"allreduce_latency_s": -1}, {"mfu": "0.5"}, {"overlap": "kernel"}, {"host_s": -1},
                            {"overlap": 1.0}],
    "candidates.profiles": [{"b200": {1: "llama3.1-8b-h100-specbench"}},
                            {"H100-80GB": {1: "llama3.1-8b-h100-specbench"}},
                            {"h100-80gb": {8: "llama3.1-8b-h100-specbench"}},
                            {"h100-80gb": {1: "eagle3-llama3.1-8b-h100-specbench"}},
                            {"h100-80gb": {1: "no-such-profile"}}, {"h100-80gb": {"1": "llama3.1-8b-h100-specbench"}}],
    "candidates.scheduler": [{"max_num_seqs": []}, {"kv_capacity_tokens": [1]},
                             {"max_num_seqs": list(range(1, MAX_PLAN_CANDIDATES + 1))}],
    "candidates.deployment": [{"gpu": "x"}],
    "prices.usd_per_gpu_hour": [{"h100-80gb": 0}, {"h100-80gb": -1}, {"x100": 2.0},
                                {"h100-80gb": 2.0, "H100-80GB": 3.0}, {"h100-80gb": 1e9}],
    "seed": [-1, 2**64],
    "kind": ["nope"],
    "unknown_key": [1],
}
# values typed as a number everywhere in PLAN_MUST_REJECT get COERCIBLE too
PLAN_NUMERIC = ["search.seeds", "search.max_tests", "search.rate_max", "traffic.target_rate", "traffic.num_requests",
                "slo.ttft_s", "slo.attainment", "seed"]
PLAN_BLIND_KEYS = ["search.seeds", "search.max_tests", "search.rel_tol", "traffic.target_rate", "traffic.num_requests",
                   "slo.ttft_s", "slo.tpot_s", "slo.attainment", "candidates.tp", "candidates.replicas",
                   "candidates.gpus", "candidates.roofline.mfu", "candidates.router.name", "seed", "traffic.cv"]
BLIND_VALUES = [None, 0, 1, 2, 3, 64, 0.25, 0.99, 1.5, 1e6, "x", "1", [], [1], [1, 2], ["h100-80gb"], {}, True]


def _names(key: str):
    parts = [p for p in key.split(".") if not p.isdigit()]

    def check(e: BaseException) -> str | None:
        return None if any(p in str(e) for p in parts) else f"message does not name the key {key!r}"
    return check


@pytest.mark.parametrize("chunk", [0, 1])
def test_fuzz_plan_configs_built_invalid_are_rejected(chunk):
    tally = FuzzTally(f"plan configs built invalid (part {chunk + 1}/2)")
    for key, values in list(PLAN_MUST_REJECT.items())[chunk::2]:
        for value in [*values, *(COERCIBLE if key in PLAN_NUMERIC else [])]:
            doc = copy.deepcopy(PLAN)
            _set(doc, key, value)
            tally.run(f"{key} = {str(value)[:40]}", lambda doc=doc: load_plan_config(doc), clean=(ValueError,),
                      must_reject=True, cpu_s=10, check_message=_names(key))
    tally.assert_clean(min_cases=50)


def _strict_plan(plan) -> None:
    """An accepted plan holds the schema's own types: nothing was coerced."""
    for v in (plan.search.seeds, plan.search.max_tests, plan.search.tail_requests, *plan.candidates.tp, *plan.candidates.replicas):
        assert type(v) is int, f"{v!r} is not an int"
    for v in (plan.slo.attainment, plan.traffic.target_rate):
        assert v is None or (type(v) in (int, float) and v == v and abs(v) != INF), f"{v!r} is not a finite number"
    size = len(plan.candidates.gpus) * len(plan.candidates.tp) * len(plan.candidates.replicas) * \
        len(plan.candidates.modes)
    assert size <= MAX_PLAN_CANDIDATES


def test_fuzz_plan_configs_blind_values():
    rng = random.Random(SEED)
    tally = FuzzTally("plan configs with a random value at a random key")
    for case in range(80):
        doc = copy.deepcopy(PLAN)
        key, value = rng.choice(PLAN_BLIND_KEYS), rng.choice(BLIND_VALUES)
        _set(doc, key, value)
        tally.run(f"{key} = {value!r}", lambda doc=doc: load_plan_config(doc), clean=(ValueError,),
                  must_reject=False, cpu_s=10, check_accepted=_strict_plan)
    tally.assert_clean(min_cases=80)


def test_set_reads_exponent_numbers_as_numbers():
    plan = load_plan_config(copy.deepcopy(PLAN), ["traffic.target_rate=1e3", "search.rate_max=2.5E3"])
    assert plan.traffic.target_rate == 1000.0 and plan.search.rate_max == 2500.0
    with pytest.raises(ConfigError, match=r"search.seeds: expected a valid integer \(got 3.0\)"):
        load_plan_config(copy.deepcopy(PLAN), ["search.seeds=3e0"])


SWEEP_MUST_REJECT = [
    {"grid": {"runs.1.policy.k": [1, 2], "runs.-2.policy.k": [3]}},  # one value named twice
    {"grid": {"runs.1.policy": [{"name": "fixed", "drafter": "eagle3", "k": 1}], "runs.1.policy.k": [2]}},
    {"grid": {"runs.1.policy.k": [1]}, "random": {"samples": 2, "params": {"runs.1.policy.k": {"int": [1, 3]}}}},
    {"random": {"samples": MAX_SWEEP_POINTS + 1, "params": {"seed": {"int": [0, 9]}}}},
    {"grid": {"seed": list(range(200)), "workload.arrival.rate": [float(r) for r in range(1, 200)]}},
    {"random": {"samples": "3", "params": {"seed": {"int": [0, 9]}}}},
    {"random": {"samples": 2.0, "params": {"seed": {"int": [0, 9]}}}},
    {"random": {"samples": 2, "params": {"seed": {"int": [0.5, 9]}}}},
    {"random": {"samples": 2, "params": {"workload.arrival.rate": {"loguniform": [0, 9]}}}},
    {"random": {"samples": 2, "params": {"workload.arrival.rate": {"uniform": [9, 1]}}}},
    {"random": {"samples": 2, "params": {"x": {"normal": [0, 1]}}}},
    {"grid": {"runs.9.policy.k": [1]}},
    {"grid": {"runs.1.policy.k": []}},
    {"grid": {"runs.1.policy.k": [1.5]}},
    {"grid": {"server.max_num_seqs": ["8"]}},
    {"seed": "1", "grid": {"seed": [1]}},
    {"seed": -1, "grid": {"seed": [1]}},
    {},
]


def test_fuzz_sweep_blocks_built_invalid_are_rejected():
    tally = FuzzTally("sweep blocks built invalid")
    for i, sweep in enumerate(SWEEP_MUST_REJECT):
        doc = {**copy.deepcopy(BASE), "sweep": sweep}
        tally.run(f"sweep {i}: {str(sweep)[:60]}", lambda doc=doc: sweep_points(load_config(doc)),
                  clean=(ValueError,), must_reject=True, cpu_s=20,
                  check_message=lambda e: None if "sweep" in str(e) else "message does not name the sweep")
    tally.assert_clean(min_cases=len(SWEEP_MUST_REJECT))


CLUSTER_MUST_REJECT = [
    {"replicas": 10**6}, {"replicas": 0}, {"replicas": "4"}, {"replicas": True}, {"replicas": 2.0}, {"replicas": []},
    {"replicas": [{"nope": 1}]}, {"replicas": [{}] * 2000}, {"replicas": 2, "router": {"name": "nope"}},
    {"replicas": 2, "router": {"name": "least_kv", "key": "trace"}},
    {"replicas": 2, "router": {"name": "affinity", "key": "nope"}},
    {"replicas": 2, "router": {"name": "affinity", "max_outstanding": 1.5}},
    {"replicas": 2, "router": {"name": "affinity", "max_outstanding": 2**40}},
    {"replicas": 2, "extra": 1}, {"router": {"name": "round_robin"}}, {"replicas": INF}, {"replicas": NAN},
]


def test_fuzz_cluster_blocks_built_invalid_are_rejected():
    tally = FuzzTally("cluster blocks built invalid")
    for i, cluster in enumerate(CLUSTER_MUST_REJECT):
        for where in ("cluster", "runs.1.cluster"):
            doc = copy.deepcopy(BASE)
            _set(doc, where, cluster)
            tally.run(f"{where} {i}: {str(cluster)[:60]}", lambda doc=doc: load_config(doc), clean=(ValueError,),
                      must_reject=True, cpu_s=10,
                      check_message=lambda e: None if "cluster" in str(e) else "message does not name cluster")
    tally.assert_clean(min_cases=2 * len(CLUSTER_MUST_REJECT))


VALIDATE_BASE = {"modes": ["ar", "ngram:4"], "load": {"fractions": [0.3, 0.6, 0.9]}}
VALIDATE_MUST_REJECT = {
    "max_num_seqs": [0, "8", True, 8.0], "seed": ["0", 1.5], "timeout_s": [1, "60"],
    "memory_utilization": [0, 1.5, "0.3", NAN], "modes": [[], ["nope"], "ar"], "min_n": [0, 1.5],
    "load.fractions": [[0.3], [0.3, 0.6, 3.0], [0.3, 0.6, "x"]], "load.requests": [1, "12"],
    "calibration.batch_sizes": [[], [1.0]], "calibration.gap_s": [0, INF],
    "tolerances": [{"other": {}}, {"replay": {"ttft_mean_s": 0}}, {"replay": {"ttft_mean_s": "5"}}],
    "unknown": [1],
}


def test_fuzz_validate_configs_built_invalid_are_rejected():
    tally = FuzzTally("validate configs built invalid")
    for key, values in VALIDATE_MUST_REJECT.items():
        for value in values:
            doc = copy.deepcopy(VALIDATE_BASE)
            _set(doc, key, value)
            tally.run(f"{key} = {str(value)[:40]}", lambda doc=doc: validate_document(ValidateConfig, doc, "v.yaml"),
                      clean=(ValueError,), must_reject=True, cpu_s=5, check_message=_names(key))
    tally.run("base", lambda: validate_document(ValidateConfig, copy.deepcopy(VALIDATE_BASE), "v.yaml"),
              clean=(ValueError,), must_reject=False)
    tally.assert_clean(min_cases=30)
