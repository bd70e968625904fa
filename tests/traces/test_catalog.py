"""Catalog loading, validation and derived sizes."""
from __future__ import annotations

import pytest
import yaml

from traces.catalog import builtin_gpus, builtin_models, get_gpu, get_model, load_gpus, load_models
from traces.errors import TraceFormatError

REQUIRED_MODELS = ["llama3.1-8b", "llama3.2-1b", "llama3.3-70b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
                   "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-235b-a22b", "vicuna-7b", "vicuna-13b",
                   "vicuna-33b", "smollm2-135m", "gemma3-270m"]
REQUIRED_GPUS = ["h100-80gb", "h200-141gb", "a100-80gb", "l40s"]


def test_catalogs_hold_every_required_entry():
    assert set(REQUIRED_MODELS) <= set(builtin_models())
    assert set(REQUIRED_GPUS) <= set(builtin_gpus())


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_architecture_reproduces_the_stated_parameter_count(name):
    # An independent check of the typed-in config numbers: the architecture must add up to the
    # model card's parameter count (cards round, hence 3%).
    m = get_model(name)
    assert m.derived_params() == pytest.approx(m.params, rel=0.03)


def test_kv_bytes_per_token_by_hand():
    # Llama-3.1-8B: 2 (K,V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 131072 bytes.
    assert get_model("llama3.1-8b").kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    # Qwen3-32B: 2 x 64 x 8 x 128 x 2.
    assert get_model("qwen3-32b").kv_bytes_per_token() == 2 * 64 * 8 * 128 * 2
    # Vicuna-7B has no GQA: 2 x 32 x 32 x 128 x 2.
    assert get_model("vicuna-7b").kv_bytes_per_token() == 2 * 32 * 32 * 128 * 2


def test_sliding_window_layers_hold_at_most_their_window():
    g = get_model("gemma3-270m")
    full = g.kv_bytes_per_token()
    assert g.kv_bytes_per_token(context_len=256) == full
    per_layer = full / g.num_layers
    assert g.kv_bytes_per_token(context_len=4096) == pytest.approx(per_layer * (3 + 15 * 512 / 4096))


def test_moe_active_params_and_weight_bytes():
    m = get_model("qwen3-235b-a22b")
    assert m.is_moe and m.active < m.params / 10
    assert m.weight_bytes == m.params * 2
    # routed experts are most of the model
    assert 0.8 < m.expert_params / m.params < 1.0


def test_gpu_numbers_and_units():
    h100 = get_gpu("H100-80GB")
    assert h100.memory_bytes == 80e9
    assert h100.bandwidth_bytes_s == 3.35e12
    # A100 dense bf16 is well under H100's.
    assert get_gpu("a100-80gb").flops < h100.flops


def test_unknown_names_list_the_catalog():
    with pytest.raises(ValueError, match="qwen3-32b"):
        get_model("qwen3-33b")
    with pytest.raises(ValueError, match="h100-80gb"):
        get_gpu("b200")


def _write(tmp_path, doc, name="models.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


def _good_model():
    return {"hf_id": "x/y", "num_layers": 2, "hidden_size": 8, "num_heads": 2, "num_kv_heads": 1, "head_dim": 4,
            "intermediate_size": 16, "vocab_size": 10, "params": 1000, "dtype": "bf16", "source": "test"}


def test_a_valid_small_catalog_loads(tmp_path):
    models = load_models(_write(tmp_path, {"tiny": _good_model()}))
    assert models["tiny"].kv_bytes_per_token() == 2 * 2 * 1 * 4 * 2


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.update(layers=3), "tiny.layers"),
    (lambda d: d.pop("hidden_size"), "tiny.hidden_size"),
    (lambda d: d.update(num_layers="two"), "tiny.num_layers"),
    (lambda d: d.update(num_layers=2.5), "tiny.num_layers"),
    (lambda d: d.update(params=-1), "tiny.params"),
    (lambda d: d.update(dtype="bf17"), "tiny.dtype"),
    (lambda d: d.update(num_kv_heads=3), "tiny.num_kv_heads"),
    (lambda d: d.update(tie_word_embeddings="yes"), "tiny.tie_word_embeddings"),
    (lambda d: d.update(num_experts=4), "tiny.experts_per_token"),
    (lambda d: d.update(kv_lora_rank=4, qk_nope_head_dim=2, v_head_dim=2), "tiny.qk_rope_head_dim"),
    (lambda d: d.update(linear_attention_layers=1, linear_num_key_heads=1, linear_num_value_heads=1,
                        linear_key_head_dim=2, linear_value_head_dim=2), "tiny.linear_conv_kernel_dim"),
    (lambda d: d.update(linear_attention_layers=2), "tiny.linear_num_key_heads"),
    (lambda d: d.update(first_k_dense_replace=1), "tiny.dense_intermediate_size"),
    (lambda d: d.update(weight_dtype="fp7"), "tiny.weight_dtype"),
])
def test_bad_model_entries_name_file_and_key(tmp_path, mutate, field):
    doc = _good_model()
    mutate(doc)
    path = _write(tmp_path, {"tiny": doc})
    with pytest.raises(TraceFormatError) as e:
        load_models(path)
    assert e.value.field == field
    assert str(path) in str(e.value)


