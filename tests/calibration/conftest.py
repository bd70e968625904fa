"""Shared fixtures: a tiny random Llama (no downloads, no packages) for fast model tests."""
import pytest


@pytest.fixture(scope="session")
def tiny_llama():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=300, max_position_embeddings=256,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()
