"""`draftsim compare --drift` on a small synthetic calibration: a profile whose kept steps record four calibration
groups at known speed factors (measured = factor x the profile's price, no noise). At a load where every request
runs alone, a repeat priced with factor f predicts TTFT, TPOT and E2E exactly f times the point prediction, so
each interval is the point prediction times [min(1, min f), max(1, max f)] over the factors drawn (a closed form,
not the implementation); the point prediction is the one without --drift; the draws follow the seed; a profile
without the group tags (an older calibration) or with too few cells (groups x batch sizes) is refused naming the
file and field."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml

from experiments.cli import main
from experiments.cli.compare import compare, measured_from_results
from experiments.run import run_experiment
from simulator.costs.latency import LinearProfile, Measurement, Provenance, load_profile, save_profile
from traces.measured_run import save_measured

FACTORS = {"batch1": 0.8, "batch2": 1.0, "stagger4": 1.1, "load0.5": 1.3}
BASE = {"const": 0.010, "num_seqs": 0.002, "batched_tokens": 1e-4}


def _price(s: int, tokens: int) -> float:
    return BASE["const"] + BASE["num_seqs"] * s + BASE["batched_tokens"] * tokens


def _profile(groups: dict[str, float], tagged: bool = True) -> LinearProfile:
    ms = []
    for g, f in groups.items():
        for s in (1, 2, 3, 4, 1, 2):
            tokens = s if s > 1 else 33
            ms.append(Measurement(num_seqs=s, batched_tokens=tokens, kv_tokens=100 * s, seconds=f * _price(s, tokens),
                                  extra={"phase": "decode", **({"group": g} if tagged else {})}))
    return LinearProfile("synthetic-ar", dict(BASE), provenance=Provenance("measured"), measurements=ms)


def _config(tmp_path, profile: LinearProfile) -> str:
    path = save_profile(profile, tmp_path / "profiles" / "synthetic-ar.yaml")
    cfg = {"name": "synthetic", "seed": 3, "traces": "builtin:default",
           "workload": {"num_requests": 8, "arrival": {"kind": "poisson", "rate": 0.05},
                        "lengths": {"source": "parametric", "prompt": {"dist": "constant", "value": 32},
                                    "output": {"dist": "constant", "value": 12}}},
           "server": {"target_profile": str(path), "scheduler": "vllm-v1", "max_num_seqs": 4,
                      "max_num_batched_tokens": 256, "block_size": 16, "kv_capacity_tokens": 4096,
                      "step_overhead_s": 0.0},
           "runs": [{"name": "ar", "mode": "ar"}], "baseline": "ar"}
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift")
    cfg = _config(tmp, _profile(FACTORS))
    res = run_experiment(cfg, plots=False)
    r = res.requests.sort_values("arrival_time")
    assert (r.arrival_time.to_numpy()[1:] > r.finish_time.to_numpy()[:-1]).all()  # every request runs alone
    measured = save_measured(measured_from_results(res, "ar"), tmp / "m")
    return tmp, cfg, str(measured)


def test_the_profile_keeps_its_group_tags_through_the_file(synthetic):
    tmp, _, _ = synthetic
    prof = load_profile(tmp / "profiles" / "synthetic-ar.yaml")
    assert [m.extra["group"] for m in prof.measurements] == [g for g in FACTORS for _ in range(6)]


def test_each_repeat_scales_the_lone_requests_latencies_by_its_factor(synthetic):
    _, cfg, measured = synthetic
    plain = compare(measured, cfg, [], repeats=5)
    rep = compare(measured, cfg, [], repeats=5, drift=True)
    assert rep.info["interval_source"] == "seeds + drift" and plain.info["interval_source"] == "seeds"
    d = rep.info["speed_drift"]["ar"]
    # cells GROUP:SEQUENCES: each group's steps at batch 1 and 2 (two each); its batch-3 and -4 steps are alone
    cells = [(f"{g}:{s}", f) for g, f in FACTORS.items() for s in (1, 2)]
    assert [(g["name"], g["factor"]) for g in d["groups"]] == [(c, pytest.approx(f, rel=1e-9)) for c, f in cells]
    logs = [math.log(f) for _, f in cells]
    assert d["center_factor"] == pytest.approx(math.exp(np.mean(logs)), abs=1e-4)
    assert d["between_sd_log"] == pytest.approx(np.std(logs, ddof=1), abs=1e-4)  # noise-free: nothing taken out
    assert d["df"] == 7 and d["left_out_steps"] == 0 and d["lone_steps"] == 8
    f = np.array(d["factors"])
    assert len(f) == 4 and len(set(f)) == 4
    lo, hi = min(1.0, f.min()), max(1.0, f.max())
    for a, b in zip(plain.rows, rep.rows):
        assert a["metric"] == b["metric"] and a["predicted"] == b["predicted"]  # repeat 0 is never scaled
        assert a["error_pct"] == 0.0  # the measured run is the config's own output
        if b["metric"].split("_")[0] in ("ttft", "tpot", "e2e", "itl"):
            assert b["interval"] == [pytest.approx(lo * b["predicted"], rel=2e-4),
                                     pytest.approx(hi * b["predicted"], rel=2e-4)], b
    assert any(n.startswith("ar: speed drift between its 8 calibration cells (4 groups x batch sizes; measured / "
                            "priced 0.800 (batch1:1) to 1.300 (load0.5:1); 0 steps of several groups and 8 steps "
                            "alone in their cell left out)") for n in rep.info["notes"])


def test_the_draws_follow_the_seed(synthetic):
    _, cfg, measured = synthetic
    a, b = (compare(measured, cfg, [], repeats=4, drift=True) for _ in range(2))
    assert a.rows == b.rows and a.info["speed_drift"] == b.info["speed_drift"]
    other = compare(measured, cfg, ["seed=4"], repeats=4, drift=True)
    assert other.info["speed_drift"]["ar"]["factors"] != a.info["speed_drift"]["ar"]["factors"]


def test_an_untagged_profile_is_refused_naming_the_file_and_field(tmp_path, synthetic, capsys):
    _, _, measured = synthetic
    cfg = _config(tmp_path, _profile(FACTORS, tagged=False))
    path = str(tmp_path / "profiles" / "synthetic-ar.yaml")
    with pytest.raises(ValueError) as e:
        compare(measured, cfg, [], repeats=3, drift=True)
    assert path in str(e.value) and "measurements[0].extra.group" in str(e.value) and "calibrat" in str(e.value)
    assert main(["compare", measured, cfg, "--repeats", "3", "--drift"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftsim: error: ") and path in err and "Traceback" not in err
    assert compare(measured, cfg, [], repeats=3).rows  # without --drift the tags are not needed


def test_too_few_groups_or_one_repeat_is_refused(tmp_path, synthetic):
    _, _, measured = synthetic
    cfg = _config(tmp_path, _profile({"batch1": 1.0}))  # one group: two cells of 2 steps or more
    with pytest.raises(ValueError, match=r"synthetic-ar\.yaml, field 'measurements'.*--drift: run ar: speed drift: "
                                         r"2 calibration cell\(s\).*at least 3"):
        compare(measured, cfg, [], repeats=3, drift=True)
    with pytest.raises(ValueError, match=r"--drift: .*--repeats >= 2, got 1"):
        compare(measured, cfg, [], repeats=1, drift=True)


def test_steps_of_several_groups_are_left_out_and_counted(tmp_path, synthetic):
    _, _, measured = synthetic
    prof = _profile(FACTORS)
    prof.measurements[0] = dataclasses.replace(prof.measurements[0], extra={"group": None})
    cfg = _config(tmp_path, prof)
    d = compare(measured, cfg, [], repeats=2, drift=True).info["speed_drift"]["ar"]
    # the first step (batch1, one sequence) served two groups: its cell keeps one step, alone, so left out too
    assert d["left_out_steps"] == 1 and d["lone_steps"] == 9 and [g["steps"] for g in d["groups"]] == [2] + [2] * 6
    assert d["groups"][0]["name"] == "batch1:2"
