"""calibration/vllm_steps/loadgen.py without vLLM: a run stopped part way keeps its finished phases."""
from __future__ import annotations

import json

import pytest

from calibration.vllm_steps import launch, loadgen


def _plan(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"spec": None, "dtype": "float32"}))
    return path


def test_finished_phases_are_on_disk_when_the_run_dies(tmp_path, monkeypatch):
    async def drive(plan, progress):
        progress({"calibration": [{"name": "batch1", "requests": [1]}], "levels": []})
        raise KeyboardInterrupt  # what the time limit's kill looks like from inside: the run never returns

    monkeypatch.setattr(launch, "prepare_environment", lambda: "test")
    monkeypatch.setattr(loadgen, "_drive", drive)
    with pytest.raises(KeyboardInterrupt):
        loadgen.main(str(_plan(tmp_path)), str(tmp_path / "result.json"))
    partial = json.loads((tmp_path / "result.partial.json").read_text())
    assert partial == {"calibration": [{"name": "batch1", "requests": [1]}], "levels": [], "complete": False}
    assert not (tmp_path / "result.json").exists()


def test_a_finished_run_leaves_only_its_result(tmp_path, monkeypatch):
    async def drive(plan, progress):
        progress({"calibration": [], "levels": []})
        return {"capacity_req_s": 1.0, "calibration": [], "levels": []}

    monkeypatch.setattr(launch, "prepare_environment", lambda: "test")
    monkeypatch.setattr(loadgen, "_drive", drive)
    assert loadgen.main(str(_plan(tmp_path)), str(tmp_path / "result.json")) == 0
    assert json.loads((tmp_path / "result.json").read_text())["capacity_req_s"] == 1.0
    assert not (tmp_path / "result.partial.json").exists()
