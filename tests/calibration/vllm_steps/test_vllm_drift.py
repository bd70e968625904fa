"""The calibration cells' speed drift (calibration/vllm_steps/drift.py) against hand-worked values: each cell's
factor, the between-cell spread with the steps' jitter taken out, Student-t quantiles from the table, stratified
draws that follow the seed, scaled profiles; and `validate --drift`, whose interval widens with a known drift and
keeps the point prediction."""
from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from calibration.vllm_steps import validate_compare
from calibration.vllm_steps.drift import CellFactor, SpeedDrift, cell_factor, profile_cells, profile_drift, \
    profile_groups, scaled_profile, speed_drift
from calibration.vllm_steps.validate_compare import interval_coverage, validate_all
from calibration.vllm_steps.validate_run import load_config
from simulator.costs.latency import LinearProfile, Measurement, TableProfile
from simulator.costs.step_model import StepShape, StructuredProfile
from traces.errors import TraceFormatError

FIX = Path(__file__).parent / "fixtures" / "vllm-validate"
BASE = LinearProfile("base", {"const": 0.010, "num_seqs": 0.002})


def _steps(factor: float, n: int, noise: float = 0.0, seed: int = 0) -> list[Measurement]:
    """n decode steps of 1-8 sequences taking `factor` x BASE's price, times (1 + noise x N(0, 1))."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        s = int(rng.integers(1, 9))
        t = factor * (0.010 + 0.002 * s) * (1.0 + noise * rng.normal())
        out.append(Measurement(num_seqs=s, batched_tokens=s, kv_tokens=100 * s, seconds=t))
    return out


def test_noise_free_groups_give_their_factors_and_the_sample_spread():
    factors = [0.9, 1.0, 1.2, 1.05]
    d = speed_drift(BASE, [(f"g{i}", _steps(f, 50, seed=i)) for i, f in enumerate(factors)])
    for g, f in zip(d.groups, factors):
        assert g.factor == pytest.approx(f, rel=1e-12) and g.jitter_var == pytest.approx(0.0, abs=1e-20)
    logs = [math.log(f) for f in factors]
    assert d.center == pytest.approx(statistics.fmean(logs), rel=1e-12)
    assert d.between == pytest.approx(statistics.stdev(logs), rel=1e-12)  # no jitter: nothing taken out
    assert d.df == 3 and d.scale == pytest.approx(statistics.stdev(logs) * math.sqrt(1.25), rel=1e-12)
    assert d.factor(0.5) == pytest.approx(math.exp(statistics.fmean(logs)), rel=1e-12)
    # t(3) 97.5% point from the table: 3.182
    assert d.factor(0.975) == pytest.approx(math.exp(d.center + 3.182 * d.scale), rel=1e-3)


def test_the_steps_own_jitter_is_taken_out_of_the_spread():
    # six groups at the same speed, 10% step jitter: ln factor's jitter variance is 0.1^2 / n (n = 1000)
    d = speed_drift(BASE, [(f"g{i}", _steps(1.0, 1000, noise=0.1, seed=i)) for i in range(6)])
    for g in d.groups:
        assert g.jitter_var == pytest.approx(0.01 / 1000, rel=0.15)
    raw = statistics.stdev(math.log(g.factor) for g in d.groups)
    assert d.between < raw
    # with a real drift (+-20%) on top, the estimate is near the drift's own spread
    drifted = speed_drift(BASE, [(f"g{i}", _steps(f, 1000, noise=0.1, seed=i))
                                 for i, f in enumerate([0.8, 1.2, 0.8, 1.2, 0.8, 1.2])])
    logs = [math.log(f) for f in [0.8, 1.2, 0.8, 1.2, 0.8, 1.2]]
    assert drifted.between == pytest.approx(statistics.stdev(logs), rel=0.05)


def test_fewer_than_three_cells_is_an_error():
    with pytest.raises(ValueError, match=r"2 calibration cell\(s\).*at least 3"):
        speed_drift(BASE, [("a", _steps(1.0, 5)), ("b", _steps(1.1, 5))])
    for n in (0, 1):
        with pytest.raises(ValueError, match=f"cell 'a': {n} steps.*at least 2 steps"):
            cell_factor(BASE, "a", _steps(1.0, n))


def test_a_cells_jitter_variance_counts_the_degree_of_freedom_its_factor_spends():
    # two steps of the same price p at 1.1 p and 0.9 p: f = 1, sum of squares 0.02 p^2 over M^2 = 4 p^2, times 2 / 1
    p = BASE.step_time(2, 2, 200)
    ms = [Measurement(num_seqs=2, batched_tokens=2, kv_tokens=200, seconds=x * p) for x in (1.1, 0.9)]
    g = cell_factor(BASE, "a:2", ms)
    assert g.factor == pytest.approx(1.0, rel=1e-12) and g.jitter_var == pytest.approx(0.01, rel=1e-12)


def test_draws_are_stratified_and_follow_the_seed():
    d = SpeedDrift(tuple(CellFactor(f"g{i}", 10, 1.0, 0.0) for i in range(5)), 0.01, 0.1)
    a = d.draws(8, np.random.default_rng(3))
    assert np.array_equal(a, d.draws(8, np.random.default_rng(3)))
    assert not np.array_equal(a, d.draws(8, np.random.default_rng(4)))
    u = np.sort(stats.t.cdf((np.log(a) - 0.01) / d.scale, d.df))  # each draw's quantile
    assert all(k / 8 <= q < (k + 1) / 8 + 1e-9 for k, q in enumerate(u))  # one per stratum


def test_a_scaled_profile_prices_every_step_that_many_times():
    lin = scaled_profile(BASE, 1.25)
    assert lin.step_time(3, 3, 300) == pytest.approx(1.25 * BASE.step_time(3, 3, 300), rel=1e-12)
    roof = StructuredProfile("r", {"const": 0.004, "decode_kv": 1e-6, "flop_tokens": 2e-4, "prefill_step": 0.003},
                             "roofline")
    for shape in (StepShape(4, 0, 2000), StepShape(1, 0, 10, 1, 500, 500, 250000)):  # memory- and compute-bound
        assert scaled_profile(roof, 0.8).shape_time(shape) == pytest.approx(0.8 * roof.shape_time(shape), rel=1e-12)
    table = TableProfile("t", _steps(1.0, 8))
    with pytest.raises(ValueError, match="cannot scale a TableProfile"):
        scaled_profile(table, 1.1)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="speed factor"):
            scaled_profile(BASE, bad)


def _ngram_data():
    from calibration.vllm_steps.calibrate import parse_mode
    from calibration.vllm_steps.validate_compare import load_mode

    return load_mode(FIX / "ngram-k3", dataclasses.replace(parse_mode("ngram:3"), label="ngram-k3"))


def test_the_predictive_profiles_steps_record_their_calibration_group():
    """validate's predictive profile keeps one step per calibration step, each tagged with the one group whose
    requests it scheduled (checked against result.json's request ids directly); the drift groups them so."""
    from calibration.vllm_steps.fit import step_group
    from calibration.vllm_steps.validate_compare import calibration_group_of, fit_mode_profiles

    data = _ngram_data()
    group_of = calibration_group_of(data)
    prof = fit_mode_profiles(data, data.cal_log, "p", "smollm2", "linear", group_of).target
    assert len(prof.measurements) == len(data.cal_log.steps)
    client = {q["id"]: g["name"] for g in data.result["calibration"] if g["name"] != "warmup" for q in g["requests"]}
    for m, st in zip(prof.measurements, data.cal_log.steps):
        names = {client[r.id.rsplit("-", 1)[0]] if r.id not in client else client[r.id] for r in st.requests}
        assert len(names) == 1 and m.extra["group"] == names.pop()
    groups, mixed = profile_groups(prof, "p.yaml")
    assert [g for g, _ in groups] == ["batch1", "batch2", "stagger3"] and mixed == 0
    assert sum(len(ms) for _, ms in groups) == len(prof.measurements)
    # a step that schedules requests of two groups has no one group's speed: tagged None, left out and counted
    ids = sorted({r.id for r in data.cal_log.steps[-1].requests} | {r.id for r in data.cal_log.steps[0].requests})
    st = dataclasses.replace(data.cal_log.steps[0], requests=[dataclasses.replace(data.cal_log.steps[0].requests[0],
                                                                                   id=i) for i in ids])
    assert step_group(st, group_of) is None
    assert step_group(st, {ids[0]: "a"}) == "a"  # requests of no named group (another client) do not count


def test_a_profile_without_group_tags_is_refused_naming_the_file_and_field():
    prof = LinearProfile("old", {"const": 0.01}, measurements=_steps(1.0, 4))
    with pytest.raises(TraceFormatError, match=r"old\.yaml, field 'measurements\[0\]\.extra\.group'.*calibrat"):
        profile_drift(prof, "old.yaml")
    tagged = [dataclasses.replace(m, extra={"group": g})
              for m, g in zip(_steps(1.0, 6), ["a", "a", "b", "b", "c", None])]
    groups, mixed = profile_groups(LinearProfile("t", {"const": 0.01}, measurements=tagged), "t.yaml")
    assert [(g, len(ms)) for g, ms in groups] == [("a", 2), ("b", 2), ("c", 1)] and mixed == 1


def test_cells_split_each_group_by_batch_and_leave_lone_steps_out():
    plan = [("a", 1), ("a", 2), ("a", 1), ("b", 1), ("b", 1), ("a", 2), ("c", 4), ("c", 4), ("b", 3), (None, 1)]
    speed = {"a": 1.0, "b": 1.2, "c": 0.9, None: 1.0}
    tagged = [Measurement(num_seqs=s, batched_tokens=s, kv_tokens=100 * s, seconds=speed[g] * (0.01 + 0.002 * s),
                          extra={"group": g}) for g, s in plan]
    prof = LinearProfile("t", {"const": 0.01, "num_seqs": 0.002}, measurements=tagged)
    cells, mixed, lone = profile_cells(prof, "t.yaml")
    where = [(c, [next(i for i, t in enumerate(tagged) if t is m) for m in ms]) for c, ms in cells]
    assert where == [("a:1", [0, 2]), ("a:2", [1, 5]), ("b:1", [3, 4]), ("c:4", [6, 7])]
    assert mixed == 1 and lone == 1  # the step of several groups; b's one step at batch 3
    d = profile_drift(prof, "t.yaml")
    assert (d.left_out_steps, d.lone_steps, d.df) == (1, 1, 3)
    assert [g.factor for g in d.groups] == [pytest.approx(f, rel=1e-12) for f in (1.0, 1.0, 1.2, 0.9)]


def _known(between: float):
    """mode_drift replaced by a known drift: four groups, centred on 1."""
    return lambda data, profile: SpeedDrift(tuple(CellFactor(f"g{i}", 10, 1.0, 0.0) for i in range(4)), 0.0,
                                            between)


def _width(row) -> float:
    return row["interval"][1] - row["interval"][0]


@pytest.mark.slow
def test_the_interval_widens_with_a_known_drift_and_keeps_the_point_prediction(monkeypatch):
    cfg = load_config(FIX / "validate.yaml")
    plain = validate_all(cfg, FIX, model_name="smollm2", repeats=3)
    reports = {}
    for between in (0.0, 0.05, 0.3):
        monkeypatch.setattr(validate_compare, "mode_drift", _known(between))
        reports[between] = validate_all(cfg, FIX, model_name="smollm2", repeats=3, drift=True)
    assert reports[0.0].rows == plain.rows  # a factor of exactly 1 prices every repeat as before
    assert reports[0.3].info["interval_source"] == "seeds + drift" and plain.info["interval_source"] == "seeds"
    rows = {b: [r for r in rep.rows if r["kind"] == "predictive"] for b, rep in reports.items()}
    for a, b, c in zip(rows[0.0], rows[0.05], rows[0.3]):
        assert a["predicted"] == b["predicted"] == c["predicted"]  # repeat 0 is never scaled
        if a["metric"] in ("ttft_mean_s", "e2e_mean_s", "tpot_mean_s"):
            assert _width(a) <= _width(b) + 1e-12 <= _width(c) + 2e-12, (a["mode"], a["fraction"], a["metric"])
    assert all(_width(c) > _width(a) for a, c in zip(rows[0.0], rows[0.3]) if c["metric"] == "e2e_mean_s")


@pytest.mark.slow
def test_validate_drift_follows_the_seed():
    cfg = load_config(FIX / "validate.yaml").model_copy(update={"modes": ["ngram:3"]})
    a, b = (validate_all(cfg, FIX, model_name="smollm2", repeats=3, bootstrap=True, drift=True) for _ in range(2))
    assert a.rows == b.rows and a.info["modes"]["ngram-k3"]["speed_drift"] == b.info["modes"]["ngram-k3"]["speed_drift"]
    other = validate_all(cfg.model_copy(update={"seed": 1}), FIX, model_name="smollm2", repeats=3, bootstrap=True,
                         drift=True)
    draws = [lv["factors"] for lv in a.info["modes"]["ngram-k3"]["speed_drift"]["draws_by_level"]]
    assert draws != [lv["factors"] for lv in other.info["modes"]["ngram-k3"]["speed_drift"]["draws_by_level"]]
    assert a.info["interval_source"] == "seeds + refit + drift"


def test_drift_is_refused_with_profiles_from_another_calibration(tmp_path):
    cfg = load_config(FIX / "validate.yaml").model_copy(update={"modes": ["ngram:3"]})
    with pytest.raises(ValueError, match="--drift: .*own calibration groups.*--profiles-from"):
        validate_all(cfg, FIX, model_name="smollm2", repeats=2, profiles_from=tmp_path, drift=True)


def test_drift_on_a_run_with_too_few_cells_names_the_file(monkeypatch):
    from calibration.vllm_steps import drift

    cells = drift.profile_cells
    monkeypatch.setattr(drift, "profile_cells", lambda prof, where: (cells(prof, where)[0][:2], 0, 0))  # two cells
    cfg = load_config(FIX / "validate.yaml").model_copy(update={"modes": ["ar"]})
    with pytest.raises(TraceFormatError, match=r"ar/result.json.*calibration.*--drift: .*2 calibration cell\(s\)"):
        validate_all(cfg, FIX, model_name="smollm2", repeats=2, drift=True)


def test_coverage_counts_rows_per_mode_metric_and_level():
    rows = [{"kind": "predictive", "mode": "ar", "fraction": f, "metric": m, "inside": inside}
            for f, m, inside in ((0.3, "ttft_mean_s", True), (0.3, "e2e_mean_s", False), (0.9, "ttft_mean_s", False))]
    rows += [{"kind": "replay", "mode": "ar", "fraction": 0.3, "metric": "ttft_mean_s"},
             {"kind": "predictive", "mode": "ar", "fraction": 0.9, "metric": "e2e_mean_s", "inside": None}]
    cov = interval_coverage(rows)
    assert cov == {"ar": {"inside": 1, "rows": 3,
                          "by_metric": {"ttft_mean_s": {"inside": 1, "rows": 2},
                                        "e2e_mean_s": {"inside": 0, "rows": 1}},
                          "by_level": {0.3: {"inside": 1, "rows": 2}, 0.9: {"inside": 0, "rows": 1}}}}
