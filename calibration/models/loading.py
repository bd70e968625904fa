"""The one place that loads a real target and builds its drafters from spec strings (int8, layers:N, ngram,
model:PATH), used by every calibration and live command and by the PSD drafter process."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


@dataclass
class LoadedTarget:
    """A loaded target model, its drafters by name (in spec order) and its end-of-sequence token ids."""

    lm: Any  # calibration.models.hf_backend.LoadedModel
    drafters: dict[str, Any]  # name -> ModelDrafter | LookupDrafter
    eos: list[int]


def load_target(target: str, drafter_specs: Iterable[str] = (), *, dtype: str = "float32", device: str = "cpu",
                threads: int | None = None) -> LoadedTarget:
    """Load `target` (packaged name or transformers folder) and build each drafter spec once (repeats dropped);
    `threads` sets torch's intra-op threads first. Two specs giving the same drafter name are an error."""
    from calibration.models.drafters import parse_drafter
    from calibration.models.hf_backend import eos_ids, load_model

    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    lm = load_model(target, dtype=dtype, device=device)
    drafters: dict[str, Any] = {}
    for spec in dict.fromkeys(drafter_specs):
        d = parse_drafter(spec, lm)
        if d.name in drafters:
            raise ValueError(f"drafter specs {list(drafter_specs)}: two give a drafter named {d.name!r}")
        drafters[d.name] = d
    return LoadedTarget(lm, drafters, eos_ids(lm))


def split_specs(text: str) -> list[str]:
    """Drafter specs from a comma list (`int8,layers:24,ngram`)."""
    return [s.strip() for s in text.split(",") if s.strip()]


def with_drafter_folder(mode, lm):
    """A vLLM mode `draft_model:K:layers:N` with its truncated copy's folder (built once) as the draft model."""
    import dataclasses

    from calibration.models.drafter_folder import truncated_folder

    if mode.method == "draft_model" and mode.draft_model.startswith("layers"):
        n = int(mode.draft_model[len("layers"):].lstrip(":"))
        return dataclasses.replace(mode, label=f"layers{n}-k{mode.k}", draft_model=str(truncated_folder(lm, n)))
    return mode
