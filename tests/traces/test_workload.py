"""Workloads: arrival processes (rate, CV), closed loop, replay, sampling and ids, parametric lengths."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.traces.synth_helpers import bundle_from
from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle
from traces.errors import TraceFormatError
from traces.synthetic import IidAcceptance
from traces.synthetic.fit_cache import clear_memory_cache
from traces.workload import (AcceptanceNotDrawnError, ClosedLoop, WorkloadSpec, build_workload, load_arrival_times,
                             request_ids, workload_and_bundle)


def small_bundle(n: int = 5, with_arrivals: bool = False) -> TraceBundle:
    meta = BundleMeta(target="t", drafters={"d": DrafterSpec("d", "eagle", "c")})
    return TraceBundle(meta, [RequestTrace(f"t{i}", 10 + i, 3 + i, {"d": DrafterTrace(np.ones(3 + i, np.int32))},
                                           category="c" if i % 2 else "e",
                                           arrival_time=(10.0 - i) if with_arrivals else None)
                              for i in range(n)])


def spec(**kw) -> WorkloadSpec:
    return WorkloadSpec.model_validate(kw)


def gaps(n: int, arrival: dict, seed: int = 0) -> np.ndarray:
    w = build_workload(small_bundle(), spec(num_requests=n, arrival=arrival, sample={"with_replacement": True}), seed)
    t = np.array([r.arrival_time for r in w.requests])
    return np.diff(np.concatenate([[0.0], t]))


def test_poisson_rate_and_cv():
    g = gaps(20_000, {"kind": "poisson", "rate": 4.0})
    assert 1 / g.mean() == pytest.approx(4.0, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_rate_and_cv(cv):
    g = gaps(20_000, {"kind": "gamma", "rate": 2.0, "cv": cv})
    assert 1 / g.mean() == pytest.approx(2.0, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.06)


def test_arrivals_are_seeded():
    a = gaps(100, {"kind": "poisson", "rate": 1.0}, seed=5)
    b = gaps(100, {"kind": "poisson", "rate": 1.0}, seed=5)
    c = gaps(100, {"kind": "poisson", "rate": 1.0}, seed=6)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_closed_loop_leaves_arrivals_to_the_engine():
    w = build_workload(small_bundle(), spec(arrival={"kind": "closed_loop", "clients": 3, "think_time": 0.5}), 0)
    assert w.closed_loop == ClosedLoop(3, 0.5)
    assert all(r.arrival_time is None for r in w.requests)
    assert sorted(r.trace_id for r in w.requests) == [f"t{i}" for i in range(5)]


def test_without_replacement_uses_each_trace_once_and_refuses_too_many():
    w = build_workload(small_bundle(), spec(arrival={"kind": "poisson", "rate": 1}), 1)
    assert sorted(r.request_id for r in w.requests) == [f"t{i}" for i in range(5)]
    r = {x.trace_id: x for x in w.requests}["t2"]
    assert (r.prompt_len, r.output_len, r.category) == (12, 5, "e")
    with pytest.raises(ValueError, match="with_replacement"):
        build_workload(small_bundle(), spec(num_requests=6, arrival={"kind": "poisson", "rate": 1}), 1)


@settings(max_examples=60, deadline=None)
@given(traces=st.integers(1, 12), n=st.integers(1, 60), seed=st.integers(0, 2**32 - 1), shuffle=st.booleans())
def test_repeat_replays_the_traces_in_whole_passes(traces, n, seed, shuffle):
    """`repeat`: every run of `traces` requests from the start uses each trace once, so no trace is used more than
    once beyond any other; unshuffled passes are the bundle's order; the same seed draws the same passes."""
    sample = {"repeat": True, "shuffle": shuffle}
    w = build_workload(small_bundle(traces), spec(num_requests=n, arrival={"kind": "poisson", "rate": 1},
                                                  sample=sample), seed)
    used = [int(r.trace_id[1:]) for r in w.requests]
    assert len(used) == n
    for start in range(0, n, traces):
        block = used[start:start + traces]
        assert len(set(block)) == len(block)
        if not shuffle:
            assert block == list(range(len(block)))
    counts = np.bincount(used, minlength=traces)
    assert counts.max() - counts.min() <= 1 and counts.max() == -(-n // traces)
    again = build_workload(small_bundle(traces), spec(num_requests=n, arrival={"kind": "poisson", "rate": 1},
                                                      sample=sample), seed)
    assert [r.request_id for r in again.requests] == [r.request_id for r in w.requests]


def test_repeat_and_with_replacement_are_one_choice():
    with pytest.raises(ValidationError, match="repeat .* with_replacement .* set one"):
        spec(num_requests=3, arrival={"kind": "poisson", "rate": 1}, sample={"repeat": True, "with_replacement": True})


def test_reuse_gets_numbered_ids():
    assert request_ids(["a", "b", "a", "a"]) == ["a", "b", "a#1", "a#2"]
    w = build_workload(small_bundle(2), spec(num_requests=50, arrival={"kind": "poisson", "rate": 1},
                                             sample={"with_replacement": True}), 0)
    ids = [r.request_id for r in w.requests]
    assert len(set(ids)) == 50
    assert all(i.split("#")[0] == r.trace_id for i, r in zip(ids, w.requests))


def test_ids_of_traces_used_once_are_the_trace_ids():
    assert request_ids(["b", "a#1", "a"]) == ["b", "a#1", "a"]  # no reuse: nothing numbered, nothing collides
    assert request_ids([]) == []


def test_id_collision_is_an_error():
    with pytest.raises(ValueError, match="collide"):
        request_ids(["a", "a#1", "a"])


def test_replay_bundle_arrivals_in_time_order():
    w = build_workload(small_bundle(with_arrivals=True), spec(arrival={"kind": "replay"}), 0)
    assert [r.arrival_time for r in w.requests] == [6.0, 7.0, 8.0, 9.0, 10.0]
    assert [r.trace_id for r in w.requests] == ["t4", "t3", "t2", "t1", "t0"]


def test_replay_without_arrivals_is_an_error():
    with pytest.raises(ValueError, match="arrival_time"):
        build_workload(small_bundle(), spec(arrival={"kind": "replay"}), 0)


def test_replay_file(tmp_path):
    f = tmp_path / "times.txt"
    f.write_text("0.5\n1.25\n3\n", encoding="utf-8")
    w = build_workload(small_bundle(), spec(arrival={"kind": "replay", "file": str(f)}), 0)
    assert [r.arrival_time for r in w.requests] == [0.5, 1.25, 3.0]
    with pytest.raises(ValueError, match="3 arrival times"):
        build_workload(small_bundle(), spec(num_requests=4, arrival={"kind": "replay", "file": str(f)}), 0)


@pytest.mark.parametrize("text, line", [("1\nsoon\n", 2), ("1\n\n2\n", 2), ("2\n1\n", 2), ("-1\n", 1),
                                        ("nan\n", 1)])
def test_bad_arrival_file_names_line(tmp_path, text, line):
    f = tmp_path / "t.txt"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(TraceFormatError) as e:
        load_arrival_times(f)
    assert e.value.line == line and e.value.path == str(f)


@pytest.mark.parametrize("doc", [
    {"arrival": {"kind": "poisson"}},
    {"arrival": {"kind": "poisson", "rate": -1}},
    {"arrival": {"kind": "gamma", "rate": 1}},
    {"arrival": {"kind": "closed_loop", "clients": 0}},
    {"arrival": {"kind": "burst", "rate": 1}},
    {"arrival": {"kind": "poisson", "rate": 1}, "surprise": 1},
    {"arrival": {"kind": "poisson", "rate": 1}, "lengths": {"source": "parametric"}},
])
def test_spec_rejects_bad_configs(doc):
    with pytest.raises(ValidationError):
        WorkloadSpec.model_validate(doc)


def test_parametric_lengths_come_with_matching_synthetic_traces():
    src = bundle_from(IidAcceptance(rate=0.6), n=40, length=120, seed=1)
    s = spec(num_requests=200, arrival={"kind": "poisson", "rate": 2.0},
             lengths={"source": "parametric", "prompt": {"dist": "uniform", "low": 50, "high": 60},
                      "output": {"dist": "constant", "value": 500}})
    w, synth = workload_and_bundle(src, s, seed=3)
    by_id = {r.id: r for r in synth.requests}
    assert len(w.requests) == 200 and len(synth.requests) == 200
    for r in w.requests:
        t = by_id[r.trace_id]
        assert r.output_len == t.output_len == 500 == t.drafters["d"].acc_len.shape[0]
        assert 50 <= r.prompt_len <= 60 and r.category is None
    acc = np.concatenate([t.drafters["d"].acc_len for t in synth.requests])
    assert (acc > 1).mean() == pytest.approx(0.6, abs=0.03)  # fitted to the source's acceptance
    with pytest.raises(ValueError, match="workload_and_bundle"):
        build_workload(src, s, 0)


def test_parametric_lengths_keep_categories_and_model_choice():
    src = small_bundle(6)
    s = spec(num_requests=30, arrival={"kind": "closed_loop", "clients": 2},
             lengths={"source": "parametric", "prompt": {"dist": "constant", "value": 5},
                      "output": {"dist": "constant", "value": 8}, "acceptance_model": "bursty"})
    w, synth = workload_and_bundle(src, s, seed=0)
    assert {r.category for r in w.requests} <= {"c", "e"}
    assert synth.meta.source["spec"]["categories"]["c"]["acceptance"]["d"]["model"] == "bursty"


def test_bundle_lengths_return_the_same_bundle():
    b = small_bundle()
    w, same = workload_and_bundle(b, spec(arrival={"kind": "poisson", "rate": 1}), 0)
    assert same is b and len(w.requests) == 5


# ---------------------------------------------------------------- need_acceptance=False


PARAMETRIC = {"source": "parametric", "prompt": {"dist": "uniform", "low": 5, "high": 900},
              "output": {"dist": "lognormal", "median": 40, "sigma": 0.8, "max": 300}}
ARRIVALS = [{"kind": "poisson", "rate": 3.0}, {"kind": "gamma", "rate": 2.0, "cv": 3.0},
            {"kind": "closed_loop", "clients": 4}]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), arrival=st.sampled_from(ARRIVALS),
       model=st.sampled_from(["auto", "iid", "positional", "bursty"]), categories=st.booleans())
