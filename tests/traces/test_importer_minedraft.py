"""MineDraft step traces: parsing, unit handling, bad input, and a fit through the CLI."""
import json

import pytest

from experiments.cli import main
from simulator.costs.latency import load_profile
from traces.errors import TraceFormatError
from traces.importers.minedraft import load_minedraft_steps, step_measurements


def _step(n, batched, ctx, target, draft=0.002, overhead=0.0005, prompt=False, k=3):
    return {"tid": "Step:0", "type": "Step", "is_prompt_run": prompt, "batched_token_num": batched,
            "context_token_num": ctx, "batched_requests": [f"Request:{i}" for i in range(n)],
            "proposed_len": k, "verify_len": k + 1, "accepted_num": 2, "generated_num": 3,
            "measured_draft_time": draft, "measured_target_time": target, "measured_overhead_time": overhead}


def _write(tmp_path, traces, name="trace.jsonl"):
    p = tmp_path / name
    p.write_text(json.dumps({"metadata": {"k": 3}, "traces": traces}) + "\n")
    return p


def test_decode_steps_only_and_roles(tmp_path):
    p = _write(tmp_path, [_step(2, 8, 100, 0.01), _step(4, 500, 500, 0.2, prompt=True),
                          {"type": "Request", "prompt_len": 5, "gen_len": 7}])
    steps = load_minedraft_steps(p)
    assert len(steps) == 1 and steps[0].num_seqs == 2 and steps[0].times["target"] == 0.01
    rows = step_measurements(steps)
    assert rows["target"][0]["batched_tokens"] == 8
    assert rows["draft"][0]["batched_tokens"] == 2 * 3  # whole proposal


def test_time_unit_conversion(tmp_path):
    p = _write(tmp_path, [_step(1, 4, 10, 1500)])
    assert load_minedraft_steps(p, "us")[0].times["target"] == pytest.approx(0.0015)
    with pytest.raises(ValueError, match="time_unit"):
        load_minedraft_steps(p, "minutes")


@pytest.mark.parametrize("mutate, field", [
    (lambda s: s.pop("batched_token_num"), "batched_token_num"),
    (lambda s: s.update(context_token_num=-4), "context_token_num"),
    (lambda s: s.update(measured_target_time="fast"), "measured_target_time"),
    (lambda s: s.update(batched_requests=3), "batched_requests"),
])
def test_bad_steps_name_the_field(tmp_path, mutate, field):
    s = _step(1, 4, 10, 0.01)
    mutate(s)
    with pytest.raises(TraceFormatError, match=f"line 1, field '{field}'"):
        load_minedraft_steps(_write(tmp_path, [s]))


def test_not_json_and_empty(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        load_minedraft_steps(bad)
    with pytest.raises(TraceFormatError, match="no decode Step"):
        load_minedraft_steps(_write(tmp_path, [_step(1, 4, 10, 0.01, prompt=True)]))


def test_cli_fits_profiles_that_recover_a_linear_law(tmp_path):
    # target time = 1e-4 * batched + 1e-6 * context + 0.003 exactly: the fit must find it
    steps = [_step(n, n * 4, ctx, 1e-4 * n * 4 + 1e-6 * ctx + 0.003) for n in (1, 2, 4, 8, 16) for ctx in (100, 1000, 4000)]
    p = _write(tmp_path, steps)
    assert main(["import", "minedraft", str(p), "--out-dir", str(tmp_path / "prof"), "--name", "md"]) == 0
    prof = load_profile(tmp_path / "prof" / "md-target.yaml")
    assert prof.provenance.source == "imported"
    assert prof.step_time(3, 12, 2000) == pytest.approx(1e-4 * 12 + 1e-6 * 2000 + 0.003, rel=1e-3)
