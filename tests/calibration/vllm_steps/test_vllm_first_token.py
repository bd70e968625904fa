"""First-token split (calibration/vllm_steps/first_token.py): hand-worked steps, errors, and the recorded fixture's
clocks (the engine's first-token step ends before the client sees the token)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from calibration.vllm_steps.acceptance import join_ids
from calibration.vllm_steps.calibrate import parse_mode
from calibration.vllm_steps.first_token import measured_first_tokens, measured_split, simulated_split
from calibration.vllm_steps.records import RequestStep, StepLog, StepRecord
from calibration.vllm_steps.validate_compare import load_mode
from traces.errors import TraceFormatError

FIX = Path(__file__).parent / "fixtures" / "vllm-validate"


def _req(rid, scheduled, before, num_tokens, prompt, emitted, drafted=0, accepted=0):
    return RequestStep(rid, scheduled, before, num_tokens, prompt, drafted, drafted, accepted, emitted, emitted)


def _step(i, start, dur, reqs, draft=None):
    return StepRecord(i, start, dur, len(reqs), 0, None, None, draft, None, None, reqs)


def _log():
    """a: alone at an idle engine; b: sent during step 0, prompt in two chunks beside a's decode and verify;
    c: sent during step 1, passed over by step 2, admitted by step 3."""
    return StepLog({}, [
        _step(0, 10.0, 0.5, [_req("a", 10, 0, 10, 10, 1)]),  # a goes on running: sends in the gaps are not idle
        _step(1, 10.51, 0.3, [_req("a", 1, 10, 11, 10, 1), _req("b", 12, 0, 20, 20, 0)]),
        _step(2, 10.82, 0.4, [_req("a", 3, 11, 12, 10, 2, drafted=2, accepted=1), _req("b", 8, 12, 20, 20, 1)],
              draft=0.004),
        _step(3, 11.23, 0.2, [_req("c", 5, 0, 5, 5, 1)]),
    ])


def test_hand_worked_split():
    clients = [("a", 9.99, 10.503), ("b", 10.2, 11.225), ("c", 10.6, 11.432)]
    rows = {r.id: r for r in measured_first_tokens(_log(), clients, {c: c for c, _, _ in clients}, "steps.jsonl")}
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert (a.queue, a.engine, a.out) == pytest.approx((0.01, 0.5, 0.003))
    assert (a.prefill_chunks, a.steps_passed, a.idle_at_send, a.decode_seqs) == (1, 0, True, 0)
    assert (b.queue, b.engine, b.out) == pytest.approx((0.31, 0.71, 0.005))
    assert (b.prefill_chunks, b.steps_passed, b.idle_at_send) == (2, 0, False)
    assert (b.decode_seqs, b.drafted_tokens, b.draft_seconds) == (1, 2, 0.004)
    assert (c.queue, c.engine, c.out) == pytest.approx((0.63, 0.2, 0.002))
    assert (c.prefill_chunks, c.steps_passed, c.idle_at_send, c.decode_seqs) == (1, 1, False, 0)
    s = measured_split(list(rows.values()))
    assert (s.requests, s.idle_arrivals) == (3, 1)
    assert s.ttft == pytest.approx((0.513 + 1.025 + 0.832) / 3)
    assert s.queue + s.engine + s.out == pytest.approx(s.ttft)


def test_idle_only_when_the_last_step_finished_everything():
    """Sent in the gap after step 0 (a still running): busy; after a last step that finished its request: idle."""
    log = _log()
    log.steps.append(_step(4, 12.0, 0.1, [_req("e", 3, 0, 3, 3, 1)]))
    log.steps[3].requests[0].finished = True  # c ends in step 3; the engine is idle until e
    log.steps[2].requests[0].finished = True  # a ends in step 2 (b is still running)
    rows = measured_first_tokens(log, [("d", 10.505, 11.0), ("e", 11.5, 12.11)], {"d": "b", "e": "e"}, "x")
    assert [r.idle_at_send for r in rows] == [False, True]
    assert rows[1].queue == pytest.approx(0.5)


def test_a_request_never_sampled_is_an_error_naming_the_file():
    log = _log()
    log.steps[3].requests[0].emitted = log.steps[3].requests[0].kept = 0
    with pytest.raises(TraceFormatError, match=r"steps\.jsonl.*'c'.*no step sampled"):
        measured_first_tokens(log, [("c", 10.6, 11.5)], {"c": "c"}, "steps.jsonl")
    with pytest.raises(TraceFormatError, match="in no step"):
        measured_first_tokens(log, [("d", 10.6, 11.5)], {"d": "d"}, "steps.jsonl")


def test_simulated_split_from_a_requests_table():
    df = pd.DataFrame({"request_id": ["x", "y"], "arrival_time": [0.0, 1.0], "first_scheduled_time": [0.0, 1.5],
                       "first_token_time": [0.4, 2.1], "ttft": [0.4, 1.1]})
    s = simulated_split(df, ["y", "x"], {"x": True, "y": False})
    assert (s.requests, s.ttft, s.queue, s.engine, s.out, s.idle_arrivals) == pytest.approx((2, 0.75, 0.25, 0.5, 0.0, 1))


@pytest.mark.parametrize("label", ["ar", "ngram:3"])
def test_recorded_run_clocks_agree(label):
    """On a recorded vLLM run every load request is sent before its admitting step starts, its prompt takes at
    least one chunk, and its first-token step ends before the client receives the token (same wall clock)."""
    mode = parse_mode(label)
    data = load_mode(FIX / mode.label, mode)
    engine_ids = sorted({r.id for s in data.log.steps for r in s.requests})
    for lv in data.levels:
        clients = [(q["id"], q["send_time"], q["chunk_times"][0]) for q in lv["requests"]]
        rows = measured_first_tokens(data.log, clients, join_ids([c for c, _, _ in clients], engine_ids, "x"), "x")
        assert len(rows) == len(clients)
        for r in rows:
            assert r.queue >= 0 and r.engine > 0 and r.out >= 0 and r.prefill_chunks >= 1


def test_the_bench_split_adds_up_on_a_recorded_run():
    """benchmarks/bench_first_token.py on the recorded fixture: every level's requests are split into idle and busy
    arrivals, and each simulation's part differences add up to its TTFT difference (queue + engine + out)."""
    from benchmarks.bench_first_token import mode_report
    from calibration.vllm_steps.validate_run import load_config

    cfg = load_config(FIX / "validate.yaml")
    mode = parse_mode("ngram:3")
    rep = mode_report(load_mode(FIX / mode.label, mode), cfg)
    assert rep["mode"] == "ngram-k3" and len(rep["levels"]) == 3
    for lv in rep["levels"]:
        n = lv["measured"]["all"]["n"]
        assert n == 3 and lv["idle_arrivals"] == lv["measured"].get("idle", {"n": 0})["n"]
        assert lv["measured"].get("busy", {"n": 0})["n"] == n - lv["idle_arrivals"]
        for kind, groups in lv["simulated"].items():
            d = groups["all"]["minus_measured"]
            assert d["queue"] + d["engine"] + d["out"] == pytest.approx(d["ttft"], abs=0.25), kind
            assert groups["all"]["n"] == n and groups["all"]["out"] == 0.0
