"""`draftsim traces validate|stats|fit|synth` on small bundles in tmp folders."""
from __future__ import annotations

import json
import shlex

import pytest
import yaml

from experiments.cli import traces as cmd_traces
from tests.experiments.cli_helpers import run_cli
from traces.bundle import load_bundle
from traces.stats import bundle_stats
from traces.synthetic import load_synth_spec

SPEC = {
    "target": "toy", "num_requests": 30, "dataset": "toyset",
    "drafters": {"e": {"kind": "eagle", "cost_model": "c1"}, "n": {"kind": "ngram", "cost_model": "ngram"}},
    "categories": {
        "chat": {"weight": 1, "prompt": {"dist": "constant", "value": 12},
                 "output": {"dist": "uniform", "low": 20, "high": 60},
                 "acceptance": {"e": {"model": "iid", "rate": 0.7},
                                "n": {"model": "bursty", "rate_off": 0.02, "rate_on": 0.9, "stay_off": 0.9,
                                      "stay_on": 0.8, "max_proposal": 20, "miss_proposal_rate": 0.2}}},
        "code": {"weight": 1, "prompt": {"dist": "constant", "value": 30},
                 "output": {"dist": "constant", "value": 40},
                 "acceptance": {"e": {"model": "positional", "rates": [0.7, 0.6], "tail": 0.5},
                                "n": {"model": "iid", "rate": 0.5}}},
    },
}


@pytest.fixture()
def bundle_dir(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC), encoding="utf-8")
    out = tmp_path / "b"
    assert run_cli(cmd_traces, ["traces", "synth", "--spec", str(spec), "--out", str(out), "--seed", "4"]) == 0
    return out


def test_synth_records_its_command(bundle_dir, tmp_path):
    b = load_bundle(bundle_dir)
    assert len(b.requests) == 30
    argv = shlex.split(b.meta.source["command"])
    assert argv == ["draftsim", "traces", "synth", "--spec", str(tmp_path / "spec.yaml"), "--out", str(bundle_dir),
                    "--seed", "4"]


def test_synth_compress_and_num_requests(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC), encoding="utf-8")
    out = tmp_path / "gz"
    assert run_cli(cmd_traces, ["traces", "synth", "--spec", str(spec), "--out", str(out), "--num-requests", "7",
                                "--compress"]) == 0
    assert (out / "requests.jsonl.gz").is_file() and len(load_bundle(out).requests) == 7
    assert "--compress" in load_bundle(out).meta.source["command"]


def test_validate_ok(bundle_dir, capsys):
    assert run_cli(cmd_traces, ["traces", "validate", str(bundle_dir)]) == 0
    out = capsys.readouterr().out
    positions = sum(r.output_len for r in load_bundle(bundle_dir).requests)
    assert out.startswith("OK") and "30 requests" in out and f"{positions} output positions" in out
    assert "categories chat, code" in out


def test_validate_reports_the_precise_error(bundle_dir, capsys):
    lines = (bundle_dir / "requests.jsonl").read_text().splitlines()
    doc = json.loads(lines[2])
    doc["drafters"]["e"]["acc_len"][3] = 0
    lines[2] = json.dumps(doc)
    (bundle_dir / "requests.jsonl").write_text("\n".join(lines) + "\n")
    assert run_cli(cmd_traces, ["traces", "validate", str(bundle_dir)]) == 1
    err = capsys.readouterr().err
    assert "requests.jsonl, line 3, field 'drafters.e.acc_len'" in err and "position 3" in err


