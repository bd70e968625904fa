"""Drafters that share the target's tokenizer: int8 copy, first-N-layer copy, n-gram, user model.

A drafter spec string names one: `int8`, `layers:N`, `ngram[:min_n:max_n:max_proposal]`,
`model:PATH`. Model drafters give teacher-forced logits; the n-gram drafter gives match lengths.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from typing import Any

from calibration.ngram import NgramDrafter


@dataclass
class ModelDrafter:
    """A neural drafter: a causal LM over the target's vocabulary."""

    name: str
    kind: str  # bundle kind: int8, truncated, draft_model
    model: Any
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class LookupDrafter:
    """The prompt-lookup drafter."""

    name: str
    ngram: NgramDrafter
    kind: str = "ngram"

    @property
    def params(self) -> dict[str, Any]:
        return {"min_n": self.ngram.min_n, "max_n": self.ngram.max_n, "max_proposal": self.ngram.max_proposal}


Drafter = ModelDrafter | LookupDrafter


def int8_copy(model: Any) -> Any:
    """Dynamic int8 quantization of every Linear layer (weights int8, activations quantized on the fly)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated but still the CPU int8 path
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model).cpu().float(), {torch.nn.Linear},
                                                   dtype=torch.qint8)
    return q.eval()


def truncated_copy(model: Any, n_layers: int) -> Any:
    """The target's first `n_layers` decoder layers with its embeddings, final norm and head (shared weights)."""
    import torch

    layers = model.model.layers
    if not (1 <= n_layers <= len(layers)):
        raise ValueError(f"layers:{n_layers} is out of range: the target has {len(layers)} layers")
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types)[:n_layers]
    with torch.device("meta"):
        small = type(model)(cfg)
    for name, child in model.model.named_children():
        if name == "layers":
            small.model.layers = torch.nn.ModuleList(list(layers)[:n_layers])
        else:
            setattr(small.model, name, child)
    small.lm_head = model.lm_head
    meta = [n for n, t in list(small.named_parameters()) + list(small.named_buffers()) if t.is_meta]
    if meta:
        raise RuntimeError(f"truncated copy left tensors unset: {meta[:5]}")
    small.generation_config = model.generation_config
    return small.eval()


def parse_drafter(spec: str, target: Any) -> Drafter:
    """Build a drafter from its spec string (see module docstring); `target` is a LoadedModel."""
    head, _, rest = spec.partition(":")
    if head == "int8" and not rest:
        return ModelDrafter("int8", "int8", int8_copy(target.model), {"quantization": "torch dynamic qint8, Linear"})
    if head == "layers":
        try:
            n = int(rest)
        except ValueError:
            raise ValueError(f"drafter {spec!r}: expected layers:N with an integer N") from None
        return ModelDrafter(f"layers{n}", "truncated", truncated_copy(target.model, n), {"layers": n})
    if head == "ngram":
        parts = rest.split(":") if rest else []
        try:
            nums = [int(x) for x in parts]
        except ValueError:
            raise ValueError(f"drafter {spec!r}: expected ngram[:min_n:max_n:max_proposal] with integers") from None
        if len(nums) not in (0, 3):
            raise ValueError(f"drafter {spec!r}: expected ngram or ngram:min_n:max_n:max_proposal")
        return LookupDrafter("ngram", NgramDrafter(*nums) if nums else NgramDrafter())
    if head == "model" and rest:
        from calibration.hf_backend import load_model

        lm = load_model(rest, device=str(target.device))
        if lm.tokenizer.get_vocab() != target.tokenizer.get_vocab():
            raise ValueError(f"drafter {spec!r}: its tokenizer differs from the target's; a drafter must share it")
        return ModelDrafter(lm.name, "draft_model", lm.model, {"path": rest})
    raise ValueError(f"unknown drafter {spec!r}; expected int8, layers:N, ngram[:min_n:max_n:max_proposal] "
                     "or model:PATH")
