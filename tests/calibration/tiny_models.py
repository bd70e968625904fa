"""A tiny random Llama and drafters over it, built the same way in any process (PSD worker tests)."""
from __future__ import annotations


def tiny_llama(seed: int = 0):
    import torch
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=300, max_position_embeddings=512,
                                   tie_word_embeddings=True)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


def tiny_drafters(seed: int = 0) -> tuple[dict, list[int]]:
    """The tiny target's 2-layer truncation and an n-gram drafter; EOS id 7."""
    from calibration.models.drafters import LookupDrafter, ModelDrafter, truncated_copy
    from calibration.models.ngram import NgramDrafter

    target = tiny_llama(seed)
    return ({"layers2": ModelDrafter("layers2", "truncated", truncated_copy(target, 2), {"layers": 2}),
             "ngram": LookupDrafter("ngram", NgramDrafter(1, 3))}, [7])
