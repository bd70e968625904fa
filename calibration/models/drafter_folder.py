"""Draft-model folders vLLM can load (`draft_model` method): a layer-truncated copy of the target
(calibration.models.drafters.truncated_copy, the same drafter as `layers:N` in our traces) saved once as a
transformers folder next to the converted target, with its tokenizer."""
from __future__ import annotations

import shutil
from pathlib import Path


def truncated_folder(lm, n_layers: int) -> Path:
    """Folder of the target's first n_layers (cached under the converted models); built on first use."""
    from calibration.models.drafters import truncated_copy
    from calibration.models.hf_backend import cache_root

    out = cache_root() / "models" / f"{lm.name}-layers{n_layers}"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    truncated_copy(lm.model, n_layers).save_pretrained(tmp)
    lm.tokenizer.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