def test_bad_gpu_entries_and_files(tmp_path):
    good = {"memory_gb": 1, "bandwidth_gbps": 1, "bf16_tflops": 1, "link_gbps": 1, "link": "pcie", "source": "t"}
    path = _write(tmp_path, {"g": {**good, "memory": 80}}, "gpus.yaml")
    with pytest.raises(TraceFormatError, match="field 'g.memory'"):
        load_gpus(path)
    path = _write(tmp_path, {"g": {**good, "bandwidth_gbps": 0}}, "gpus.yaml")
    with pytest.raises(TraceFormatError, match="g.bandwidth_gbps"):
        load_gpus(path)
    bad = tmp_path / "broken.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(TraceFormatError, match="not valid YAML"):
        load_gpus(bad)
    with pytest.raises(TraceFormatError, match="not found"):
        load_models(tmp_path / "missing.yaml")
    with pytest.raises(TraceFormatError, match="non-empty mapping"):
        load_models(_write(tmp_path, [1, 2], "list.yaml"))


def test_alias_is_the_same_architecture_under_its_own_name():
    from dataclasses import fields

    from traces.catalog import get_model

    a, b = get_model("llama3.1-70b"), get_model("llama3.3-70b")
    assert (a.name, a.hf_id) == ("llama3.1-70b", "meta-llama/Llama-3.1-70B-Instruct")
    same = [f.name for f in fields(a) if f.name not in ("name", "hf_id", "source")]
    assert all(getattr(a, k) == getattr(b, k) for k in same)
    assert get_model("LLaMA3.1-70B") is a


def test_unknown_names_suggest_the_closest(tmp_path):
    from traces.catalog import get_gpu, get_model

    with pytest.raises(ValueError, match=r"unknown model 'llama3.1-70B-instruct' \(did you mean 'llama3.1-70b'"):
        get_model("llama3.1-70B-instruct")
    with pytest.raises(ValueError, match=r"unknown GPU 'h100' \(did you mean 'h100-80gb'"):
        get_gpu("h100")
    with pytest.raises(ValueError, match=r"unknown GPU 'tpu-v5'; the catalog has"):
        get_gpu("tpu-v5")


@pytest.mark.parametrize("doc, field", [
    ("x: {same_architecture_as: nope, hf_id: a/b, source: s}\n", "x.same_architecture_as"),
    ("x: {same_architecture_as: llama3.1-8b, source: s}\n", "x.hf_id"),
    ("llama3.1-8b: {same_architecture_as: llama3.1-8b, hf_id: a/b, source: s}\n", "llama3.1-8b"),
    ("x: {same_architecture_as: llama3.1-8b, hf_id: a/b, source: s, params: 3}\n", "x.params"),
])
def test_bad_alias_file_names_the_entry(tmp_path, doc, field):
    from traces.catalog import builtin_catalog_dir, load_aliases, load_models

    path = tmp_path / "aliases.yaml"
    path.write_text(doc)
    with pytest.raises(TraceFormatError) as e:
        load_aliases(path, load_models(builtin_catalog_dir() / "models.yaml"))
    assert field in str(e.value) and str(path) in str(e.value)
