"""The target folder, model name and prompt token ids a vLLM run takes: a workload's built-in prompts
(calibration/prompts.py) or a prompt source (traces/prompt_file.py), tokenized by the target loaded once."""
from __future__ import annotations

from typing import Any

from calibration.models.loading import load_target


def vllm_target(target: str, workload: str, num_prompts: int, seed: int = 0) -> tuple[str, str, list[list[int]], Any]:
    """(folder vLLM loads, model name, prompt token ids of the first `num_prompts` workload prompts, the model)."""
    from calibration.models.hf_backend import converted_folder, encode_prompt
    from calibration.models.packaged import PACKAGED_MODELS
    from calibration.prompts import workload_prompts

    lm = load_target(target).lm
    folder = str(converted_folder(target)) if target in PACKAGED_MODELS else target
    texts = workload_prompts(workload, seed=seed)[:num_prompts]
    return folder, lm.name, [encode_prompt(lm, p.text) for p in texts], lm


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


def vllm_target_prompts(target: str, path: str,
                        seed: int = 0) -> tuple[str, str, list[list[int]], list[str], Any, bool]:
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
