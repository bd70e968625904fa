"""Chrome Trace Event Format export: tracks per device, slices per step, counters, several runs, validation."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.records import STEP_COLUMNS, ColumnBuffer
from simulator.measure.timeline import (
    assign_lanes,
    dumps_chrome_trace,
    to_chrome_trace,
    validate_chrome_trace,
    write_chrome_trace,
)


def step_table(rows: list[dict]) -> pd.DataFrame:
    buf = ColumnBuffer(STEP_COLUMNS)
    for r in rows:
        buf.append(**{"device": "target", "sub_batch": -1, "drafters": "", **r})
    return buf.frame()


def sl(step, phase, start, end, n=1, kv=0, device="target", **extra):
    return dict(step=step, phase=phase, start=start, end=end, num_seqs=n, kv_blocks_used=kv, device=device, **extra)


def events(trace, ph, pid=None):
    return [e for e in trace["traceEvents"] if e["ph"] == ph and (pid is None or e["pid"] == pid)]


def thread_names(trace, pid=1):
    return {e["tid"]: e["args"]["name"] for e in events(trace, "M", pid) if e["name"] == "thread_name"}


SD = step_table([
    sl(0, "prefill", 0.0, 0.010, n=2, kv=20, prefill_tokens=300, batched_tokens=300, emitted_tokens=2),
    sl(1, "draft", 0.010, 0.0115, n=2, kv=20, proposed_tokens=6, drafters="eagle3"),
    sl(1, "verify", 0.0115, 0.020, n=2, kv=21, batched_tokens=8, kv_tokens=310, proposed_tokens=6,
       accepted_tokens=3, emitted_tokens=5, drafters="eagle3"),
])

# PSD: the draft GPU drafts sub-batch 1 while the target verifies sub-batch 0, then they swap.
PSD = step_table([
    sl(0, "draft", 0.000, 0.004, n=2, device="drafter", sub_batch=0),
    sl(1, "verify", 0.004, 0.012, n=2, kv=5, sub_batch=0), sl(1, "draft", 0.004, 0.009, n=3, device="drafter", sub_batch=1),
    sl(2, "verify", 0.012, 0.021, n=3, kv=7, sub_batch=1), sl(2, "draft", 0.012, 0.016, n=2, device="drafter", sub_batch=0),
])


def test_one_slice_per_step_row_with_phase_name_and_args():
    trace = to_chrome_trace(SD, process_name="sd-run")
    validate_chrome_trace(trace)
    xs = events(trace, "X")
    assert [e["name"] for e in xs] == ["prefill", "draft", "verify"]
    assert [(e["ts"], e["dur"]) for e in xs] == [(0, 10000), (10000, 1500), (11500, 8500)]  # microseconds
    verify = xs[2]["args"]
    assert verify["num_seqs"] == 2 and verify["batched_tokens"] == 8 and verify["kv_tokens"] == 310
    assert verify["accepted_tokens"] == 3 and verify["emitted_tokens"] == 5
    assert verify["sub_batch"] == -1 and verify["drafters"] == "eagle3" and verify["step"] == 1
    assert {e["tid"] for e in xs} == {1} and thread_names(trace) == {1: "target GPU(s)"}
    procs = [e for e in events(trace, "M") if e["name"] == "process_name"]
    assert [p["args"]["name"] for p in procs] == ["sd-run"]


def test_psd_draft_gpu_and_target_on_separate_tracks_with_visible_overlap():
    trace = to_chrome_trace(PSD, process_name="psd")
    validate_chrome_trace(trace)
    names = thread_names(trace)
    assert sorted(names.values()) == ["draft GPU", "target GPU(s)"]
    tid_of = {v: k for k, v in names.items()}
    xs = events(trace, "X")
    target = [e for e in xs if e["tid"] == tid_of["target GPU(s)"]]
    drafter = [e for e in xs if e["tid"] == tid_of["draft GPU"]]
    assert [e["name"] for e in target] == ["verify", "verify"] and len(drafter) == 3
    assert all(e["cat"] == "drafter" for e in drafter)
    # Step 1: draft [4, 9] ms runs inside verify [4, 12] ms on the other track; the 3 ms bubble is visible.
    d1 = next(e for e in drafter if e["args"]["step"] == 1)
    v1 = next(e for e in target if e["args"]["step"] == 1)
    assert d1["ts"] == v1["ts"] == 4000 and d1["ts"] + d1["dur"] == 9000 < v1["ts"] + v1["dur"] == 12000
    assert d1["args"]["sub_batch"] == 1 and v1["args"]["sub_batch"] == 0


def test_counters_track_sequences_in_flight_and_kv_blocks():
    steps = step_table([
        sl(0, "decode", 0.0, 1.0, n=4, kv=10), sl(1, "decode", 1.0, 2.0, n=6, kv=12),
        sl(2, "decode", 3.0, 4.0, n=2, kv=12),
    ])
    trace = to_chrome_trace(steps)
    seqs = [(e["ts"], e["args"]["seqs"]) for e in events(trace, "C") if e["name"] == "seqs in flight (target)"]
    assert seqs == [(0, 4), (1_000_000, 6), (2_000_000, 0), (3_000_000, 2), (4_000_000, 0)]
    kv = [(e["ts"], e["args"]["blocks"]) for e in events(trace, "C") if e["name"] == "KV blocks used (target)"]
    assert kv == [(1_000_000, 10), (2_000_000, 12)]  # unchanged value at 4 s is not repeated


def test_psd_counters_per_device():
    trace = to_chrome_trace(PSD)
    drafter = [(e["ts"], e["args"]["seqs"]) for e in events(trace, "C") if e["name"] == "seqs in flight (drafter)"]
    assert drafter == [(0, 2), (4000, 3), (9000, 0), (12000, 2), (16000, 0)]


def test_several_runs_become_processes_in_order():
    both = pd.concat([SD.assign(run="eagle3-k3"), PSD.assign(run="psd-eagle3-k3")], ignore_index=True)
    trace = to_chrome_trace(both, process_name="default")
    validate_chrome_trace(trace)
    procs = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    assert procs == {1: "eagle3-k3", 2: "psd-eagle3-k3"}
    assert len(events(trace, "X", pid=1)) == 3 and len(events(trace, "X", pid=2)) == 5
    assert trace["otherData"]["title"] == "default"


def test_overlapping_slices_on_one_device_go_to_an_extra_lane_not_clipped():
    steps = step_table([sl(0, "verify", 0.0, 2.0), sl(1, "verify", 1.0, 3.0), sl(2, "verify", 3.0, 4.0)])
    trace = to_chrome_trace(steps)
    validate_chrome_trace(trace)
    xs = events(trace, "X")
    assert [(e["ts"], e["dur"]) for e in xs] == [(0, 2_000_000), (1_000_000, 2_000_000), (3_000_000, 1_000_000)]
    assert [e["tid"] for e in xs] == [1, 2, 1]
    assert thread_names(trace) == {1: "target GPU(s)", 2: "target GPU(s) (overlap lane 2)"}


def test_assign_lanes_greedy():
    lanes = assign_lanes(np.array([0, 1, 2, 5, 5]), np.array([3, 4, 5, 6, 9]))
    assert lanes.tolist() == [0, 1, 2, 0, 1]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-7, 0.05), min_size=1, max_size=60), st.floats(0, 1e4))
def test_back_to_back_slices_never_overlap_after_rounding(durations, t0):
    """Ends computed by float sums, as an engine does, still give one well-nested track."""
    starts = t0 + np.concatenate(([0.0], np.cumsum(durations)[:-1]))
    ends = starts + np.array(durations)
    steps = step_table([sl(i, "verify", s, e) for i, (s, e) in enumerate(zip(starts, ends))])
    trace = to_chrome_trace(steps)
    validate_chrome_trace(trace)
    assert {e["tid"] for e in events(trace, "X")} == {1}


@pytest.mark.parametrize("start, end", [(0.5, 0.4), (-0.1, 0.2), (float("nan"), 0.1)])
def test_bad_slice_times_are_named(start, end):
    steps = step_table([sl(0, "decode", 0.0, 0.1), sl(1, "decode", start, end)])
    with pytest.raises(ValueError, match=r"row 1: expected 0 <= start <= end"):
        to_chrome_trace(steps)


def test_missing_column_is_named():
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['phase'\]"):
        to_chrome_trace(SD.drop(columns="phase"))


@pytest.mark.parametrize("trace, match", [
    ({"events": []}, "traceEvents"),
    ({"traceEvents": [{"name": "a", "ph": "Q", "pid": 1, "tid": 1, "ts": 0}]}, "ph"),
    ({"traceEvents": [{"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": -1, "dur": 1}]}, "ts"),
    ({"traceEvents": [{"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 0}]}, "dur"),
    ({"traceEvents": [{"name": "a", "ph": "X", "pid": "1", "tid": 1, "ts": 0, "dur": 1}]}, "pid"),
    ({"traceEvents": [{"name": "c", "ph": "C", "pid": 1, "ts": 0, "args": {"v": "x"}}]}, "counter"),
    ({"traceEvents": [{"name": "bogus", "ph": "M", "pid": 1, "args": {}}]}, "metadata"),
    ({"traceEvents": [{"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
                      {"name": "b", "ph": "X", "pid": 1, "tid": 1, "ts": 5, "dur": 10}]}, "partially overlaps"),
])
def test_validator_rejects_malformed_traces(trace, match):
    with pytest.raises(ValueError, match=match):
        validate_chrome_trace(trace)


def test_validator_accepts_nested_slices_on_one_track():
    validate_chrome_trace({"traceEvents": [
        {"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"name": "b", "ph": "X", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
        {"name": "c", "ph": "X", "pid": 1, "tid": 1, "ts": 10, "dur": 1},
    ]})


def test_write_is_valid_json_deterministic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "timeline.json"
    trace = write_chrome_trace(path, PSD, process_name="psd")
    text = path.read_text()
    loaded = json.loads(text)
    assert loaded == trace
    validate_chrome_trace(loaded)
    assert text == dumps_chrome_trace(to_chrome_trace(PSD, process_name="psd"))
    assert os.listdir(tmp_path) == ["timeline.json"]
    with pytest.raises(ValueError, match="exactly one"):
        write_chrome_trace(path)


def test_max_steps_keeps_first_steps_and_says_so():
    steps = step_table([sl(i, "decode", 0.1 * i, 0.1 * (i + 1)) for i in range(10)])
    both = pd.concat([steps.assign(run="long"), steps.iloc[:3].assign(run="short")], ignore_index=True)
    trace = to_chrome_trace(both, max_steps=4)
    validate_chrome_trace(trace)
    assert [e["args"]["step"] for e in events(trace, "X", pid=1)] == [0, 1, 2, 3]
    assert len(events(trace, "X", pid=2)) == 3
    procs = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    assert procs == {1: "long (first 4 of 10 steps)", 2: "short"}
    assert trace["otherData"]["truncated"] == "long: first 4 of 10 steps"
    assert "truncated" not in to_chrome_trace(both)["otherData"]
    assert len(events(to_chrome_trace(steps, max_steps=0), "X")) == 10  # 0 means no limit
    with pytest.raises(ValueError, match="max_steps"):
        to_chrome_trace(steps, max_steps=-1)


def test_a_cluster_gets_tracks_per_replica_and_device_and_concurrent_replicas_do_not_overlap_lanes():
    # two PSD replicas running the same steps at the same times: separate tracks, no overlap lanes
    steps = pd.concat([PSD.assign(replica=0), PSD.assign(replica=1)], ignore_index=True)
    trace = to_chrome_trace(steps, process_name="cluster")
    validate_chrome_trace(trace)
    names = set(thread_names(trace).values())
    assert names == {f"replica {j} \u00b7 {d}" for j in (0, 1) for d in ("target GPU(s)", "draft GPU")}
    xs = events(trace, "X")
    assert len(xs) == len(steps)
    by_track = {}
    for e in xs:
        by_track.setdefault(thread_names(trace)[e["tid"]], []).append(e["ts"])
    assert by_track["replica 0 \u00b7 target GPU(s)"] == by_track["replica 1 \u00b7 target GPU(s)"]
    kv = [e for e in events(trace, "C") if e["name"].endswith("KV blocks used (target)")]
    assert {e["name"] for e in kv} == {f"replica {j} \u00b7 KV blocks used (target)" for j in (0, 1)}


@given(st.lists(st.integers(0, 6), min_size=1, max_size=40), st.integers(0, 12), st.booleans())
@settings(max_examples=80, deadline=None)
def test_first_steps_fast_path_cuts_like_the_sorting_one(gaps, max_steps, shuffle):
    """Sorted step numbers (repeats: several slices per step) are cut by one pass; any order by np.unique."""
    from simulator.measure.timeline import first_steps

    steps = np.cumsum(np.array(gaps) // 3)  # non-decreasing, with repeats
    if shuffle:
        steps = np.random.default_rng(len(gaps)).permutation(steps)
    df = pd.DataFrame({"step": steps, "x": np.arange(len(steps))})
    kept, n_kept, n_total = first_steps(df, max_steps)
    numbers = np.unique(steps)
    assert n_total == len(numbers)
    expect = df if not max_steps or len(numbers) <= max_steps else df[df["step"] <= numbers[max_steps - 1]]
    assert kept["x"].tolist() == expect["x"].tolist() and n_kept == min(max_steps or n_total, n_total)


def test_dumps_writes_each_event_as_json_dumps_does():
    """dumps_chrome_trace encodes with one shared encoder: the text must be json.dumps's, event by event."""
    trace = to_chrome_trace(SD)
    expected = ",\n".join(json.dumps(e, separators=(",", ":"), allow_nan=False) for e in trace["traceEvents"])
    assert dumps_chrome_trace(trace).startswith('{"traceEvents":[\n' + expected + "\n]")
    args = [e["args"] for e in events(trace, "X")]
    cols = [c for c in ("step", "num_seqs", "prefill_tokens", "batched_tokens", "kv_tokens", "kv_blocks_used",
                        "proposed_tokens", "accepted_tokens", "emitted_tokens", "sub_batch", "drafters")]
    assert args == [{c: SD[c].tolist()[i] for c in cols} for i in range(len(SD))]  # every row's values, in order
    assert all(type(v) in (int, str) for a in args for v in a.values())
