"""The kernels' named records (simulator/engine/kernel_records.py): typed settings, the one-record state arrays the
kernels write through (compiled and plain), and one compiled kernel per record types across different runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from numba import njit

from simulator.engine.kernel_records import (PSD_STATE, RUN_STATE, SETTINGS, PSDSettings, Settings, Workload,
                                             new_state, settings_record, submit_request, typed)

INTS = ("policy", "k", "nslot", "k_max", "max_seqs", "budget", "block_size", "total_blocks", "min_match", "k_ngram",
        "k_eagle", "ngram_slot", "proposers", "arms", "bandit", "decode_budget", "lookahead")
BOOLS = ("sd", "chunked", "separate", "closed", "shared", "has_cap", "async_sched", "routed", "sampled", "bd", "tree")
FLOATS = ("overhead", "switch_cost", "oracle_switch", "think", "prior", "prior_eagle", "prior_weight", "decay", "beta",
          "discount", "epsilon", "exp3_gamma", "gap")


def test_the_settings_fields_are_the_ints_bools_and_floats_listed_here():
    assert sorted(Settings._fields) == sorted(INTS + BOOLS + FLOATS)


def test_typed_gives_every_field_its_own_type_whatever_scalar_type_came_in():
    """numpy scalars (what configs and arrays hand over) and Python ones give the same record types, so a run's
    Settings never compile a second kernel."""
    from_numpy = typed(Settings, **{f: np.int32(3) for f in INTS}, **{f: np.bool_(True) for f in BOOLS},
                       **{f: np.float32(0.5) for f in FLOATS})
    from_python = typed(Settings, **{f: 3 for f in INTS}, **{f: 1 for f in BOOLS}, **{f: 0.5 for f in FLOATS})
    for rec in (from_numpy, from_python):
        assert all(type(getattr(rec, f)) is int and getattr(rec, f) == 3 for f in INTS)
        assert all(getattr(rec, f) is True for f in BOOLS)
        assert all(type(getattr(rec, f)) is float and getattr(rec, f) == 0.5 for f in FLOATS)
    assert numba.typeof(from_numpy) == numba.typeof(from_python)
    psd = typed(PSDSettings, split_min=np.int64(2), defer_kv=0, sync_s=1)
    assert (type(psd.split_min), psd.defer_kv, type(psd.sync_s)) == (int, False, float)


def test_the_kernels_settings_record_holds_each_field_at_its_type():
    """settings_record: one SETTINGS record (int64, bool, float64 per the annotations), each value as given."""
    values = {**{f: i + 2 for i, f in enumerate(INTS)}, **{f: i % 2 == 0 for i, f in enumerate(BOOLS)},
              **{f: 0.25 * (i + 1) for i, f in enumerate(FLOATS)}}
    rec = settings_record(typed(Settings, **values))
    assert rec.shape == (1,) and rec.dtype == SETTINGS
    assert {f: SETTINGS[f] for f in INTS + BOOLS + FLOATS} == {
        **{f: np.dtype(np.int64) for f in INTS}, **{f: np.dtype(np.bool_) for f in BOOLS},
        **{f: np.dtype(np.float64) for f in FLOATS}}
    assert {f: rec[0][f].item() for f in Settings._fields} == values


def test_typed_names_a_missing_and_an_unknown_field():
    with pytest.raises(TypeError, match=r"PSDSettings: no value for \['sync_s'\], no field for \['sync'\]"):
        typed(PSDSettings, split_min=2, defer_kv=False, sync=0.0)


@njit
def _bump(state):
    st = state[0]
    st.ptr += 2
    st.now = st.now + 0.25
    return st.ptr


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "plain"])
def test_a_state_record_is_zero_but_for_its_values_and_writes_through(compiled):
    """new_state: one record, zero but for the values given; `st = state[0]` then `st.field = ...` changes the
    array (the kernels read their counters so and save them back), numba-compiled or plain Python."""
    state = new_state(ptr=5, now=1.5)
    assert state.shape == (1,) and state.dtype == RUN_STATE
    assert [state[f][0] for f in RUN_STATE.names] == [5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.5, 0.0, 0, 0, 0, 0, 0]
    got = (_bump if compiled else _bump.py_func)(state)
    assert (got, state[0].ptr, state[0].now) == (7, 7, 1.75)
    psd = new_state(PSD_STATE, side=1)
    psd[0].fallback = 4
    assert (psd.side[0], psd.fallback[0]) == (1, 4)


def test_different_runs_share_one_compiled_kernel_per_kernel(tmp_path):
    """AR, fixed-k SD, adaptive-k and UCB runs, a plug-in (asked in Python), open and closed loop, and a PSD run, in
    a fresh interpreter: each kernel has exactly one compiled signature afterwards (the records' types do not vary
    per run, so nothing recompiles per run)."""
    code = """
