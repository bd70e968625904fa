"""Seeded fuzzing of experiment configs and `--set` overrides, run end to end (load, policies, simulation).

Built-invalid configs (a bad value at a known key, bad `--set` items, duplicate YAML keys, deep nesting,
names that are paths) must be rejected with a ValueError (ConfigError, TraceFormatError) whose message names
the key or the --set item; blind mutations (a random value at a random key) may be accepted, and are then
simulated under a time limit. No other exception may escape and nothing may hang.
"""
from __future__ import annotations

import copy
import json
import random

import pytest
import yaml

from experiments.config import ConfigError, load_config
from experiments.run import run_experiment
from tests.fuzz_support import FuzzTally

SEED = 20261202
NAN, INF = float("nan"), float("inf")

BASE = {
    "name": "fuzz",
    "seed": 0,
    "traces": "builtin:default",
    "workload": {"num_requests": 6, "arrival": {"kind": "poisson", "rate": 40.0},
                 "sample": {"with_replacement": True}},
    "server": {"target_profile": "llama3.1-8b-h100-specbench", "step_overhead_s": 0.001, "max_num_seqs": 4,
               "max_num_batched_tokens": 2048, "block_size": 16, "kv_capacity_tokens": 8192},
    "drafters": {"eagle3": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"},
                 "ngram": {"kind": "fraction_of_verify", "fraction": 0.01}},
    "runs": [{"name": "AR", "mode": "ar"},
             {"name": "sd", "mode": "sd", "policy": {"name": "fixed", "drafter": "eagle3", "k": 3}},
             {"name": "psd", "mode": "psd", "policy": {"name": "fixed", "drafter": "ngram", "k": 2}}],
    "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
}
WRONG_TYPES = [[1], {"a": 1}, json.loads("[" * 100 + "]" * 100), NAN, INF, -INF]
# dotted key -> values that must be rejected there (WRONG_TYPES are tried everywhere too)
MUST_REJECT = {
    "name": ["../x", "/abs/x", "a/b", "..", ".", "", "a\\b", 5, None, "x" * 200],
    "seed": [-1, 1.5, "1", 2**64, True],
    "workload.num_requests": [0, -1, 1.5, 1e12, 10**12, "5", True],
    "workload.arrival.rate": [0, -1, "x", 1e12],
    "workload.arrival": [{"kind": "gamma", "rate": 5.0, "cv": INF}, {"kind": "gamma", "rate": 5.0, "cv": 0},
                         {"kind": "gamma", "rate": 5.0, "cv": 1e-300}, {"kind": "closed_loop", "clients": 0},
                         {"kind": "closed_loop", "clients": 1.5}, {"kind": "closed_loop", "clients": 10**12},
                         {"kind": "nope"}, {"kind": "poisson"}],
    "workload.lengths": [{"source": "parametric", "prompt": {"dist": "constant", "value": 2**64},
                          "output": {"dist": "constant", "value": 8}},
                         {"source": "parametric", "prompt": {"dist": "constant", "value": 1.5},
                          "output": {"dist": "constant", "value": 8}},
                         {"source": "parametric", "prompt": {"dist": "lognormal", "median": INF, "sigma": 1,
                                                             "max": 10}, "output": {"dist": "constant", "value": 8}}],
    "workload.sample.with_replacement": ["yes", 1],
    "server.max_num_seqs": [0, 1.5, "64", 64.0],
    "server.kv_capacity_tokens": [0, -1, 1.5],
    "server.step_overhead_s": [-1, "x"],
    "server.block_size": [0, 1.5],
    "server.target_profile": [5, "no-such-profile", {"kind": "linear", "name": "x", "coefficients": {"const": -1}}],
    "drafters.ngram.fraction": [-0.5, -1e-9, "x"],
    "drafters.ngram.kind": ["nope", 5],
    "drafters.eagle3": [[], 5, {"kind": "whole_proposal"}, {"kind": "constant", "seconds": -1}],
    "drafters.eagle3.profile": ["no-such-profile"],
    "runs": [[], 5, {}],
    "runs.1.mode": ["xx", None],
    "runs.1.policy.k": [1.5, 1e20, 10**20, -1, "3", True, 65],
    "runs.1.policy.name": ["nope", 5],
    "runs.1.policy": [{"name": "adaptive-k", "drafter": "eagle3", "prior_weight": 0},
                      {"name": "adaptive-k", "drafter": "eagle3", "k_max": 1.5},
                      {"name": "k-by-batch", "drafter": "eagle3", "ranges": [{"min_batch": 1, "max_batch": None,
                                                                              "k": 1.5}]},
                      {"name": "ucb", "drafters": ["eagle3", "ngram"], "seed": -1},
                      {"name": "fixed", "drafter": "eagle3", "k": 3, "extra": 1}],
    "runs.1.switch_cost_s": [-1],
    "runs.1.server": [{"max_num_seqs": 0}, {"nope": 1}, {"step_overhead_s": NAN}],
    "runs.2.psd": [{"sync_s": -1}, {"sub_batch_max_num_seqs": 0}, {"sync_s": INF}],
    "slo.ttft_s": [0, -1],
    "timeline_max_steps": [-1, 1.5],
    "baseline": ["nope"],
    "traces": ["no/such/folder", 5, "builtin:nope", {"pool": {"nope": 1}}, {"other": {}}, {"pool": {"strong": "x"}},
               {"pool": {"num_requests": 10**12}}, {"pool": {"output_len": [1, 2, 3]}}, {"pool": {"weak": NAN}},
               {"pool": [1]}],
    "unknown_key": [1],
}
BAD_SET_ITEMS = [
    "workload.arrival.rate=[1", "name=!!python/object/apply:os.system [x]", "a.b", "=5", "runs.99.policy.k=3",
    "runs.x.mode=ar", "workload.num_requests=1e12", "workload.num_requests=1000000000000", "seed=-1",
    "name=../../x", "server..max_num_seqs=3", "description.x=1", "runs.1.policy.k=1.5", "workload.arrival.rate=.nan",
    "server={max_num_seqs: 3, max_num_seqs: 4}", "workload.arrival.cv=.inf", "workload.arrival.rate={a: [1",
    "server.max_num_seqs=&a [*a]", "server.max_num_seqs=" + "[" * 200 + "]" * 200, "drafters.ngram.fraction=-0.1",
    "runs.1.policy.k=100000000000000000000", "slo.ttft_s=.inf", "name=/tmp/x", "runs.-9.mode=ar",
]
BLIND_KEYS = ["seed", "workload.num_requests", "workload.arrival.rate", "server.max_num_seqs",
              "server.max_num_batched_tokens", "server.block_size", "server.kv_capacity_tokens",
              "server.step_overhead_s", "drafters.ngram.fraction", "runs.1.policy.k", "runs.2.policy.k",
              "runs.1.switch_cost_s", "slo.ttft_s", "timeline_max_steps", "runs.2.psd", "server.chunked_prefill"]
