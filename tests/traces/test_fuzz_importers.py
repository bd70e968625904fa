"""Seeded fuzzing of every importer (SpecDecode-Bench, MineDraft, vLLM metrics) and of the readers under them
(issue 17, class 2, 3 and 5).

Built-invalid inputs (values of the wrong type or out of range, token ids past 32 bits, accepted > drafted,
step times of 1e300 s, deep nesting, NaN) must be refused with a TraceFormatError naming the file; byte-level
blind mutations of valid files must be refused the same way or accepted, and an accepted import must hold
finite, in-range numbers. FIFOs, devices, folders and links out of a bundle are refused before any read, so
nothing blocks, streams without end or echoes another file. Cases are bounded by CPU time.
"""
from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest

from tests.fuzz_support import FuzzTally
from traces.bundle import load_bundle
from traces.errors import TraceFormatError
from traces.importers.minedraft import MAX_STEP_S, load_minedraft_steps
from traces.importers.specbench import import_specbench
from traces.importers.vllm_metrics import load_vllm_metrics
from traces.parsing import iter_jsonl, load_yaml_file, read_text

SEED = 20261218
PROM = (
    'vllm:spec_decode_num_drafts_total{engine="0"} 100.0\n'
    'vllm:spec_decode_num_draft_tokens_total{engine="0"} 300.0\n'
    'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 150.0\n'
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 80.0\n'
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 45.0\n'
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 25.0\n'
)
METRICS_JSON = [{"name": "vllm:spec_decode_num_drafts", "value": 100},
                {"name": "vllm:spec_decode_num_draft_tokens", "value": 300},
                {"name": "vllm:spec_decode_num_accepted_tokens", "value": 150},
                {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "values": [80, 45, 25]}]


def _specbench_line(rid="a", **over):
    doc = {"id": rid, "prompt_token_ids": [1, 2, 3], "generated_token_ids": [5, 6, 7, 8],
           "acc_eagle": {"acc_len": [2, 1, 3, 1]}, "acc_ngram": {"acc_len": [1, 1, 4, 1]}}
    doc.update(over)
    return doc


def _step(**over):
    doc = {"type": "Step", "is_prompt_run": False, "batched_token_num": 8, "context_token_num": 100,
           "batched_requests": ["r0", "r1"], "proposed_len": 3, "verify_len": 4, "accepted_num": 2,
           "generated_num": 3, "measured_draft_time": 0.002, "measured_target_time": 0.01,
           "measured_overhead_time": 0.0005}
    doc.update(over)
    return doc


def _names_file(path: Path):
    return lambda e: None if str(path) in str(e) else f"message does not name {path}"


def _finite_stats(stats) -> None:
    d = stats.to_dict()
    json.dumps(d, allow_nan=False)  # no NaN or infinity reaches --json
    assert d["acceptance_rate"] is None or 0 <= d["acceptance_rate"] <= 1, d
    assert all(r is None or 0 <= r <= 1 for r in d["per_pos_rate"] + d["conditional_rate"]), d


