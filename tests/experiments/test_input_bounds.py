"""Inputs bounded and validated before work (issue 34, harm classes 4 and 9): a bound is checked before the
allocation it protects (the allocating function is replaced by one that fails, so a late check shows up as
that failure, not as memory), and `compare` reads run.json through one typed model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.experiments.cli_helpers import run_main_quietly
from traces.limits import MAX_CLUSTER_SLOTS, MAX_NUM_REQUESTS

FIX = Path(__file__).parents[1] / "traces" / "fixtures"
ROOT = Path(__file__).parents[2]


def _forbid(monkeypatch, target: str, attr: str) -> None:
    def called(*a, **k):
        raise AssertionError(f"{target}.{attr} ran before the bound was checked")

    monkeypatch.setattr(f"{target}.{attr}", called)


@pytest.fixture
def measured(tmp_path):
    from traces.importers.vllm_bench import import_vllm_bench
    from traces.measured_run import save_measured

    (run,) = import_vllm_bench(FIX / "vllm_bench_detailed.json")
    return save_measured(run, tmp_path / "m")


@pytest.mark.parametrize("repeats", [10**12, 1001, 0, -3])
def test_class4_compare_repeats_refused_before_any_seed_or_read(measured, monkeypatch, repeats):
    _forbid(monkeypatch, "simulator.seeds", "child")
    _forbid(monkeypatch, "traces.measured_run", "load_measured")
    rc, err = run_main_quietly(["compare", str(measured), "default", "--repeats", str(repeats)])
    assert rc == 2 and "--repeats" in err and "Traceback" not in err, err


def test_class4_a_synthetic_spec_over_the_request_bound_is_refused_before_drawing(tmp_path, monkeypatch):
    _forbid(monkeypatch, "traces.synthetic.spec", "draw_shapes")
    spec = yaml.safe_load((ROOT / "traces" / "data" / "default" / "synth-spec.yaml").read_text())
    cfg = yaml.safe_load((ROOT / "experiments" / "configs" / "default.yaml").read_text())
    for n in (MAX_NUM_REQUESTS + 1, 10**15):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({**cfg, "traces": {"synthetic": {**spec, "num_requests": n}}}))
        rc, err = run_main_quietly(["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")])
        assert rc == 2 and "num_requests" in err and f"{MAX_NUM_REQUESTS}" in err, err
    from traces.synthetic.spec import make_synthetic_bundle, parse_synth_spec

    with pytest.raises(ValueError, match="num_requests"):
        make_synthetic_bundle(parse_synth_spec(spec, "spec"), seed=0, num_requests=MAX_NUM_REQUESTS + 1)


def test_class4_cluster_size_bound_is_the_product_of_replicas_and_requests():
    from simulator.scenario import check_cluster_size

    for replicas in (2, 16, 1024):
        fits = MAX_CLUSTER_SLOTS // replicas
        check_cluster_size(replicas, fits, "run x")
        with pytest.raises(ValueError, match=f"{replicas:,} replicas x {fits + 1:,} requests"):
            check_cluster_size(replicas, fits + 1, "run x")
    check_cluster_size(1, MAX_NUM_REQUESTS, "one server")  # a single server holds one copy: no product bound


def test_class4_a_plan_at_1024_replicas_is_refused_before_any_simulation(tmp_path, monkeypatch):
    from experiments.plan.config import load_plan_config
    from experiments.plan.planner import run_plan
    from tests.experiments.test_plan import make_known_case

    _forbid(monkeypatch, "experiments.plan.candidates", "mean_decode_tokens")
    case = make_known_case(tmp_path)
    case["candidates"] = {**case["candidates"], "replicas": [1, 1024], "router": {"name": "round_robin"}}
    with pytest.raises(ValueError, match="1,024 replicas x 512,000 requests"):
        run_plan(load_plan_config(case), tmp_path / "plan", backend="serial", progress=False)


def _mutated_run_json(folder: Path, change) -> None:
    doc = json.loads((folder / "run.json").read_text())
    change(doc)
    (folder / "run.json").write_text(json.dumps(doc))


RUN_JSON_CASES = {
    "name a number": (lambda d: d.update(name=7), "name"),
    "requests a string": (lambda d: d.update(requests="3"), "requests"),
    "request_rate text": (lambda d: d.update(request_rate="fast"), "request_rate"),
    "source a list": (lambda d: d.update(source=[1]), "source"),
    "acceptance length text": (lambda d: d["spec_decode"].update(acceptance_length="2.6"), "acceptance_length"),
    "acceptance length 1e300": (lambda d: d["spec_decode"].update(acceptance_length=1e300), "acceptance_length"),
    "rates above 1": (lambda d: d["spec_decode"].update(per_position_acceptance_rates=[1.5]),
                      "per_position_acceptance_rates"),
    "spec_decode unknown key": (lambda d: d["spec_decode"].update(extra=1), "spec_decode.extra"),
    "format_version 2": (lambda d: d.update(format_version=2), "format_version"),
}


@pytest.mark.parametrize("case", sorted(RUN_JSON_CASES))
def test_class9_run_json_is_read_through_a_typed_model(measured, case):
    from traces.measured_run import load_measured

    change, field = RUN_JSON_CASES[case]
    _mutated_run_json(measured, change)
    with pytest.raises(ValueError) as e:
        load_measured(measured)
    assert str(measured / "run.json") in str(e.value) and field in str(e.value), str(e.value)
    rc, err = run_main_quietly(["compare", str(measured), "default", "--repeats", "1"])
    assert rc == 2 and "Traceback" not in err and "run.json" in err, err


REQUEST_CASES = {
    "e2e 1e300 s": (lambda r: r.update(e2e=1e300), "e2e"),
    "ttft above the bound": (lambda r: r.update(ttft=2e7, e2e=2e7), "ttft"),
    "send time 1e300": (lambda r: r.update(send_time=1e300), "send_time"),
    "more gaps than tokens": (lambda r: r.update(itl=[0.0] * r["output_len"]), "itl"),
}


@pytest.mark.parametrize("case", sorted(REQUEST_CASES))
def test_class9_impossible_request_timings_are_refused(measured, case):
    from traces.measured_run import load_measured

    change, field = REQUEST_CASES[case]
    lines = [json.loads(x) for x in (measured / "requests.jsonl").read_text().splitlines()]
    change(lines[0])
    (measured / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(ValueError, match=field) as e:
        load_measured(measured)
    assert "requests.jsonl" in str(e.value)
