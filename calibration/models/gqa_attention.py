"""The attention a timed step runs: grouped-query attention that reads each cached key and value once.

transformers' `sdpa` copies every key/value head heads/kv_heads times whenever a step carries a mask: every
verify over a cache does, a decode does not, so a timed verify would read its cache several times more than
the decode beside it and the verify/decode ratio would be the library's, not the model's. Here the query
heads of each KV group are folded into the query length, so a decode and a verify run the same sdpa call
(an additive mask, each KV head read once). A prompt over no cache stays causal sdpa with its GQA flag.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

NAME = "draftsim_gqa"


def gqa_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                  scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention-function interface: query [b, heads, q, d], key/value [b, kv_heads, kv, d];
    returns [b, q, heads, d]. `attention_mask` is None (a decode, or a prompt over no cache), a bool mask
    (True = visible) or an additive float mask, of shape [b or 1, 1, q, kv]."""
    import torch
    import torch.nn.functional as F

    b, heads, q, d = query.shape
    kv_heads, kv = key.shape[1], key.shape[2]
    if attention_mask is None and q > 1:
        if kv != q:
            raise ValueError(f"{NAME}: {q} query tokens over {kv} keys without a mask (only a prompt over no cache "
                             "may come without one)")
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                             enable_gqa=heads != kv_heads)
        return out.transpose(1, 2).contiguous(), None
    group = heads // kv_heads
    folded = query.reshape(b, kv_heads, group * q, d)  # query head h = kv head h // group, as transformers maps it
    if attention_mask is None:  # a decode: every cached token visible, in the mask form a verify gets
        attention_mask = torch.ones(b, 1, q, kv, dtype=torch.bool, device=query.device)
    rows = attention_mask.shape[0]
    mask = attention_mask[:, :, None].expand(rows, 1, group, q, kv).reshape(rows, 1, group * q, kv)
    out = F.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(b, heads, q, d).transpose(1, 2).contiguous(), None


def register() -> None:
    """Make NAME an attention implementation transformers can set (with sdpa's mask rules)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, gqa_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


@contextmanager
def timed_attention(model: Any) -> Iterator[Any]:
    """Run `model` with this attention inside the block, and with its own attention again after it."""
    register()
    before = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        yield model
    finally:
        model.set_attn_implementation(before)
