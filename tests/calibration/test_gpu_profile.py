"""gpu_profile on CPU with tiny sizes (the real run needs CUDA; it was not run in CI)."""
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from calibration.gpu_profile import fits, hf_config_for, main, profile_models  # noqa: E402
from calibration.latency_sweep import SweepConfig  # noqa: E402
from simulator.costs.latency import load_profile  # noqa: E402
from traces.catalog import get_model  # noqa: E402


def _tiny(name):
    return dataclasses.replace(get_model(name), num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                               intermediate_size=128, vocab_size=500, params=200_000)


def test_configs_follow_the_catalog():
    spec = get_model("qwen3-8b")
    cfg = hf_config_for(spec)
    assert type(cfg).__name__ == "Qwen3Config"
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads) == (spec.num_layers, spec.hidden_size,
                                                                                  spec.num_kv_heads)
    assert type(hf_config_for(get_model("llama3.1-8b"))).__name__ == "LlamaConfig"


def test_memory_rule():
    spec = get_model("qwen3-32b")
    assert not fits(spec, 1, 1024, free_bytes=40 * 2**30)  # 64 GB of bf16 weights
    assert fits(spec, 1, 1024, free_bytes=139 * 2**30)


def test_tiny_models_profile_on_cpu(tmp_path):
    sweep = SweepConfig(batch_sizes=[1, 2], query_tokens=[1, 2], context_lens=[8, 16], warmup=1, repeats=2)
    rows = profile_models([_tiny("llama3.2-1b"), _tiny("qwen3-0.6b")], device="cpu", dtype="float32", sweep=sweep,
                          out_dir=tmp_path, progress=False)
    assert [r["profile"] for r in rows] == ["llama3.2-1b-cpu-hf-float32", "qwen3-0.6b-cpu-hf-float32"]
    prof = load_profile(tmp_path / "qwen3-0.6b-cpu-hf-float32.yaml")
    assert prof.model == "qwen3-0.6b" and len(prof.measurements) == 8
    assert load_profile(tmp_path / "qwen3-0.6b-cpu-hf-float32-table.yaml").kind == "table"


def test_verify_width_surface_prefills_and_drafters_on_cpu(tmp_path):
    from simulator.costs.step_model import shape_of

    sweep = SweepConfig(batch_sizes=[1, 2], query_tokens=[1, 3], context_lens=[8, 16], warmup=1, repeats=2)
    rows = profile_models([_tiny("llama3.2-1b")], device="cpu", dtype="float32", sweep=sweep, out_dir=tmp_path,
                          progress=False, prefill_lens=[8, 24], drafter_specs=[_tiny("qwen3-0.6b")])
    assert [r["profile"] for r in rows] == ["llama3.2-1b-cpu-hf-float32", "qwen3-0.6b-cpu-hf-float32-drafter"]
    s = load_profile(tmp_path / "llama3.2-1b-cpu-hf-float32-structured.yaml")
    shapes = [shape_of(m) for m in s.measurements]
    assert sorted({x.phase for x in shapes}) == ["decode", "prefill", "verify"] and len(shapes) == 8 + 2
    # a batch-2 verify of 2 drafts each over 16 cached tokens; a lone 24-token prompt
    assert any((x.decode_seqs, x.draft_tokens, x.decode_kv) == (2, 4, 32) for x in shapes)
    assert any((x.prefill_seqs, x.prefill_tokens, x.prefill_attn) == (1, 24, 576) for x in shapes)
    assert "grid: batch [1, 2] x query tokens [1, 3] x context [8, 16]; lone prompts of [8, 24]" in s.provenance.notes
    assert s.provenance.versions["torch"] and rows[0]["structured"]["form"] in ("linear", "roofline")
    d = load_profile(tmp_path / "qwen3-0.6b-cpu-hf-float32-drafter.yaml")
    assert {m.extra["query_tokens"] for m in d.measurements} == {1} and len(d.measurements) == 4
    assert not (tmp_path / "qwen3-0.6b-cpu-hf-float32-drafter-structured.yaml").exists()
    before = (tmp_path / "llama3.2-1b-cpu-hf-float32.yaml").read_bytes()
    with pytest.raises(FileExistsError, match="llama3.2-1b-cpu-hf-float32.yaml"):
        profile_models([_tiny("llama3.2-1b")], device="cpu", dtype="float32", sweep=sweep, out_dir=tmp_path,
                       progress=False)
    assert (tmp_path / "llama3.2-1b-cpu-hf-float32.yaml").read_bytes() == before


def test_main_refuses_without_cuda(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["--models", "llama3.2-1b"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--device", "cpu", "--models", "nosuch"], "gpu_profile: unknown model 'nosuch'; the catalog has"),
    (["--device", "cpu", "--batch-sizes", "1,x"],
     "gpu_profile: --batch-sizes: expected comma-separated integers, got '1,x'"),
    (["--device", "cpu", "--query-tokens", "0"], "query_tokens must be a non-empty list of integers >= 1"),
])
def test_bad_arguments_get_one_line_naming_them(argv, says, capsys, tmp_path):
    assert main(argv + ["--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and not any(tmp_path.iterdir())
