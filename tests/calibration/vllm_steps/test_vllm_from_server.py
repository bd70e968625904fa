"""`calibrate vllm --from-server` on a shipped served run: its step log plus a `vllm bench serve` JSON of its
three load levels (written from the clients' records by tests/traces/client_writers.py) finds exactly the
levels' engine requests, fits the same profiles validate's replay fit gets from those steps, profiles within
the fit's error of the calibration groups' (today's calibration), and writes a run.yaml that loads."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from calibration.vllm_steps.calibrate import parse_mode
from calibration.vllm_steps.fit import target_measurements
from calibration.vllm_steps.from_server import calibrate_from_server
from calibration.vllm_steps.validate_compare import fit_mode_profiles, load_mode
from experiments.config import load_config
from simulator.costs.latency import load_profile
from simulator.costs.step_model import phase_bias, phase_mape
from tests.traces.client_writers import ClientRecord, bench_document, counters_of

ROOT = Path(__file__).parents[3] / "experiments" / "validation"


def _records(level) -> list[ClientRecord]:
    return [ClientRecord(q["send_time"], len(q["prompt_token_ids"]), len(q["output_token_ids"]), q["chunk_times"],
                         q.get("spec_decode_metrics")) for q in level["requests"]]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("served")
    with tarfile.open(ROOT / "vllm-cpu-smollm2-quiet" / "raw-runs.tar.xz") as tar:
        tar.extractall(tmp, filter="data")
    return tmp


@pytest.mark.slow  # three structured fits per mode (~2 min on the 2-core machine)
@pytest.mark.parametrize("mode_text", ["ar", "ngram:4"])
def test_refit_from_the_served_log_matches_validate_and_calibration(served, tmp_path, mode_text):
    mode = parse_mode(mode_text)
    folder = served / mode.label
    data = load_mode(folder, mode)
    bench = tmp_path / "bench.jsonl"  # --append-result: one run object per line, one per load level
    lines = []
    for lv in data.levels:
        recs = _records(lv)
        lines.append(json.dumps(bench_document(recs, perf_offset=1.7e9, request_rate=lv["rate"],
                                               counters=counters_of(recs, mode.k) if mode.k else None)))
    bench.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cal"
    doc = calibrate_from_server(folder / "steps.jsonl", [bench], out, name="served", model_name="smollm2")
    fs = doc["from_server"]
    assert [c["requests"] for c in fs["clients"]] == [len(lv["requests"]) for lv in data.levels]
    n_cal = sum(len(g["requests"]) for g in data.result["calibration"])  # warm-up + calibration groups
    assert fs["left_out_engine_requests"] == n_cal

    # the same steps validate's replay profiles are fitted on: the same profile, overhead and drafter cost
    replay = fit_mode_profiles(data, data.load_log, "x", "smollm2")
    target = load_profile(out / "profiles" / f"served-{mode.label}.yaml")
    assert target.coefficients == pytest.approx(replay.target.coefficients, rel=1e-9, abs=1e-12)
    rep = doc["modes"][mode.label]
    assert rep["step_overhead_s"] == pytest.approx(replay.step_overhead_s)
    if mode.k:
        drafter = load_profile(out / "profiles" / f"served-{mode.label}-drafter.yaml")
        assert drafter.coefficients == pytest.approx(replay.drafter.profile.coefficients)

    # today's calibration (the calibration groups of the same engine) agrees within its own fit error: per phase,
    # the two profiles' total predicted time on the served steps differs by less than the calibration fit's MAPE
    cal = fit_mode_profiles(data, data.cal_log, "y", "smollm2")
    ms = target_measurements(data.load_log, mode.label)
    cal_mape, cal_bias, bias = phase_mape(cal.target, ms), phase_bias(cal.target, ms), phase_bias(target, ms)
    for ph in ("decode", "verify", "prefill"):
        if ph in cal_mape:
            assert abs(bias[ph] - cal_bias[ph]) <= cal_mape[ph], (ph, bias, cal_bias, cal_mape)

    cfg = load_config(str(out / "run.yaml"))
    rate = cfg.workload.arrival.rate
    sends = sorted(q["send_time"] for q in data.levels[0]["requests"])
    assert rate == pytest.approx((len(sends) - 1) / (sends[-1] - sends[0]), rel=1e-5)
    if mode.k:  # the bundle holds exactly the levels' requests, with the acceptance vLLM measured on them
        from traces.bundle import load_bundle

        bundle = load_bundle(out / "bundle")
        client_ids = {q["id"] for lv in data.levels for q in lv["requests"]}
        assert {r.id.rsplit("-", 1)[0] for r in bundle.requests} == client_ids
        drafted = sum(int((r.drafters[mode.label].proposal_len > 0).sum()) for r in bundle.requests)
        assert drafted == sum(q["spec_decode_metrics"]["num_spec_steps"] for lv in data.levels
                              for q in lv["requests"])


FIXTURE = Path(__file__).parent / "fixtures" / "vllm-validate" / "ngram-k3"


def _fixture_bench(tmp_path, change=None) -> Path:
    result = json.loads((FIXTURE / "result.json").read_text())
    docs = []
    for lv in result["levels"]:
        recs = _records(lv)
        if change:
            change(recs)
        docs.append(json.dumps(bench_document(recs, perf_offset=1.0e9, request_rate=lv["rate"])))
    p = tmp_path / "bench.jsonl"
    p.write_text("\n".join(docs) + "\n")
    return p


def test_from_server_through_the_cli(tmp_path, capsys):
    from experiments.cli import main

    bench = _fixture_bench(tmp_path)
    out = tmp_path / "cal"
    assert main(["calibrate", "vllm", "--from-server", str(FIXTURE / "steps.jsonl"), str(bench), "--out", str(out),
                 "--step-model", "linear", "--name", "fx"]) == 0
    text = capsys.readouterr().out
    assert "requests matched" in text and "left out" in text
    assert (out / "run.yaml").is_file() and (out / "profiles" / "fx-ngram-k3.yaml").is_file()
    assert load_config(str(out / "run.yaml")).runs[0].policy.model_dump() == {"name": "fixed", "drafter": "ngram-k3",
                                                                                "k": 3}


def test_from_server_refuses_a_client_run_it_did_not_serve(tmp_path, capsys):
    from experiments.cli import main

    def longer(recs):
        recs[0].output_len += 1000
    bench = _fixture_bench(tmp_path, longer)
    assert main(["calibrate", "vllm", "--from-server", str(FIXTURE / "steps.jsonl"), str(bench), "--out",
                 str(tmp_path / "cal"), "--step-model", "linear"]) != 0
    err = capsys.readouterr().err
    assert str(bench) in err and "consecutive engine requests" in err
    assert main(["calibrate", "vllm", "--from-server", str(FIXTURE / "steps.jsonl"), "--out",
                 str(tmp_path / "cal2")]) != 0
    assert "at least one client result" in capsys.readouterr().err


def test_a_smaller_fixed_length_run_does_not_take_part_of_a_larger_ones_window():
    """Fixed-length outputs: a run of 4 sent at once whose engine requests started over four steps (1 ms apart),
    then a run of 8 sent at once, all started in one step. Any 4 of the 8 fit the run of 4 better than its own
    window (0 against 1.5 ms), so matched in file order the run of 8 found no window; largest first, each gets
    its own."""
    import numpy as np

    from calibration.vllm_steps.from_server import EngineRequest, match_run, match_runs
    from traces.measured_run import MeasuredRequest, MeasuredRun

    engine = [EngineRequest(f"a{i}", 10.0 + 0.001 * i, 5, 16) for i in range(4)] + \
        [EngineRequest(f"b{i}", 20.0, 5, 16) for i in range(8)]

    def run(name, n):
        return MeasuredRun(name, [MeasuredRequest(f"{name}{i}", 0.0, 5, 16, 0.1, 1.0, np.zeros(15)) for i in range(n)],
                           {})
    runs = [("f.json", run("four", 4)), ("f.json", run("eight", 8))]
    first = match_run(runs[0][1], engine, set(), "f.json")
    assert min(first) >= 4  # in file order the run of 4 lands inside the run of 8's requests
    with pytest.raises(ValueError, match="no 8 consecutive engine requests"):
        match_run(runs[1][1], engine, set(first), "f.json")
    assert match_runs(runs, engine) == [[0, 1, 2, 3], list(range(4, 12))]


def test_the_shipped_calibration_groups_as_client_runs_each_find_their_own_requests(served):
    """The quiet n-gram run's six calibration groups (96 tokens each: lengths tell nothing apart) as all-at-once
    and staggered bench runs, staggered ones first, then its three load levels: every run is matched to exactly
    the engine requests of its own group (their ids carry the group's name). A staggered run of 8 once matched a
    window straddling into the next group (median gap 0.34 s against its own 0.40 s; mean gaps tell them apart)."""
    from calibration.vllm_steps.from_server import engine_requests, match_runs
    from calibration.vllm_steps.records import load_steps
    from traces.importers.vllm_bench import import_vllm_bench

    folder = served / "ngram-k4"
    result = json.loads((folder / "result.json").read_text())
    groups = sorted((g for g in result["calibration"] if g["name"] != "warmup"),
                    key=lambda g: not g["name"].startswith("stagger"))
    named = [(g["name"], g["requests"]) for g in groups] + [(f"L{i}", lv["requests"])
                                                           for i, lv in enumerate(result["levels"])]
    runs = []
    for name, reqs in named:
        p = served / f"{name}.json"
        p.write_text(json.dumps(bench_document(_records({"requests": reqs}), perf_offset=1.7e9)))
        runs.append((str(p), import_vllm_bench(p)[0]))
    engine = engine_requests(load_steps(folder / "steps.jsonl"))
    for (name, reqs), idx in zip(named, match_runs(runs, engine)):
        assert {engine[i].id.rsplit("-", 2)[0] if name[0] != "L" else engine[i].id.split("-")[0] for i in idx} == \
            {name}, name


def test_from_server_reads_a_guidellm_report(tmp_path):
    """The same served levels as a GuideLLM report (epoch send times): the same requests matched, the same fit."""
    from tests.traces.client_writers import guidellm_report

    result = json.loads((FIXTURE / "result.json").read_text())
    p = tmp_path / "g.json"
    p.write_text(json.dumps(guidellm_report([({"type_": "poisson", "rate": lv["rate"]}, _records(lv))
                                             for lv in result["levels"]])))
    a = calibrate_from_server(FIXTURE / "steps.jsonl", [p], tmp_path / "g", name="fx", step_model="linear")
    b = calibrate_from_server(FIXTURE / "steps.jsonl", [_fixture_bench(tmp_path)], tmp_path / "b", name="fx",
                              step_model="linear")
    assert [c["requests"] for c in a["from_server"]["clients"]] == [len(lv["requests"]) for lv in result["levels"]]
    assert a["modes"]["ngram-k3"]["target"]["coefficients"] == b["modes"]["ngram-k3"]["target"]["coefficients"]


def test_from_server_steps_record_their_client_run_for_compare_drift(tmp_path):
    """Each kept step names the client run (load level) it served, the same as the level of its engine requests
    in the fixture's own ids (L<i>-...); calibration.json lists each run's group; `compare --drift` draws from the
    three levels."""
    from experiments.cli.compare import compare
    from traces.importers.vllm_bench import import_vllm_bench
    from traces.measured_run import save_measured

    bench = _fixture_bench(tmp_path)
    doc = calibrate_from_server(FIXTURE / "steps.jsonl", [bench], tmp_path / "cal", name="fx", step_model="linear")
    labels = [c["group"] for c in doc["from_server"]["clients"]]
    assert len(set(labels)) == 3 and doc["from_server"]["steps_in_several_groups"] == 0
    lines = [json.loads(x) for x in (FIXTURE / "steps.jsonl").read_text().splitlines()[1:]]
    want = []
    for x in lines:
        levels = {r["id"].split("-")[0] for r in x["requests"] if r["id"].startswith("L")}
        if levels:
            want.append(labels[int(levels.pop()[1:])] if len(levels) == 1 else None)
    prof = load_profile(tmp_path / "cal" / "profiles" / "fx-ngram-k3.yaml")
    assert [m.extra["group"] for m in prof.measurements] == want
    run = import_vllm_bench(bench)[0]
    save_measured(run, tmp_path / "m")
    rep = compare(str(tmp_path / "m"), str(tmp_path / "cal" / "run.yaml"), [], repeats=3, drift=True)
    cells = {}  # GROUP:SEQUENCES -> the steps with that group and batch (cells of one step are left out)
    for m in prof.measurements:
        cells[f"{m.extra['group']}:{m.num_seqs}"] = cells.get(f"{m.extra['group']}:{m.num_seqs}", 0) + 1
    d = rep.info["speed_drift"]["ngram-k3"]
    assert [(g["name"], g["steps"]) for g in d["groups"]] == [(c, n) for c, n in cells.items() if n >= 2]
    assert d["lone_steps"] == sum(n for n in cells.values() if n == 1)
    assert list(dict.fromkeys(g["name"].rsplit(":", 1)[0] for g in d["groups"])) == labels


def test_compare_bootstrap_widens_the_interval_around_the_same_prediction(tmp_path):
    """A --from-server calibration (its profiles keep their steps) compared with the client's own first level:
    --bootstrap keeps the point prediction and prices the other repeats with refit profiles; a table profile
    (nothing to refit) is refused naming the run."""
    from experiments.cli.compare import compare
    from traces.importers.vllm_bench import import_vllm_bench
    from traces.measured_run import save_measured

    bench = _fixture_bench(tmp_path)
    calibrate_from_server(FIXTURE / "steps.jsonl", [bench], tmp_path / "cal", name="fx", step_model="linear")
    run = import_vllm_bench(bench)[0]
    save_measured(run, tmp_path / "m")
    cfg = str(tmp_path / "cal" / "run.yaml")
    plain = compare(str(tmp_path / "m"), cfg, [], repeats=3)
    boot = compare(str(tmp_path / "m"), cfg, [], repeats=3, bootstrap=True)
    assert [r["predicted"] for r in plain.rows] == [r["predicted"] for r in boot.rows]
    assert any(a["interval"] != b["interval"] for a, b in zip(plain.rows, boot.rows))
    table = "smollm2-135m-instruct-cpu-table"  # a measured table: nothing to refit
    with pytest.raises(ValueError, match="--bootstrap: run ngram-k3: .*cannot resample a TableProfile"):
        compare(str(tmp_path / "m"), cfg, [f"server.target_profile={table}", f"runs.0.server.target_profile={table}"],
                repeats=2, bootstrap=True)
