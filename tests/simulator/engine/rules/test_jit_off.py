"""The step path runs the compiled rules; with numba's JIT switched off (NUMBA_DISABLE_JIT=1) it runs them as plain
Python, and the requests, steps and ITL tables are bit for bit the same (same integer and IEEE operations in the same
order; tolerance zero), preemption under KV pressure, PSD and a closed loop included."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd

CODE = """
import pickle
from policies.registry import make_policy
from simulator.engine import compiled_run
from tests.simulator.engine.engine_fixtures import PSDConfig, traces_with, workload
from tests.simulator.engine.test_compiled_run import build
compiled_run.COMPILED = False
t = traces_with(8, 3, 0.6, True)
wl = workload(t, 14, rate=90.0, seed=3)
runs = [dict(mode="ar", kv_tokens=256), dict(kv_tokens=256), dict(mode="psd", psd=PSDConfig(), kv_tokens=256),
        dict(policy=make_policy({"name": "adaptive-k", "drafter": "d", "k_max": 4}, seed=0)),
        dict(wl=workload(t, 14, rate=None, clients=3, seed=3))]
out = []
for kw in runs:
    kw.setdefault("wl", wl)
    res = build(traces=t, drafters=("d", "g"), **kw).simulate()
    out.append((res.extras["engine_path"], res.requests, res.steps, res.itl.tobytes()))
pickle.dump(out, open(OUT, "wb"))
"""


def test_step_path_with_jit_off_gives_the_same_tables(tmp_path):
    root = Path(__file__).resolve().parents[4]
    tables = []
    for jit_off in ("0", "1"):
        out = tmp_path / f"out{jit_off}"
        env = dict(os.environ, NUMBA_DISABLE_JIT=jit_off)
        subprocess.run([sys.executable, "-c", CODE.replace("OUT", repr(str(out)))], cwd=root, env=env, check=True)
        tables.append(pickle.loads(out.read_bytes()))
    preempted = 0
    for (path_a, req_a, steps_a, itl_a), (path_b, req_b, steps_b, itl_b) in zip(*tables):
        assert path_a == path_b == "steps"
        pd.testing.assert_frame_equal(req_a, req_b, check_exact=True)
        pd.testing.assert_frame_equal(steps_a, steps_b, check_exact=True)
        assert itl_a == itl_b
        preempted += int(req_a["preemptions"].sum())
    assert preempted > 0  # the KV-pressure runs exercised growth with preemption
