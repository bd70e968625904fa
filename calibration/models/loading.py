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


def vllm_target(target: str, workload: str, num_prompts: int, seed: int = 0) -> tuple[str, str, list[list[int]], Any]:
    """(folder vLLM loads, model name, prompt token ids of the first `num_prompts` workload prompts, the model)."""
    from calibration.models.hf_backend import converted_folder, encode_prompt
    from calibration.models.packaged import PACKAGED_MODELS
    from calibration.prompts import workload_prompts

    lm = load_target(target).lm
    folder = str(converted_folder(target)) if target in PACKAGED_MODELS else target
    texts = workload_prompts(workload, seed=seed)[:num_prompts]
    return folder, lm.name, [encode_prompt(lm, p.text) for p in texts], lm


def with_drafter_folder(mode, lm):
    """A vLLM mode `draft_model:K:layers:N` with its truncated copy's folder (built once) as the draft model."""
    import dataclasses

    from calibration.vllm_steps.drafter_folder import truncated_folder

    if mode.method == "draft_model" and mode.draft_model.startswith("layers"):
        n = int(mode.draft_model[len("layers"):].lstrip(":"))
        return dataclasses.replace(mode, label=f"layers{n}-k{mode.k}", draft_model=str(truncated_folder(lm, n)))
    return mode


def prompt_entry_ids(entries, lm, filler_workload: str = "chat", seed: int = 0) -> list[list[int]]:
    """Token ids of each prompt entry (traces/prompt_file.py): text through the target's chat template, ids as
    given, and a length-only entry (a measured run records no texts) as the built-in `filler_workload`
    prompts' tokens, concatenated and cut to the recorded length (its step shapes, not its acceptance)."""
    from calibration.models.hf_backend import encode_prompt
    from calibration.prompts import workload_prompts

    filler: list[int] = []
    out = []
    for e in entries:
        if e.text is not None:
            out.append(encode_prompt(lm, e.text))
        elif e.token_ids is not None:
            out.append(list(e.token_ids))
        else:
            if not filler:
                for p in workload_prompts(filler_workload, seed=seed):
                    filler += encode_prompt(lm, p.text)
            n = e.prompt_len
            start = (len(out) * 7919) % len(filler)
            out.append([filler[(start + j) % len(filler)] for j in range(n)])
    return out


def vllm_target_prompts(target: str, path: str, seed: int = 0) -> tuple[str, str, list[list[int]], list[str], Any, bool]:
    """(folder vLLM loads, model name, token ids, categories, the model, whether the texts were lengths only) of
    a prompt source (traces/prompt_file.py: a JSONL of prompts or a measured-run folder)."""
    from calibration.models.hf_backend import converted_folder
    from calibration.models.packaged import PACKAGED_MODELS
    from traces.prompt_file import read_prompt_source

    entries = read_prompt_source(path)
    lm = load_target(target).lm
    folder = str(converted_folder(target)) if target in PACKAGED_MODELS else target
    return (folder, lm.name, prompt_entry_ids(entries, lm, seed=seed), [e.category for e in entries], lm,
            any(e.length_only for e in entries))