def test_stats_json_matches_the_library(bundle_dir, capsys):
    assert run_cli(cmd_traces, ["traces", "stats", str(bundle_dir), "--json", "--k", "3"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = bundle_stats(load_bundle(bundle_dir), k=3)
    e = got["overall"]["drafters"]["e"]
    assert e["tokens_per_step"]["5"] == pytest.approx(want.overall.drafters["e"].tokens_per_step[5])
    assert len(e["unconditional"]) == 3 and e["k"] == 3
    assert set(got["categories"]) == {"chat", "code"}
    assert got["overall"]["output_len"]["max"] == want.overall.output_len.max


def test_stats_json_is_strict(tmp_path, capsys):
    spec = dict(SPEC, categories={"c": dict(SPEC["categories"]["code"],
                                            acceptance={"e": {"model": "iid", "rate": 0.0},
                                                        "n": {"model": "iid", "rate": 0.0}})})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert run_cli(cmd_traces, ["traces", "synth", "--spec", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert run_cli(cmd_traces, ["traces", "stats", str(tmp_path / "b"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert got["overall"]["drafters"]["e"]["conditional"][1] is None  # nothing accepted at position 0


def test_traces_without_subcommand_prints_help(capsys):
    assert run_cli(cmd_traces, ["traces"]) == 2
    assert "validate" in capsys.readouterr().out


def test_stats_table(bundle_dir, capsys):
    assert run_cli(cmd_traces, ["traces", "stats", str(bundle_dir)]) == 0
    out = capsys.readouterr().out
    for text in ("mean tokens per step", "k=8", "uncapped", "pos 4", "category code", "output_len"):
        assert text in out


def test_stats_on_a_bad_bundle_exits_1(tmp_path, capsys):
    assert run_cli(cmd_traces, ["traces", "stats", str(tmp_path)]) == 1
    assert "trace.yaml" in capsys.readouterr().err


def test_fit_then_synth(bundle_dir, tmp_path):
    spec = tmp_path / "fitted.yaml"
    assert run_cli(cmd_traces, ["traces", "fit", f"mix={bundle_dir}", "--out", str(spec), "--model", "e=iid"]) == 0
    s = load_synth_spec(str(spec))
    assert list(s.categories) == ["mix"]
    assert s.categories["mix"].acceptance["e"].model == "iid"
    assert s.categories["mix"].acceptance["n"].model == "bursty"  # n-gram default
    # the code category's n-gram traces carry no proposal_len, so the pooled fit models none
    assert s.categories["mix"].acceptance["n"].max_proposal is None
    assert "draftsim traces fit" in s.description
    out = tmp_path / "again"
    assert run_cli(cmd_traces, ["traces", "synth", "--spec", str(spec), "--out", str(out)]) == 0
    assert len(load_bundle(out).requests) == 30


def test_fit_reads_specbench_jsonl(tmp_path):
    line = {"id": "1", "prompt_token_ids": [1, 2], "generated_token_ids": [3, 4, 5, 6],
            "acc_eagle": {"acc_len": [2, 1, 3, 1]}, "acc_ngram": {"acc_len": [1, 1, 2, 1]}}
    src = tmp_path / "combined_toy.jsonl"
    src.write_text("\n".join(json.dumps(dict(line, id=str(i))) for i in range(5)) + "\n")
    spec = tmp_path / "s.yaml"
    assert run_cli(cmd_traces, ["traces", "fit", str(src), "--out", str(spec)]) == 0
    assert list(load_synth_spec(str(spec)).categories) == ["toy"]


def test_fit_rejects_bad_model_option(bundle_dir, tmp_path):
    with pytest.raises(ValueError, match="NAME=VALUE"):
        run_cli(cmd_traces, ["traces", "fit", str(bundle_dir), "--out", str(tmp_path / "s.yaml"), "--model", "e"])


def test_registered_in_the_draftsim_cli(capsys):
    from experiments.cli import main
    from traces.default_bundle import default_bundle_path

    assert main(["traces", "validate", str(default_bundle_path())]) == 0
    assert capsys.readouterr().out.startswith("OK")
    assert main(["traces", "synth", "--spec", "/nonexistent.yaml", "--out", "/tmp/never"]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_validate_and_stats_take_builtin_names_as_configs_do(capsys):
    from traces.default_bundle import default_bundle_path

    for cmd in (["validate"], ["stats", "--json"]):
        assert run_cli(cmd_traces, ["traces", *cmd, str(default_bundle_path())]) == 0
        by_path = capsys.readouterr().out
        assert run_cli(cmd_traces, ["traces", *cmd, "builtin:default"]) == 0
        by_name = capsys.readouterr().out
        assert by_name.replace("builtin:default", str(default_bundle_path())) == by_path
    assert run_cli(cmd_traces, ["traces", "stats", "builtin:nope"]) == 1
    assert "no built-in trace bundle 'nope'; built-in: " in capsys.readouterr().err
