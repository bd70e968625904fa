"""What `draftsim plan` shows (experiments/plan/report.py): the upper-right Pareto front of tokens/s/user vs
tokens/s/GPU, the points it is drawn from, and one line for every candidate that does not fit."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from experiments.plan.report import does_not_fit_line, upper_right_front, user_gpu_points


def test_the_front_keeps_exactly_the_undominated_points():
    pts = [(1.0, 5.0, "a"), (2.0, 4.0, "b"), (2.0, 3.0, "c"), (3.0, 1.0, "d"), (0.5, 0.5, "e")]
    assert upper_right_front(pts) == [(3.0, 1.0, "d"), (2.0, 4.0, "b"), (1.0, 5.0, "a")]


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=30))
def test_the_front_is_the_set_of_points_no_other_point_dominates(raw):
    pts = [(float(x), float(y), str(i)) for i, (x, y) in enumerate(raw)]

    def dominated(p):
        return any(q[0] >= p[0] and q[1] >= p[1] and (q[0], q[1]) != (p[0], p[1]) for q in pts)

    front = upper_right_front(pts)
    assert {(p[0], p[1]) for p in front} == {(p[0], p[1]) for p in pts if not dominated(p)}


def test_user_gpu_points_read_the_stable_curve_rates():
    c = {"num_gpus": 2, "curve": [
        {"steady_tpot_mean_s_mean": 0.02, "steady_throughput_tok_s_mean": 1000.0, "overloaded": False},
        {"steady_tpot_mean_s_mean": 0.05, "steady_throughput_tok_s_mean": 3000.0, "overloaded": True},
        {"steady_tpot_mean_s_mean": None, "steady_throughput_tok_s_mean": 900.0, "overloaded": False}]}
    assert user_gpu_points(c) == [(50.0, 500.0)]


def test_candidates_that_do_not_fit_collapse_into_one_line():
    doc = {"candidates": [{"status": "does_not_fit", "gpu": "l40s", "tp": 1, "replicas": 1, "mode": m,
                           "reason": f"does not fit: needs {i} GiB"} for i, m in enumerate(["AR", "sd", "psd"])]
           + [{"status": "ok", "gpu": "h100-80gb", "tp": 1, "replicas": 1, "mode": "AR"}]}
    line = does_not_fit_line(doc)
    assert line.startswith("does not fit: 3 candidate(s) on l40s tp1 (modes AR, psd, sd)") and "\n" not in line
    assert does_not_fit_line({"candidates": doc["candidates"][3:]}) is None