def test_without_acceptance_the_workload_is_the_same(seed, n, arrival, model, categories):
    src = small_bundle(6)
    if not categories:
        src = TraceBundle(src.meta, [dataclasses.replace(r, category=None) for r in src.requests])
    s = spec(num_requests=n, arrival=arrival, lengths={**PARAMETRIC, "acceptance_model": model})
    w_full, b_full = workload_and_bundle(src, s, seed)
    w_lean, b_lean = workload_and_bundle(src, s, seed, need_acceptance=False)
    assert w_lean == w_full
    shape = [(r.id, r.prompt_len, r.output_len, r.category) for r in b_full.requests]
    assert [(r.id, r.prompt_len, r.output_len, r.category) for r in b_lean.requests] == shape
    assert b_lean.drafter_names == b_full.drafter_names and b_lean.meta.dataset == b_full.meta.dataset


def test_reading_acceptance_that_was_not_drawn_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSIM_CACHE_DIR", str(tmp_path))
    clear_memory_cache()
    s = spec(num_requests=5, arrival={"kind": "poisson", "rate": 1.0}, lengths=PARAMETRIC)
    _, b = workload_and_bundle(small_bundle(6), s, 0, need_acceptance=False)
    r = b.requests[0]
    with pytest.raises(AcceptanceNotDrawnError, match=f"{r.id}.*need_acceptance=True"):
        r.drafters["d"]
    with pytest.raises(AcceptanceNotDrawnError):
        list(r.drafters)
    with pytest.raises(AcceptanceNotDrawnError):
        b.validate()
    assert list(tmp_path.iterdir()) == []  # nothing was fitted


