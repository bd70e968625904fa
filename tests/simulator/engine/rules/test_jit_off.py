"""The kernels with numba's JIT switched off (NUMBA_DISABLE_JIT=1) run the rules as plain Python, and the requests,
steps and ITL tables are bit for bit the compiled ones (same integer and IEEE operations in the same order; tolerance
zero): AR, SD and PSD under KV pressure (preemption), adaptive-k and a closed loop."""
from __future__ import annotations

from tests.simulator.engine.engine_fixtures import assert_same_run_tables, tables_jit_on_and_off

CODE = """
import pickle
from policies.registry import make_policy
from tests.simulator.engine.engine_fixtures import PSDConfig, traces_with, workload
from tests.simulator.engine.test_compiled_run import build
t = traces_with(8, 3, 0.6, True)
wl = workload(t, 14, rate=90.0, seed=3)
runs = [dict(mode="ar", kv_tokens=256), dict(kv_tokens=256), dict(mode="psd", psd=PSDConfig(), kv_tokens=256),
        dict(policy=make_policy({"name": "adaptive-k", "drafter": "d", "k_max": 4}, seed=0)),
        dict(wl=workload(t, 14, rate=None, clients=3, seed=3))]
out = []
for kw in runs:
    kw.setdefault("wl", wl)
    res = build(traces=t, drafters=("d", "g"), **kw).simulate()
    out.append((res.requests, res.steps, res.itl.tobytes()))
pickle.dump(out, open(OUT, "wb"))
"""


def test_kernels_with_jit_off_give_the_same_tables(tmp_path):
    preempted = 0
    for a, b in tables_jit_on_and_off(CODE, tmp_path):
        assert_same_run_tables(a, b)
        preempted += int(a[0]["preemptions"].sum())
    assert preempted > 0  # the KV-pressure runs exercised growth with preemption
