"""Drafters that share the target's tokenizer: int8 copy, first-N-layer copy, n-gram, user model.

A drafter spec string names one: `int8`, `layers:N`, `ngram[:min_n:max_n:max_proposal]`,
`model:PATH`. Model drafters give teacher-forced logits; the n-gram drafter gives match lengths.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from calibration.models.ngram import NgramDrafter


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


def _int8_linear_class():
    import torch

    class Int8Linear(torch.nn.Module):
        """W8A8 linear layer: int8 weights per output channel, activations quantized to int8 per token.

        Per-token activation scales keep each position's result independent of the other positions,
        so a teacher-forced pass gives the same guesses as drafting step by step (torch's
        quantize_dynamic uses one scale per tensor, which couples positions). Integer products are
        accumulated in float32.
        """

        def __init__(self, lin: torch.nn.Linear):
            super().__init__()
            w = lin.weight.detach().float()
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
            self.register_buffer("qweight", torch.round(w / scale).clamp(-127, 127).to(torch.int8))
            self.register_buffer("wscale", scale.squeeze(1))
            self.register_buffer("bias", None if lin.bias is None else lin.bias.detach().float().clone())
            self.in_features, self.out_features = lin.in_features, lin.out_features

        def forward(self, x):
            s = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127.0
            xq = torch.round(x / s).clamp(-127, 127)
            y = (xq @ self.qweight.t().to(x.dtype)) * s * self.wscale.to(x.dtype)
            return y if self.bias is None else y + self.bias.to(x.dtype)

    return Int8Linear


def int8_copy(model: Any) -> Any:
    """A copy of the model with every Linear layer (head included) replaced by a W8A8 int8 layer."""
    import torch

    cls = _int8_linear_class()
    q = copy.deepcopy(model)
    for module in list(q.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, cls(child))
    return q.eval()


def int8_kernel_copy(model: Any) -> Any:
    """torch's dynamic int8 (fbgemm) copy, for timing only: real int8 kernels, per-tensor activation scales.

    Its numerics differ slightly from `int8_copy` (which fixes per-token scales so traces stay
    position independent), but both are W8A8 int8 models; this one runs at int8 kernel speed.
    """
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated but is still the CPU int8 path
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model).cpu().float(), {torch.nn.Linear},
                                                      dtype=torch.qint8).eval()


def with_int8_kernels(drafters: dict, target: Any) -> dict:
    """`drafters` with `int8` replaced by the fbgemm copy of `target` (live timing at int8 kernel speed; the trace
    keeps `int8_copy`'s per-token numerics, so a few accepted counts may differ)."""
    if "int8" not in drafters:
        raise ValueError("--int8-kernels: no int8 drafter in this run (add sd:int8:<k> or int8 to --drafters)")
    return {**drafters, "int8": ModelDrafter("int8", "int8", int8_kernel_copy(target), {"kernels": "fbgemm"})}


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
        return ModelDrafter("int8", "int8", int8_copy(target.model),
                            {"quantization": "W8A8: int8 weights per channel, int8 activations per token"})
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
        from calibration.models.hf_backend import load_model

        lm = load_model(rest, device=str(target.device))
        if lm.tokenizer.get_vocab() != target.tokenizer.get_vocab():
            raise ValueError(f"drafter {spec!r}: its tokenizer differs from the target's; a drafter must share it")
        return ModelDrafter(lm.name, "draft_model", lm.model, {"path": rest})
    raise ValueError(f"unknown drafter {spec!r}; expected int8, layers:N, ngram[:min_n:max_n:max_proposal] "
                     "or model:PATH")
