"""Per-sequence KV caches for one causal LM, run as one padded batch per forward.

Every sequence keeps its own KV buffer (so requests join, leave, and roll back a rejected proposal
independently). A forward gathers the sequences it serves into one left-padded batch: past keys
right-aligned, new tokens right-aligned, and an explicit 4-D boolean mask (valid past, causal among
the new tokens; a pad query sees only itself so nothing is NaN). Positions are explicit, so padding
never shifts RoPE. The new keys/values are copied back into each sequence's buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calibration.models.kv_cache import cache_argument, kv_shape


@dataclass
class SeqKV:
    """One sequence's KV cache in one model: buffer [layers, 2, kv_heads, capacity, head_dim], `length` used."""

    buf: Any
    length: int = 0

    def truncate(self, length: int) -> None:
        """Forget cached tokens beyond `length` (a rejected proposal)."""
        if length < self.length:
            self.length = length


class BatchedLM:
    """A causal LM serving many sequences; `forward` batches any subset of them (EOS logits forbidden)."""

    def __init__(self, model: Any, eos: list[int]):
        cfg = model.config
        self.model = model
        self.eos = list(eos)
        self.layers, self.kv_heads, self.head_dim = kv_shape(cfg)
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.cache_kw = cache_argument(model)

    def new_seq(self, capacity: int) -> SeqKV:
        """An empty cache for up to `capacity` tokens."""
        import torch

        return SeqKV(torch.zeros(self.layers, 2, self.kv_heads, capacity, self.head_dim, dtype=self.dtype,
                                 device=self.device))

    def forward(self, seqs: list[SeqKV], tokens: list[list[int]], last_only: bool = False) -> list[Any]:
        """Append `tokens[i]` (>= 1 each) to `seqs[i]` in one batched forward; float32 logits per sequence,
        one row per new token (or only the last one with `last_only`)."""
        import torch
        from transformers import DynamicCache

        if len(seqs) != len(tokens) or not seqs or any(len(t) == 0 for t in tokens):
            raise ValueError("BatchedLM.forward: one non-empty token list per sequence expected")
        b = len(seqs)
        past = max(s.length for s in seqs)
        n = max(len(t) for t in tokens)
        dev = self.device
        ids = torch.zeros(b, n, dtype=torch.long, device=dev)
        pos = torch.zeros(b, n, dtype=torch.long, device=dev)
        key_ok = torch.zeros(b, past + n, dtype=torch.bool, device=dev)
        for i, (s, t) in enumerate(zip(seqs, tokens)):
            m = len(t)
            ids[i, n - m:] = torch.tensor(t, dtype=torch.long)
            pos[i, n - m:] = torch.arange(s.length, s.length + m)
            key_ok[i, past - s.length:past] = True
            key_ok[i, past + n - m:] = True
        causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
        mask = torch.cat([key_ok[:, None, :past].expand(b, n, past),
                          key_ok[:, None, past:] & causal[None]], dim=-1)
        mask[:, torch.arange(n), past + torch.arange(n)] = True  # a pad query sees itself: no empty rows
        with torch.inference_mode():
            cache = DynamicCache(config=self.model.config)
            if past:
                kv = torch.zeros(self.layers, 2, b, self.kv_heads, past, self.head_dim, dtype=self.dtype, device=dev)
                for i, s in enumerate(seqs):
                    if s.length:
                        kv[:, :, i, :, past - s.length:] = s.buf[:, :, :, :s.length]
                for layer in range(self.layers):
                    cache.update(kv[layer, 0], kv[layer, 1], layer)
            out = self.model(input_ids=ids, attention_mask=mask[:, None], position_ids=pos, use_cache=True,
                             logits_to_keep=1 if last_only else 0, **{self.cache_kw: cache})
            new = torch.stack([torch.stack([cache.layers[layer].keys[:, :, past:], cache.layers[layer].values[:, :, past:]])
                               for layer in range(self.layers)])  # [layers, 2, b, heads, n, dim]
            logits = out.logits.float()
            if self.eos:
                logits[..., self.eos] = float("-inf")
        rows = []
        for i, (s, t) in enumerate(zip(seqs, tokens)):
            m = len(t)
            if s.length + m > s.buf.shape[3]:
                raise ValueError(f"sequence cache overflow: {s.length} + {m} tokens > capacity {s.buf.shape[3]}")
            s.buf[:, :, :, s.length:s.length + m] = new[:, :, i, :, n - m:]
            s.length += m
            rows.append(logits[i, -1:].clone() if last_only else logits[i, n - m:].clone())
        return rows