BLIND_VALUES = [None, 0, 1, 2, 3, 7, 64, 4096, 1.5, 0.25, 1e-9, 1e6, "x", [], {}, True, False]


def _set(doc: dict, key: str, value) -> None:
    node = doc
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _names_key(key: str):
    leaf = key.split(".")[-1]

    def check(e: BaseException) -> str | None:
        text = str(e)
        if leaf in text or key.split(".")[0] in text:
            return None
        return f"message does not name the key {key!r}"
    return check


def _consistent(res) -> None:
    assert set(res.summary) == {"AR", "sd", "psd"}, sorted(res.summary)
    for name, s in res.summary.items():
        if s.get("fits", True):
            assert s["num_finished"] == s["num_requests"], (name, s["num_finished"], s["num_requests"])


@pytest.mark.parametrize("chunk", [0, 1])
def test_fuzz_configs_built_invalid_are_rejected(chunk):
    tally = FuzzTally(f"configs built invalid (part {chunk + 1}/2)")
    items = list(MUST_REJECT.items())[chunk::2]
    for key, values in items:
        extra = [] if key in ("runs.1.policy", "workload.arrival", "workload.lengths", "traces") else WRONG_TYPES
        for value in [*values, *extra]:
            doc = copy.deepcopy(BASE)
            _set(doc, key, value)
            tally.run(f"{key} = {str(value)[:50]}", lambda: run_experiment(doc), clean=(ValueError,),
                      must_reject=True, cpu_s=20, check_message=_names_key(key))
    tally.assert_clean(min_cases=100)


def test_fuzz_set_overrides_built_invalid_are_rejected():
    tally = FuzzTally("--set items built invalid")
    for item in BAD_SET_ITEMS:
        def names_item(e: BaseException, item=item) -> str | None:
            key = item.split("=", 1)[0]
            return None if (item in str(e) or key.split(".")[-1] in str(e)) else "message names neither item nor key"
        tally.run(f"--set {item}", lambda: load_config(copy.deepcopy(BASE), [item]), clean=(ConfigError,),
                  must_reject=True, cpu_s=5, check_message=names_item)
    tally.assert_clean(min_cases=len(BAD_SET_ITEMS))


def test_fuzz_config_yaml_text(tmp_path):
    """Duplicate keys, bad bytes and truncation in the config file itself: a ConfigError naming the file."""
    text = yaml.safe_dump(BASE, sort_keys=False)
    rng = random.Random(SEED)
    tally = FuzzTally("config files")
    path = tmp_path / "exp.yaml"
    cases = {
        "duplicate top key": text + "seed: 3\n",
        "duplicate nested key": text.replace("  max_num_seqs: 4\n", "  max_num_seqs: 4\n  max_num_seqs: 5\n"),
        "tag": text + "description: !!python/name:os.system ''\n",
        "alias bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh")) + text,
        "not a mapping": "- 1\n",
        "empty": "",
    }
    for label, content in cases.items():
        path.write_text(content)
        tally.run(label, lambda: load_config(str(path)), clean=(ConfigError,), must_reject=True,
                  check_message=lambda e: None if str(path) in str(e) else "no file name")
    path.write_bytes(text.replace("fuzz", "f\xfczz").encode("latin-1"))
    tally.run("Latin-1 file", lambda: load_config(str(path)), clean=(ConfigError,), must_reject=True,
              check_message=lambda e: None if str(path) in str(e) else "no file name")
    data = text.encode()
    for case in range(120):
        mutated = bytearray(data)
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 3)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        else:
            mutated = mutated[:rng.randrange(len(mutated))]
        path.write_bytes(bytes(mutated))
        tally.run(f"blind case {case}", lambda: load_config(str(path)), clean=(ConfigError,), must_reject=False,
                  check_message=lambda e: None if str(path) in str(e) else "no file name")
    tally.assert_clean(min_cases=120)


def test_fuzz_configs_blind_values_simulate_or_fail_cleanly():
    rng = random.Random(SEED + 1)
    tally = FuzzTally("configs with a random value at a random key, simulated")
    for case in range(60):
        doc = copy.deepcopy(BASE)
        key, value = rng.choice(BLIND_KEYS), rng.choice(BLIND_VALUES)
        _set(doc, key, value)
        tally.run(f"{key} = {value!r}", lambda: run_experiment(doc), clean=(ValueError,), must_reject=False,
                  cpu_s=20, check_accepted=_consistent)
    tally.assert_clean(min_cases=60)
