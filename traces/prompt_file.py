"""A user's prompts for calibration: a JSONL file of prompts, or a measured-run folder's recorded lengths.

JSONL: one object per line with `prompt` (text; vLLM's `vllm bench serve --dataset-name custom` reads the same
file: vllm/benchmarks/datasets.py `CustomDataset` needs a `prompt` column) or `prompt_token_ids` (a list of
token ids), and optionally `category` (a workload label) and `output_tokens` / `output_len` (tokens to
generate). A folder written by `draftsim import vllm-bench` / `guidellm` (run.json + requests.jsonl) gives each
request's recorded prompt and output lengths only: the texts are not in those results.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from traces.errors import TraceFormatError, shorten
from traces.limits import MAX_TOKENS_PER_REQUEST
from traces.parsing import iter_jsonl

PROMPT_KEYS = ("prompt", "prompt_token_ids")
OPTIONAL_KEYS = ("category", "output_tokens", "output_len")


@dataclass(frozen=True)
class PromptEntry:
    """One calibration prompt: its text, its token ids, or only its length (a measured run's record)."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    prompt_len: int | None = None
    output_len: int | None = None
    category: str = ""

    @property
    def length_only(self) -> bool:
        return self.text is None and self.token_ids is None


def _length(v, where: str, line: int, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS_PER_REQUEST:
        raise TraceFormatError(where, f"expected an integer in [1, {MAX_TOKENS_PER_REQUEST}], got {shorten(v)}",
                               field=name, line=line)
    return v


def read_prompt_jsonl(path: str | Path) -> list[PromptEntry]:
    """Every line's prompt; a line without one, with both forms or an unknown key is an error naming the line."""
    where = str(path)
    out = []
    for line, doc in iter_jsonl(path):
        if not isinstance(doc, dict):
            raise TraceFormatError(where, f"expected a JSON object, got {type(doc).__name__}", line=line)
        given = [k for k in PROMPT_KEYS if k in doc]
        if len(given) != 1:
            raise TraceFormatError(where, f"expected exactly one of {PROMPT_KEYS}, got {given or 'neither'}",
                                   field="prompt", line=line)
        text = ids = None
        if "prompt" in doc:
            text = doc["prompt"]
            if not isinstance(text, str) or not text.strip():
                raise TraceFormatError(where, "expected a non-empty string", field="prompt", line=line)
        else:
            raw = doc["prompt_token_ids"]
            if not isinstance(raw, list) or not raw or len(raw) > MAX_TOKENS_PER_REQUEST or \
                    not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in raw):
                raise TraceFormatError(where, f"expected a non-empty list of at most {MAX_TOKENS_PER_REQUEST} "
                                       "token ids (integers >= 0)", field="prompt_token_ids", line=line)
            ids = tuple(raw)
        cat = doc.get("category", "")
        if not isinstance(cat, str):
            raise TraceFormatError(where, f"expected a string, got {shorten(cat)}", field="category", line=line)
        outs = [k for k in ("output_tokens", "output_len") if k in doc]
        if len(outs) > 1:
            raise TraceFormatError(where, "give output_tokens or output_len, not both", field="output_len", line=line)
        out_len = _length(doc[outs[0]], where, line, outs[0]) if outs else None
        out.append(PromptEntry(text=text, token_ids=ids, output_len=out_len, category=cat))
    if not out:
        raise TraceFormatError(where, "no prompts (expected one JSON object per line)")
    return out


def read_prompt_source(path: str | Path) -> list[PromptEntry]:
    """A JSONL prompt file, or a measured-run folder (its requests' prompt and output lengths, send order)."""
    p = Path(path)
    if p.is_dir():
        from traces.measured_run import load_measured

        run = load_measured(p)
        return [PromptEntry(prompt_len=r.prompt_len, output_len=r.output_len) for r in run.requests]
    if not p.is_file():
        raise TraceFormatError(str(p), "prompt file not found (expected a JSONL file of prompts or a folder written "
                               "by `draftsim import vllm-bench`)")
    return read_prompt_jsonl(p)