from policies.registry import make_policy
from simulator.engine import compiled_kernel, compiled_psd_kernel
from tests.simulator.engine.test_compiled_run import build, traces_with, workload, PSDConfig, Recorder
t = traces_with(8, 3, 0.6, True)
runs = []
for wl in (workload(t, 14, rate=90.0, seed=3), workload(t, 14, rate=None, seed=4, clients=3, think=0.01)):
    runs.append(build(traces=t, wl=wl, mode="ar", drafters=()).simulate())
    for spec in (None, {"name": "adaptive-k", "drafter": "d", "k_max": 4},
                 {"name": "ucb", "drafters": ["g", "d"], "k": 3, "scope": "shared"}):
        pol = None if spec is None else make_policy(spec, seed=0)
        runs.append(build(traces=t, wl=wl, drafters=("d", "g"), policy=pol).simulate())
    runs.append(build(traces=t, wl=wl, drafters=("d", "g"), policy=Recorder()).simulate())
    runs.append(build(traces=t, wl=wl, mode="psd", psd=PSDConfig()).simulate())
print(len(compiled_kernel.run_steps.signatures), len(compiled_psd_kernel.run_psd_steps.signatures),
      len(compiled_kernel.step_time_estimate.signatures))
"""
    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1", "1", "1"]


def test_submit_request_appends_the_request_in_routing_order():
    """Hand-worked: workload requests 2 then 0 (prompt blocks 4 and 1) routed to a replica that holds none: they
    become its requests 0 and 1 with their arrival, lengths and trace positions, workload indices 2 and 0, prompt
    block prefix sums 0, 4, 5, and 2 submitted; compiled, the same."""
    import simulator.cluster.compiled_cluster_kernel as cker

    src = Workload(np.array([0.5, 1.0, 1.5]), np.zeros(1, dtype=np.int64), np.array([10, 20, 30]),
                   np.array([5, 6, 7]), np.array([0, 100, 200]), np.array([99, 199, 299]))
    got = []
    for submit in (submit_request, cker._submit):
        dst = Workload(np.full(3, -1.0), src.client_of, *(np.zeros(3, dtype=np.int64) for _ in range(4)))
        gidx, cum, state = np.zeros(3, dtype=np.int64), np.zeros(4, dtype=np.int64), new_state()
        submit(dst, gidx, cum, state[0], src, 2, 4)
        submit(dst, gidx, cum, state[0], src, 0, 1)
        assert list(dst.arrival[:2]) == [1.5, 0.5] and list(dst.prompt[:2]) == [30, 10]
        assert list(dst.out[:2]) == [7, 5] and list(dst.first[:2]) == [200, 0] and list(dst.last[:2]) == [299, 99]
        assert list(gidx[:2]) == [2, 0] and list(cum[:3]) == [0, 4, 5] and state[0].submitted == 2
        got.append([list(a) for a in (*dst, gidx, cum)])
    assert got[0] == got[1]