def test_need_acceptance_has_no_effect_on_bundle_lengths():
    b = small_bundle()
    w, same = workload_and_bundle(b, spec(arrival={"kind": "poisson", "rate": 1}), 0, need_acceptance=False)
    assert same is b and w == workload_and_bundle(b, spec(arrival={"kind": "poisson", "rate": 1}), 0)[0]


@given(st.lists(st.sampled_from(["c", "e"]), min_size=1, max_size=2, unique=True), st.integers(1, 40),
       st.integers(0, 2**31 - 1))
@settings(max_examples=30, deadline=None)
def test_a_category_filter_replays_only_those_categories(cats, n, seed):
    b = small_bundle(7)
    w = build_workload(b, spec(num_requests=n, arrival={"kind": "poisson", "rate": 2.0}, categories=cats,
                               sample={"with_replacement": True}), seed)
    assert len(w.requests) == n and {r.category for r in w.requests} <= set(cats)
    allowed = {r.id for r in b.requests if r.category in cats}
    assert {r.trace_id for r in w.requests} <= allowed


def test_category_filter_errors_and_sampling_limits():
    b = small_bundle(5)  # categories: e, c, e, c, e
    with pytest.raises(ValueError, match=r"no requests of category 'cc' \(did you mean 'c'\?\); its categories "
                                         r"are \['c', 'e'\]"):
        build_workload(b, spec(arrival={"kind": "poisson", "rate": 1.0}, categories=["cc"]), 0)
    with pytest.raises(ValueError, match="num_requests = 3 but the bundle has 2 traces"):  # only the 2 of 'c'
        build_workload(b, spec(num_requests=3, arrival={"kind": "poisson", "rate": 1.0}, categories=["c"]), 0)
    with pytest.raises(ValidationError):
        spec(arrival={"kind": "poisson", "rate": 1.0}, categories=[])
    w = build_workload(b, spec(arrival={"kind": "poisson", "rate": 1.0}, categories=["c"]), 0)
    assert sorted(r.trace_id for r in w.requests) == ["t1", "t3"]


