"""The H200 profiles shipped in traces/data/profiles (python -m calibration.gpu_profile on one H200) hold what the
run says and what physics allows: every step a CUDA-graph replay of the stated grid, no step faster than reading
the weights and the KV it touches at the datasheet's bandwidth, and no step faster for more batch, context or drafts
(a decode beside a 2-token verify included)."""
from pathlib import Path

import pytest

from simulator.costs.latency import load_profile, resolve_profile
from traces.catalog import get_gpu, get_model

PROFILES = Path(__file__).resolve().parents[2] / "traces" / "data" / "profiles"
TARGETS = {"llama3.1-8b": 96, "qwen3-8b": 96, "qwen3-32b": 56}
DRAFTERS = ("llama3.2-1b", "qwen3-0.6b")
SPREAD = 0.02  # replays repeat within 1.2%; reruns agreed within 1.5-3.2% (means -0.35..+0.03%)


def _steps(name):
    return {(m.num_seqs, m.extra["query_tokens"], m.extra["context_len"]): m
            for m in load_profile(PROFILES / f"{name}.yaml").measurements}


@pytest.mark.parametrize("name", [f"{m}-h200-hf-bf16" for m in TARGETS]
                         + [f"{m}-h200-hf-bf16-drafter" for m in DRAFTERS])
def test_the_run_is_what_the_provenance_says(name):
    for suffix in ("", "-table") + (("-structured",) if "drafter" not in name else ()):
        p = load_profile(PROFILES / f"{name}{suffix}.yaml")
        assert p.provenance.source == "measured" and "NVIDIA H200" in p.provenance.device
        assert p.provenance.versions["torch"] and "python -m calibration.gpu_profile" in p.provenance.notes
        assert {m.extra["launch"] for m in p.measurements} == {"cuda-graph"}
    model = name.split("-h200")[0]
    steps = _steps(name)
    assert len(steps) == (TARGETS[model] if model in TARGETS else 24)
    assert {q for _, q, _ in steps} == ({1} if "drafter" in name else {1, 2, 4, 8})


@pytest.mark.parametrize("model", list(TARGETS) + list(DRAFTERS))
def test_no_step_beats_the_bandwidth_floor(model):
    name = f"{model}-h200-hf-bf16" + ("-drafter" if model in DRAFTERS else "")
    spec, gpu = get_model(model), get_gpu("h200-141gb")
    for (b, q, c), m in _steps(name).items():
        floor = (spec.weight_bytes + spec.kv_bytes_per_token() * b * (c + q)) / (gpu.bandwidth_gbps * 1e9)
        assert m.seconds > floor, (b, q, c)


@pytest.mark.parametrize("model", list(TARGETS))
def test_more_work_is_never_faster(model):
    steps = {k: m.seconds for k, m in _steps(f"{model}-h200-hf-bf16").items()}
    for (b, q, c), t in steps.items():
        for more in ((2 * b, q, c), (b, q, 4 * c), (b, 2 * q, c)):
            if more in steps:
                assert steps[more] > t * (1 - SPREAD), ((b, q, c), more)


def test_the_structured_profiles_price_steps():
    for model in TARGETS:
        prof = resolve_profile(f"{model}-h200-hf-bf16-structured")
        measured = _steps(f"{model}-h200-hf-bf16")[(8, 4, 1024)]
        assert prof.step_time(measured.num_seqs, measured.batched_tokens, measured.kv_tokens) == pytest.approx(
            measured.seconds, rel=0.25)
