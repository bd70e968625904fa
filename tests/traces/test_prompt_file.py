"""Calibration prompt sources: a JSONL of prompts (vLLM bench's custom dataset format, or token ids) and a
measured-run folder's recorded lengths; malformed lines name the file, line and field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from traces.errors import TraceFormatError
from traces.prompt_file import read_prompt_source

FIX = Path(__file__).parent / "fixtures"


def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_text_ids_categories_and_lengths(tmp_path):
    f = _write(tmp_path / "p.jsonl", [{"prompt": "What is the capital of India?", "category": "chat"},
                                      {"prompt_token_ids": [1, 2, 3], "output_tokens": 64},
                                      {"prompt": "x", "output_len": 5, "extra_column": 1}])
    a, b, c = read_prompt_source(f)
    assert (a.text, a.category, a.output_len) == ("What is the capital of India?", "chat", None)
    assert (b.token_ids, b.output_len, b.length_only) == ((1, 2, 3), 64, False)
    assert c.output_len == 5


@pytest.mark.parametrize("row, field", [
    ({"text": "no prompt key"}, "prompt"),
    ({"prompt": "a", "prompt_token_ids": [1]}, "prompt"),
    ({"prompt": "  "}, "prompt"),
    ({"prompt_token_ids": [1, -2]}, "prompt_token_ids"),
    ({"prompt_token_ids": []}, "prompt_token_ids"),
    ({"prompt": "a", "category": 3}, "category"),
    ({"prompt": "a", "output_tokens": 0}, "output_tokens"),
    ({"prompt": "a", "output_tokens": 4, "output_len": 4}, "output_len"),
])
def test_malformed_lines_name_file_line_and_field(tmp_path, row, field):
    f = _write(tmp_path / "bad.jsonl", [{"prompt": "fine"}, row])
    with pytest.raises(TraceFormatError) as e:
        read_prompt_source(f)
    msg = str(e.value)
    assert "bad.jsonl" in msg and "line 2" in msg and field in msg


def test_empty_missing_and_not_json(tmp_path):
    with pytest.raises(TraceFormatError, match="not found"):
        read_prompt_source(tmp_path / "nope.jsonl")
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(TraceFormatError, match="no prompts"):
        read_prompt_source(tmp_path / "e.jsonl")
    (tmp_path / "n.jsonl").write_text("[1, 2]\n")
    with pytest.raises(TraceFormatError, match="JSON object"):
        read_prompt_source(tmp_path / "n.jsonl")


def test_measured_run_folder_gives_its_recorded_lengths(tmp_path):
    from traces.importers.vllm_bench import import_vllm_bench
    from traces.measured_run import save_measured

    run = import_vllm_bench(FIX / "vllm_bench_detailed.json")[0]
    folder = save_measured(run, tmp_path / "run")
    entries = read_prompt_source(folder)
    assert [(e.prompt_len, e.output_len) for e in entries] == [(r.prompt_len, r.output_len) for r in run.requests]
    assert all(e.length_only for e in entries)