def test_fuzz_importers_built_invalid(tmp_path):
    tally = FuzzTally("importers, built-invalid inputs")
    spec_bad = [
        _specbench_line(prompt_token_ids=[1, 2**31]), _specbench_line(generated_token_ids=[2**40, 6, 7, 8]),
        _specbench_line(prompt_token_ids=[1, -1]), _specbench_line(prompt_token_ids=[1, 1.0]),
        _specbench_line(prompt_token_ids=[1, True]), _specbench_line(acc_eagle={"acc_len": [0, 1, 1, 1]}),
        _specbench_line(acc_eagle={"acc_len": [2**31, 1, 1, 1]}), _specbench_line(acc_eagle={"acc_len": "x"}),
        _specbench_line(acc_eagle={"acc_len": [1, 1, 1, 1], "x": 1}), _specbench_line(id=""),
        _specbench_line(id=["x"]), _specbench_line(prompt_token_ids=[]), {**_specbench_line(), "extra" * 50: 1},
    ]
    for i, doc in enumerate(spec_bad):
        p = tmp_path / f"spec{i}.jsonl"
        p.write_text(json.dumps(doc) + "\n")
        tally.run(f"specbench {i}", lambda p=p: import_specbench(p), clean=(TraceFormatError,), must_reject=True,
                  check_message=_names_file(p))
    p = tmp_path / "spec-dup.jsonl"
    p.write_text(json.dumps(_specbench_line()) + "\n" + json.dumps(_specbench_line()) + "\n")
    tally.run("specbench duplicate id", lambda: import_specbench(p), clean=(TraceFormatError,), must_reject=True)
    mine_bad = [_step(measured_target_time=1e300), _step(measured_draft_time=MAX_STEP_S * 2),
                _step(measured_target_time=-1), _step(measured_target_time="1"), _step(batched_token_num=2**60),
                _step(batched_token_num=1.5), _step(context_token_num=None), _step(batched_requests="r0"),
                _step(accepted_num=-2), _step(measured_overhead_time=True)]
    for i, rec in enumerate(mine_bad):
        p = tmp_path / f"mine{i}.jsonl"
        p.write_text(json.dumps({"traces": [rec]}) + "\n")
        tally.run(f"minedraft {i}", lambda p=p: load_minedraft_steps(p), clean=(TraceFormatError,),
                  must_reject=True, check_message=_names_file(p))
    p = tmp_path / "mine-ms.jsonl"
    p.write_text(json.dumps({"traces": [_step(measured_target_time=5e6)]}) + "\n")
    tally.run("minedraft 5e6 ms", lambda: load_minedraft_steps(p, "ms"), clean=(TraceFormatError,), must_reject=True)
    vllm_bad = {
        "accepted > drafted": PROM.replace("150.0", "1000.0"),
        "per-pos rises": PROM.replace("} 45.0", "} 90.0"),
        "per-pos above drafts": PROM.replace("} 80.0", "} 120.0").replace("} 45.0", "} 110.0"),
        "position huge": PROM.replace('position="2"', 'position="' + "9" * 30 + '"'),
        "position text": PROM.replace('position="2"', 'position="x"'),
        "negative": PROM.replace("100.0", "-1"),
        "inf": PROM.replace("100.0", "+Inf"),
        "nan": PROM.replace("100.0", "NaN"),
        "no counters": "vllm:num_requests_running 1\n",
        "deep json": "[" * 100_000 + "]" * 100_000,
        "json NaN": json.dumps(METRICS_JSON)[:-1] + ', {"name": "vllm:spec_decode_num_drafts", "value": NaN}]',
        "json labels list": json.dumps([{**METRICS_JSON[0], "labels": [1]}, *METRICS_JSON[1:]]),
        "json labels nested": json.dumps([{**METRICS_JSON[0], "labels": {"a": {"b": 1}}}, *METRICS_JSON[1:]]),
        "json value text": json.dumps([{**METRICS_JSON[0], "value": "100"}, *METRICS_JSON[1:]]),
        "json values text": json.dumps([*METRICS_JSON[:3], {**METRICS_JSON[3], "values": ["80"]}]),
        "json values huge": json.dumps([*METRICS_JSON[:3], {**METRICS_JSON[3], "values": [0] * 5000}]),
        "json duplicate key": '[{"name": "a", "name": "b", "value": 1}]',
        "json not a list": json.dumps({"a": 1}),
    }
    for label, text in vllm_bad.items():
        p = tmp_path / f"vllm-{len(label)}-{abs(hash(label)) % 10**6}.txt"
        p.write_text(text)
        tally.run(f"vllm-metrics {label}", lambda p=p: load_vllm_metrics(p), clean=(TraceFormatError,),
                  must_reject=True, cpu_s=5, check_message=_names_file(p))
    tally.assert_clean(min_cases=40)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    roll = rng.random()
    if roll < 0.4:
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(len(out))] = rng.choice(b'0123456789-.eE"{}[],:x \n\xff')
    elif roll < 0.7:
        out = out[: rng.randrange(len(out))]
    else:
        i = rng.randrange(len(out))
        out[i:i] = rng.choice([b"9" * 40, b"1e999", b"NaN", b"[[[[", b'"\\ud800"', b"\x00", b"-"])
    return bytes(out)


