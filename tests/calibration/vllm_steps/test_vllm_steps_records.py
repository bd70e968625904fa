"""Step records: the recorded fixture loads and joins its worker file; bad files name file, line and field."""
import json
import shutil
from pathlib import Path

import pytest

from calibration.vllm_steps.records import JsonlWriter, RequestStep, StepRecord, load_steps
from traces.errors import TraceFormatError

FIXTURE = Path(__file__).parent / "fixtures" / "vllm-ngram-k3"


def test_fixture_loads_and_joins_worker_times():
    log = load_steps(FIXTURE / "steps.jsonl")
    assert log.header["spec_method"] == "ngram" and log.header["num_speculative_tokens"] == 3
    assert log.steps and all(st.forward_seconds is not None for st in log.steps)
    for st in log.steps:
        # the worker's time is part of the engine step it belongs to
        assert st.forward_seconds <= st.duration
        assert st.draft_seconds is None or st.draft_seconds <= st.forward_seconds
        assert all(r.accepted <= r.drafted <= r.proposed for r in st.requests)


def _copy(tmp_path: Path) -> Path:
    for f in FIXTURE.iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / "steps.jsonl"


def _rewrite_line(path: Path, line_no: int, edit) -> None:
    lines = path.read_text().splitlines()
    lines[line_no - 1] = edit(lines[line_no - 1])
    path.write_text("\n".join(lines) + "\n")


def test_bad_step_field_is_named(tmp_path):
    path = _copy(tmp_path)

    def edit(text):
        doc = json.loads(text)
        doc["requests"][0]["accepted"] = doc["requests"][0]["drafted"] + 1
        return json.dumps(doc)

    _rewrite_line(path, 3, edit)
    with pytest.raises(TraceFormatError, match=r"line 3, field 'requests\[0\].accepted'"):
        load_steps(path)


def test_torn_last_line_is_reported(tmp_path):
    path = _copy(tmp_path)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    n = len(path.read_text().splitlines())
    with pytest.raises(TraceFormatError, match=f"line {n}: not valid JSON"):
        load_steps(path)


def test_worker_file_from_another_run_is_refused(tmp_path):
    path = _copy(tmp_path)
    worker = tmp_path / "steps.jsonl.worker.1"
    lines = worker.read_text().splitlines()
    worker.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(TraceFormatError, match="model-runner steps but the engine recorded"):
        load_steps(path)


def test_missing_file_and_missing_header(tmp_path):
    with pytest.raises(TraceFormatError, match="step-record file not found"):
        load_steps(tmp_path / "none.jsonl")
    (tmp_path / "s.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(TraceFormatError, match="field 'header'"):
        load_steps(tmp_path / "s.jsonl")


def test_writer_round_trip(tmp_path):
    w = JsonlWriter(tmp_path / "s.jsonl", {"vllm_version": "x"}, batch=2)
    recs = [StepRecord(step=i, wall_start=100.0 + i, duration=0.01, num_running=1, num_waiting=0, kv_blocks_used=1,
                       kv_blocks_total=10, draft_seconds=None,
                       requests=[RequestStep("a", 3, 5 + i, 6 + i, 4, 2, 2, 1, 2, 2)]) for i in range(3)]
    for r in recs:
        w.add(r.to_dict())
    w.close()
    log = load_steps(tmp_path / "s.jsonl")
    assert log.steps == recs and log.header["vllm_version"] == "x"