def test_category_filter_with_parametric_lengths_draws_only_those_categories():
    from traces.default_bundle import load_default_bundle

    w, synth = workload_and_bundle(load_default_bundle(), spec(
        num_requests=60, arrival={"kind": "poisson", "rate": 1.0}, categories=["math"],
        lengths={"source": "parametric", "prompt": {"dist": "constant", "value": 64},
                 "output": {"dist": "constant", "value": 32}}), seed=0, need_acceptance=False)
    assert {r.category for r in w.requests} == {"math"} and len(w.requests) == 60


@pytest.mark.parametrize("arrival", [{"kind": "poisson", "rate": 3.0}, {"kind": "gamma", "rate": 2.0, "cv": 0.5}])
def test_arrival_times_are_python_floats_of_the_drawn_times(arrival):
    w = build_workload(small_bundle(), spec(num_requests=50, arrival=arrival, sample={"with_replacement": True}), 3)
    times = [r.arrival_time for r in w.requests]
    assert all(type(t) is float for t in times) and times == sorted(times) and times[0] > 0


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**32 - 1), rates=st.lists(st.floats(0.1, 100.0), min_size=1,
       max_size=4), replace=st.booleans(), shuffle=st.booleans(), kind=st.sampled_from(["poisson", "gamma"]))
def test_a_kept_draw_builds_the_workload_a_fresh_generator_draws(n, seed, rates, replace, shuffle, kind):
    """draw_requests keeps draws per process (a plan builds one at many rates): every build equals the rule done by
    hand on a fresh generator (picks first, then the arrival gaps), whether the draw was kept or not."""
    import traces.workload as wl

    bundle = small_bundle(40)
    sample = {"with_replacement": replace, "shuffle": shuffle}
    for i, rate in enumerate(rates):
        if i % 2:
            wl._draws.clear()
        arrival = {"kind": kind, "rate": rate, **({"cv": 0.7} if kind == "gamma" else {})}
        w = build_workload(bundle, spec(num_requests=n, arrival=arrival, sample=sample), seed)
        rng = np.random.default_rng(seed)
        picks = (rng.integers(0, 40, size=n) if replace else rng.permutation(40)[:n] if shuffle else np.arange(n))
        gaps = (rng.exponential(1.0 / rate, size=n) if kind == "poisson"
                else rng.gamma(1.0 / (0.7 * 0.7), 1.0 / (rate * (1.0 / (0.7 * 0.7))), size=n))
        assert [r.trace_id for r in w.requests] == [f"t{i}" for i in picks]
        assert np.array_equal(w.arrival, np.cumsum(gaps))
        assert [r.output_len for r in w.requests] == [3 + int(i) for i in picks]
        assert [(r.prompt_len, r.category) for r in w.requests] == [(10 + int(i), "c" if i % 2 else "e") for i in picks]
        assert w.request_ids == tuple(request_ids([f"t{i}" for i in picks]))
        with pytest.raises(ValueError):
            w.output_len[0] = 1  # shared by every build of the draw: read-only


def test_draws_kept_are_bounded_by_their_requests(monkeypatch):
    import traces.workload as wl

    monkeypatch.setattr(wl, "DRAW_MEMO_MAX_REQUESTS", 100)
    wl._draws.clear()
    for seed in range(10):
        build_workload(small_bundle(5), spec(num_requests=30, arrival={"kind": "poisson", "rate": 1.0},
                                             sample={"with_replacement": True}), seed)
    assert sum(len(d.picks) for d in wl._draws.values()) <= 100 and len(wl._draws) == 3