def test_fuzz_importers_blind_bytes(tmp_path):
    rng = random.Random(SEED)
    tally = FuzzTally("importers, blind byte mutations")
    spec = "".join(json.dumps(_specbench_line(f"r{i}")) + "\n" for i in range(3)).encode()
    mine = (json.dumps({"traces": [_step(), _step(batched_requests=["a"], batched_token_num=4)]}) + "\n").encode()
    sources = [("specbench", spec, import_specbench, lambda r: None),
               ("minedraft", mine, load_minedraft_steps,
                lambda steps: all(0 <= t <= MAX_STEP_S for s in steps for t in s.times.values() if t is not None)
                or (_ for _ in ()).throw(AssertionError("step time out of range"))),
               ("vllm-prom", PROM.encode(), load_vllm_metrics, _finite_stats),
               ("vllm-json", json.dumps(METRICS_JSON).encode(), load_vllm_metrics, _finite_stats)]
    for case in range(160):
        name, data, fn, check = sources[case % len(sources)]
        p = tmp_path / f"{name}-{case}.jsonl"
        p.write_bytes(_mutate(data, rng))
        tally.run(f"{name} case {case}", lambda p=p, fn=fn: fn(p), clean=(TraceFormatError,), must_reject=False,
                  cpu_s=5, check_accepted=check, check_message=_names_file(p))
    tally.assert_clean(min_cases=160)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_special_files_are_refused_before_any_read(tmp_path):
    """A FIFO with no writer would block forever, /dev/zero would stream without end: both refused up front."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    readers = {"read_text": read_text, "iter_jsonl": lambda p: list(iter_jsonl(p)), "load_yaml_file": load_yaml_file,
               "specbench": import_specbench, "minedraft": load_minedraft_steps, "vllm-metrics": load_vllm_metrics}
    tally = FuzzTally("special files")
    for target in [fifo, Path("/dev/zero"), tmp_path]:
        if not target.exists():
            continue
        for name, fn in readers.items():
            tally.run(f"{name}({target})", lambda fn=fn, t=target: fn(t), clean=(TraceFormatError,),
                      must_reject=True, cpu_s=5,
                      check_message=lambda e, t=target: None if str(t) in str(e) and
                      ("regular file" in str(e) or "folder" in str(e) or "not found" in str(e)) else "unclear")
    tally.assert_clean(min_cases=12)


def test_bundle_links_out_are_refused_and_never_echoed(tmp_path):
    """A bundle whose trace.yaml links to another file (shown with a system-like file full of keys) is refused
    without reading it; no line of that file appears in the error."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("".join(f"secret_key_{i}: value_{i}\n" for i in range(50)))
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "trace.yaml").symlink_to(secret)
    (bundle / "requests.jsonl").write_text("{}\n")
    with pytest.raises(TraceFormatError, match="symbolic link to a file outside the bundle") as e:
        load_bundle(bundle)
    assert "secret_key" not in str(e.value) and "value_" not in str(e.value)
    (bundle / "trace.yaml").unlink()
    (bundle / "trace.yaml").write_text(secret.read_text())  # the same keys as a real file: a short excerpt only
    with pytest.raises(TraceFormatError, match="unknown key") as e:
        load_bundle(bundle)
    assert str(e.value).count("secret_key") <= 5 and len(str(e.value)) < 600, str(e.value)
    (bundle / "trace.yaml").write_text((Path(__file__).parents[2] / "traces/data/default/trace.yaml").read_text())
    os.unlink(bundle / "requests.jsonl")
    (bundle / "requests.jsonl").symlink_to("/dev/zero")
    with pytest.raises(TraceFormatError, match="outside the bundle"):
        load_bundle(bundle)


def test_lone_surrogate_names_file_and_field(tmp_path):
    p = tmp_path / "spec.jsonl"
    p.write_text(json.dumps(_specbench_line(id="a\udc80")) + "\n")
    with pytest.raises(TraceFormatError, match=r"spec.jsonl, line 1, field 'id': text with a lone surrogate"):
        import_specbench(p)


def test_accepted_import_numbers_are_finite(tmp_path):
    p = tmp_path / "m.txt"
    p.write_text(PROM.replace("100.0", "0").replace("300.0", "0").replace("150.0", "0").replace("} 80.0", "} 0")
                 .replace("} 45.0", "} 0").replace("} 25.0", "} 0"))
    stats = load_vllm_metrics(p)
    _finite_stats(stats)
    assert stats.acceptance_rate is None and not any(isinstance(v, float) and math.isnan(v)
                                                     for v in stats.to_dict().values() if not isinstance(v, list))
