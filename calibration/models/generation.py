"""Target generation (batched, greedy or sampled) and teacher-forced forward passes."""
from __future__ import annotations

from typing import Any

import numpy as np


def generate(lm: Any, prompts: list[list[int]], *, max_new_tokens: int, min_new_tokens: int = 0,
             temperature: float = 0.0, seed: int = 0, eos: list[int] | None = None) -> list[list[int]]:
    """Generate continuations for a batch of prompts (left padded); output stops after the first EOS."""
    import torch

    if not prompts:
        return []
    tok = lm.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (eos or [0])[0]
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                                  pad_token_id=pad, eos_token_id=eos)
    if temperature > 0:
        torch.manual_seed(seed)
        kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    else:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    dev = lm.device
    with torch.inference_mode():
        out = lm.model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), **kwargs)
    result = []
    stop = set(eos or [])
    for row in out[:, width:].tolist():
        cut = next((j + 1 for j, t in enumerate(row) if t in stop), len(row))
        result.append(row[:cut])
    return result


def teacher_forced_logits(model: Any, prompt: list[int], output: list[int]):
    """Logits [len(output), vocab] (float32, CPU) predicting each output token from its true prefix."""
    import torch

    seq = list(prompt) + list(output[:-1])
    dev = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([seq], dtype=torch.long, device=dev)).logits[0]
    return logits[len(prompt) - 1:].float().cpu()


def teacher_forced_logits_with_exits(model: Any, prompt: list[int], output: list[int], exits: list[int]):
    """Like teacher_forced_logits, plus the logits of the first-N-layer copies for N in `exits`.

    A first-N-layer drafter is the target's layers 1..N followed by the target's final norm and
    head, so its logits come from the target's hidden state after layer N in the same pass.
    """
    import torch

    seq = list(prompt) + list(output[:-1])
    dev = next(model.parameters()).device
    with torch.inference_mode():
        res = model(input_ids=torch.tensor([seq], dtype=torch.long, device=dev), output_hidden_states=True)
        hs = res.hidden_states  # [0] embeddings, [i] after layer i (the last one already normed)
        n_layers = len(hs) - 1
        start = len(prompt) - 1
        extra = {}
        for n in exits:
            if not 1 <= n <= n_layers:
                raise ValueError(f"exit after layer {n} is out of range 1..{n_layers}")
            h = hs[n][0, start:]
            if n < n_layers:
                h = model.model.norm(h)
            logits = model.lm_head(h)
            cap = getattr(model.config, "final_logit_softcapping", None)
            if cap:  # Gemma-style soft cap, as the model's own forward applies it
                logits = torch.tanh(logits / cap) * cap
            extra[n] = logits.float().cpu()
    return res.logits[0, start:].float().cpu(), extra


def probs(logits, temperature: float):
    """Softmax at `temperature` (1.0 when greedy, so tv describes the natural distributions)."""
    import torch

    t = temperature if temperature > 0 else 1.0
    return torch.softmax(logits.float() / t, dim=-1)


def tv_from_logits(target_logits, draft_logits, temperature: float) -> np.ndarray:
    """Per-position TV distance between target and drafter next-token distributions."""
    p, q = probs(target_logits, temperature), probs(draft_logits, temperature)
    n = min(p.shape[-1], q.shape[-1])
    if p.shape[-1] != q.shape[-1]:
        p, q = p[..., :n], q[..., :n]  # padded vocab rows carry ~0 mass
    return (0.5 * (p - q).abs().sum(dim=-1)).clamp(0.0, 1.0).numpy().astype(np.float32)
