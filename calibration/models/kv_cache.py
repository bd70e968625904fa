"""The KV cache a timed forward runs over, the same on every transformers 5.x.

A timed step must read its cached context and write only its own tokens, as a serving engine's
preallocated KV does: transformers' StaticCache (written in place), filled with random keys and
values (step time does not depend on them, and a batch-128 prompt pass would not fit beside its
logits). transformers renamed the forward's cache argument (`past_key_values` -> `cache`, 5.18);
a forward given the other name silently ignores it and times a step with no context, so the name
is read from the model's signature and `check_written` proves the forward used the cache.
The cache's length is a whole number of KV_ALIGN-token blocks (the slots past the step stay masked), as a
paged KV cache reads whole blocks: torch's memory-efficient attention copies and pads, at every call, a mask
whose rows are not a multiple of 8 keys (aten's preprocess_mask), and over an exactly sized cache a decode's
attention (context + 1 keys, odd) ran up to 1.6x slower than a 2-token verify's (context + 2) on an H200, so
the decode/verify ratio would have been the mask's.
"""
from __future__ import annotations

import inspect
from typing import Any


def cache_argument(model: Any) -> str:
    """The name under which this model's forward takes its KV cache."""
    params = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise TypeError(f"{type(model).__name__}.forward takes neither `cache` nor `past_key_values`")


def kv_shape(config: Any) -> tuple[int, int, int]:
    """(layers, KV heads, head dim) of a model config's cache (KV heads default to the heads: no grouping)."""
    return (int(config.num_hidden_layers),
            int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads),
            int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads))


KV_ALIGN = 16  # tokens per block of the timed cache's length


def cache_slots(tokens: int, align: int = KV_ALIGN) -> int:
    """The cache length that holds `tokens`: rounded up to a whole number of `align`-token blocks."""
    return -(-tokens // align) * align


def random_static_cache(model: Any, batch: int, context: int, room: int, seed: int = 0,
                        align: int = KV_ALIGN) -> Any:
    """A StaticCache of `batch` sequences holding `context` random tokens, with at least `room` free slots after
    them (its length rounded up to whole `align`-token blocks)."""
    import torch
    from transformers import StaticCache

    cfg = model.config.get_text_config(decoder=True)
    first = next(model.parameters())
    dtype = first.dtype if first.dtype.is_floating_point else torch.float32
    layers, kv_heads, head_dim = kv_shape(cfg)
    cache = StaticCache(config=cfg, max_cache_len=cache_slots(context + room, align))
    gen = torch.Generator(device=first.device).manual_seed(seed)
    for layer in range(layers):
        k = torch.randn(batch, kv_heads, context, head_dim, generator=gen, device=first.device, dtype=dtype)
        v = torch.randn(batch, kv_heads, context, head_dim, generator=gen, device=first.device, dtype=dtype)
        cache.update(k, v, layer)
        del k, v
    check_written(cache, context, "filling the cache")
    return cache


def rewind(cache: Any, tokens: int) -> None:
    """Forget the last `tokens` tokens (the next forward overwrites their slots in place)."""
    for layer in cache.layers:
        layer.cumulative_length.sub_(tokens)


def check_written(cache: Any, expected: int, what: str) -> None:
    """Fail unless the cache holds `expected` tokens (a forward that ignored its cache leaves it unchanged)."""
    held = int(cache.get_seq_length())
    if held != expected:
        raise RuntimeError(f"{what}: the KV cache holds {held} tokens, expected {expected}; the forward did not use "
                           "the cache it was given (transformers version?)")
