"""Plots: every PNG is written and decodable, the acceptance plot only when a run drafted, binned means are right."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.image import imread

from experiments.plots import (
    PLOT_FILES,
    binned_time_mean,
    plot_acceptance_lengths,
    plot_batch_and_kv,
    plot_latency_cdfs,
    plot_throughput_latency,
    write_plots,
)
from tests.experiments.test_report import make_run


@pytest.fixture(scope="module")
def runs():
    return {"AR": make_run(3, 0), "eagle3-k2": make_run(3, 2), "psd-eagle3-k2": make_run(3, 2, psd=True)}


def split(runs):
    return ({n: r for n, (r, _, _) in runs.items()}, {n: s for n, (_, s, _) in runs.items()},
            {n: m for n, (_, _, m) in runs.items()})


def test_write_plots_makes_every_png(tmp_path, runs):
    written = write_plots(tmp_path / "plots", *split(runs))
    assert sorted(p.name for p in written) == sorted(PLOT_FILES)
    for p in written:
        img = imread(p)
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 600
        assert img[..., :3].std() > 0.01  # something was drawn, not a blank canvas


def test_acceptance_plot_skipped_without_drafting(tmp_path, runs):
    reqs, steps, summ = split({"AR": runs["AR"]})
    assert plot_acceptance_lengths(reqs, tmp_path / "acc.png") is None
    assert not (tmp_path / "acc.png").exists()
    assert sorted(p.name for p in write_plots(tmp_path, reqs, steps, summ)) == sorted(
        set(PLOT_FILES) - {"acceptance_length.png"})


def test_plots_survive_runs_without_finished_requests(tmp_path, runs):
    r, s, summ = runs["AR"]
    empty = r.iloc[0:0]
    plot_latency_cdfs({"AR": r, "none": empty}, tmp_path / "cdf.png")
    plot_throughput_latency({"AR": summ, "none": {"throughput_tok_s": None, "e2e_p50_s": None}}, tmp_path / "t.png")
    plot_batch_and_kv({"AR": s, "none": s.iloc[0:0]}, tmp_path / "kv.png")
    assert all((tmp_path / n).stat().st_size > 0 for n in ("cdf.png", "t.png", "kv.png"))


def test_binned_time_mean_weights_by_duration():
    edges = np.array([0.0, 2.0, 4.0])
    # Bin 0: [0,1] value 2 and [1,1.5] value 8 -> (2*1 + 8*.5) / 1.5 = 4; bin 1: [2,4] value 5; midpoints decide.
    got = binned_time_mean(np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.5, 4.0]), np.array([2, 8, 5]), edges)
    assert got.tolist() == [4.0, 5.0]
    empty = binned_time_mean(np.array([0.0]), np.array([1.0]), np.array([3]), edges)
    assert empty[0] == 3.0 and np.isnan(empty[1])


@given(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=0, max_size=3000), st.integers(2, 500))
@settings(max_examples=60, deadline=None)
def test_cdf_points_lie_on_the_exact_empirical_cdf(values, points):
    from experiments.plots import cdf_points

    v = np.array(values, dtype=float)
    x, y = cdf_points(v, points)
    assert x.size <= max(points, 0) or x.size == v.size
    if v.size:
        exact = np.sort(v)
        assert x[0] == exact[0] and x[-1] == exact[-1] and y[-1] == 1.0
        # each drawn point is (value, share of values at or below it) of the full sample, up to ties
        at_or_below = np.searchsorted(exact, x, side="right") / v.size
        assert np.all(y <= at_or_below + 1e-12) and np.all(np.diff(x) >= 0)


def test_pareto_runs_and_binned_max():
    from experiments.plots import binned_time_max, pareto_runs

    pts = {"AR": (1.2, 1621.0), "k1": (0.96, 1633.0), "k5": (0.62, 1650.0), "slow-high": (2.0, 1700.0)}
    assert pareto_runs(pts) == ["k5", "slow-high"]
    assert pareto_runs({"a": (1.0, 1.0), "b": (1.0, 1.0)}) == ["a", "b"]  # ties dominate nobody
    edges = np.array([0.0, 2.0, 4.0])
    got = binned_time_max(np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.5, 4.0]), np.array([2, 8, 5]), edges)
    assert got.tolist() == [8.0, 5.0]


def test_figure_axes_carry_at_most_max_ticks_major_intervals():
    """_figure caps the major ticks of a linear axis (MAX_TICKS intervals: fewer artists to draw); a log axis keeps
    its own locator."""
    from experiments.plots import MAX_TICKS, _figure

    fig, axes = _figure(1, 2, 14, 4, margins=dict(left=0.05, right=0.95, bottom=0.1, top=0.9))
    axes[0].plot([0.0, 837.3], [0.0, 63.7])
    axes[1].plot([1.0, 5000.0], [0.0, 1.0])
    axes[1].set_xscale("log")
    fig.canvas.draw()
    for ax in (axes[0].xaxis, axes[0].yaxis, axes[1].yaxis):
        lo, hi = sorted(ax.get_view_interval())
        shown = [t for t in ax.get_majorticklocs() if lo <= t <= hi]
        assert 2 <= len(shown) <= MAX_TICKS + 1
    assert axes[1].get_xscale() == "log" and type(axes[1].xaxis.get_major_locator()).__name__ == "LogLocator"


def test_identical_acceptance_is_one_group_in_first_seen_order():
    from experiments.plots import identical_groups

    a, b = np.array([1.0, 2.5, 3.0]), np.array([1.0, 2.5, 3.5])
    groups = identical_groups({"sd-k3": a, "sd-k5": b, "psd-k3": a.copy(), "psd-k5": b.copy(), "x": a[:2]})
    assert groups == [["sd-k3", "psd-k3"], ["sd-k5", "psd-k5"], ["x"]]


def test_runs_on_different_gpu_counts_are_compared_per_gpu():
    from experiments.plots import throughput_key

    sd, psd = {"num_gpus": 4, "throughput_tok_s": 400.0}, {"num_gpus": 5, "throughput_tok_s": 450.0}
    assert throughput_key({"sd": sd, "psd": psd}) == "throughput_tok_s_per_gpu"
    assert throughput_key({"sd": sd, "sd2": dict(sd)}) == "throughput_tok_s"


def test_overloaded_runs_are_marked_and_many_runs_stay_readable(tmp_path, runs):
    from experiments.plots import overloaded_runs

    reqs, steps, summ = split(runs)
    summ = {r: {**s, "overloaded": r == "AR"} for r, s in summ.items()}
    assert overloaded_runs(summ) == {"AR"}
    # 30 runs with distinct acceptance: a panel per histogram (a taller image than the 3-run overlay), the
    # throughput bars one row per run, the legends in columns: every figure drawn, none cut to the old size
    many = {f"run-{i}": make_run(100 + i, 1 + i % 5) for i in range(30)}
    mreqs, msteps, msumm = split(many)
    few = write_plots(tmp_path / "few", reqs, steps, summ)
    lots = write_plots(tmp_path / "many", mreqs, msteps, msumm)
    size = {p.name: imread(p).shape[0] for p in few}
    for p in lots:
        img = imread(p)
        assert img[..., :3].std() > 0.01
        if p.name in ("acceptance_length.png", "throughput_latency.png", "latency_cdf.png"):
            assert img.shape[0] > size[p.name], p.name
