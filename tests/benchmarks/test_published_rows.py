"""The published-GPU rows kept as data (benchmarks/data/published_gpu_rows.yaml) and their replay
(benchmarks/published_rows.py): the shipped figures against the source's numbers worked by hand, the file's
validation, the replay's acceptance against Leviathan's closed form, and the AR-matched fit recovering a known
bandwidth."""
from __future__ import annotations

import pytest

from benchmarks.bench_published_gpu import Row, table
from benchmarks.published_rows import (ROWS_FILE, PublishedRow, ar_matched_bandwidth_util, ar_throughput,
                                       load_rows, predicted_speedup, row_config)
from traces.errors import TraceFormatError
from traces.expected_tokens import expected_tokens
from traces.synthetic.spec import parse_synth_spec


def test_shipped_rows_carry_the_sources_throughputs():
    rows = load_rows()
    assert len(rows) >= 4
    by_claim = {r.claim: r for r in rows}
    # hand-worked from the data file (tomasruizt/vllm-scripts@d94d714): draft_model k7 at concurrency 1 ran
    # 80.82 tok/s against 22.83 without speculation; EAGLE-3 k3 at concurrency 32 ran 946.92 against 517.99
    dm = by_claim["draft_model speedup, Llama-3.3-70B + Llama-3.2-1B, k = 7, InstructCoder, concurrency 1"]
    assert dm.speedup == pytest.approx(3.540, abs=5e-4)
    e3 = by_claim["EAGLE-3 speedup, Llama-3.3-70B, k = 3, InstructCoder, concurrency 32"]
    assert e3.speedup == pytest.approx(1.828, abs=5e-4)
    for r in rows:
        assert r.source and r.drafter.k >= 1 and 1 <= r.acceptance_length <= r.drafter.k + 1


def test_replay_acceptance_matches_the_stated_length_in_closed_form():
    for r in load_rows():
        cfg = row_config(r, {"kind": "roofline", "model": r.model, "gpu": r.gpu, "tp": r.tp})
        spec = parse_synth_spec(cfg["traces"]["synthetic"], "test")
        acc = spec.categories["all"].acceptance["d"]
        assert expected_tokens(acc.rate, r.drafter.k) == pytest.approx(r.acceptance_length, rel=1e-9)
        assert cfg["workload"]["arrival"] == {"kind": "closed_loop", "clients": r.concurrency}
        assert [run["mode"] for run in cfg["runs"]] == ["ar", "sd"]


def _write(tmp_path, text):
    p = tmp_path / "rows.yaml"
    p.write_text(text, encoding="utf-8")
    return p


ROW = """rows:
  - claim: c
    source: s
    model: {model}
    gpu: h100-80gb
    tp: 1
    dataset: d
    concurrency: 1
    requests: 4
    prompt_tokens: 8
    output_tokens: 24
    drafter: {{method: draft_model, model: llama3.2-1b, k: {k}}}
    acceptance_length: {al}
    throughput_ar_tok_s: 10.0
    throughput_sd_tok_s: 20.0
"""


@pytest.mark.parametrize("model, k, al, field, words", [
    ("no-such-model", 3, 2.0, "rows[0].model", "not in the catalog"),
    ("llama3.1-8b", 3, 4.5, "rows[0].acceptance_length", "exceeds k + 1"),
])
def test_bad_rows_name_the_file_and_the_field(tmp_path, model, k, al, field, words):
    p = _write(tmp_path, ROW.format(model=model, k=k, al=al))
    with pytest.raises(TraceFormatError) as e:
        load_rows(p)
    assert str(p) in str(e.value) and field in str(e.value) and words in str(e.value)


def test_unknown_key_is_refused(tmp_path):
    p = _write(tmp_path, ROW.format(model="llama3.1-8b", k=3, al=2.0) + "    speedup: 2.0\n")
    with pytest.raises(TraceFormatError) as e:
        load_rows(p)
    assert "speedup" in str(e.value) and str(p) in str(e.value)


def _tiny(**kw) -> PublishedRow:
    doc = dict(claim="tiny", source="test", model="llama3.1-8b", gpu="h100-80gb", tp=1, dataset="d", concurrency=2,
               requests=6, prompt_tokens=16, output_tokens=40,
               drafter={"method": "draft_model", "model": "llama3.2-1b", "k": 3}, acceptance_length=3.4,
               throughput_ar_tok_s=100.0, throughput_sd_tok_s=200.0)
    doc.update(kw)
    return PublishedRow.model_validate(doc)


def test_a_cheap_accurate_drafter_speeds_up_and_a_useless_one_slows_down():
    target = {"kind": "roofline", "model": "llama3.1-8b", "gpu": "h100-80gb", "tp": 1}
    assert predicted_speedup(_tiny(), target) > 1.5
    assert predicted_speedup(_tiny(acceptance_length=1.0), target) < 1.0


def test_ar_matched_fit_recovers_a_known_bandwidth_util():
    row = _tiny()
    truth = ar_throughput(row, {"kind": "roofline", "model": "llama3.1-8b", "gpu": "h100-80gb", "tp": 1,
                                "bandwidth_util": 0.5})
    u = ar_matched_bandwidth_util(_tiny(throughput_ar_tok_s=truth), rel_tol=1e-3)
    assert u == pytest.approx(0.5, rel=0.01)


def test_table_has_the_aiconfigurator_column():
    r = Row("x", "src (here)", 2.0, "x", predicted={"roofline": 2.2}, aiconfigurator="none: MTP only")
    md = table([r], markdown=True)
    assert "| AIConfigurator |" in md and "none: MTP only" in md and "+10%" in md
    assert "AIConfigurator: none: MTP only" in table([r])


def test_rows_file_is_the_shipped_one():
    assert ROWS_FILE.is_file() and ROWS_FILE.parent.name == "data"


def test_aiconfigurator_prices_eagle_rows_only_and_never_beyond_the_acceptance_length():
    from benchmarks.published_rows import aiconfigurator_speedup

    s, how = aiconfigurator_speedup(_tiny())
    assert s is None and "draft_model" in how
    pytest.importorskip("aiconfigurator_core")
    for r in load_rows():
        if r.drafter.method == "eagle3":
            s, how = aiconfigurator_speedup(r)
            # speedup = AL x t(nextn 0) / t(nextn k), and k extra layers never make a step cheaper
            assert 1.0 < s <= r.acceptance_length and f"nextn = {r.drafter.k}" in how


@pytest.mark.parametrize("extra, words", [
    ({"stated_speedup": 2.0}, "not both"),
    ({"throughput_sd_tok_s": None}, "or neither"),
])
def test_a_row_gives_throughputs_or_a_stated_speedup(extra, words):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=words):
        _tiny(**extra)


def test_a_stated_speedup_row_has_no_ar_run_to_fit():
    row = _tiny(throughput_ar_tok_s=None, throughput_sd_tok_s=None, stated_speedup=1.65)
    assert row.speedup == 1.65
    with pytest.raises(ValueError, match="no AR throughput"):
        ar_matched_bandwidth_util(row)


def test_a_drafter_override_replaces_only_the_drafters_price():
    target = {"kind": "roofline", "model": "llama3.1-8b", "gpu": "h100-80gb", "tp": 1}
    own = {"kind": "constant", "seconds": 0.001, "host_s": 0.0005}
    cfg, base = row_config(_tiny(), target, drafter=own), row_config(_tiny(), target)
    assert cfg["drafters"] == {"d": own} and base["drafters"]["d"]["kind"] == "autoregressive"
    assert {k: v for k, v in cfg.items() if k != "drafters"} == {k: v for k, v in base.items() if k != "drafters"}


def test_ops_drafter_of_each_row_is_priced_from_the_tables(tmp_path):
    pytest.importorskip("aiconfigurator_core", reason="needs aiconfigurator-core's tables (optional extra)")
    from benchmarks.published_rows import ops_drafter_cost
    from calibration.op_drafter import PROPOSAL_HOST_S
    from simulator.costs.latency import load_profile

    for r in load_rows():
        cost = ops_drafter_cost(r, tmp_path)
        prof = load_profile(cost["profile"])
        assert cost["kind"] == "autoregressive" and cost["host_s"] == PROPOSAL_HOST_S
        assert prof.provenance.source == "measured-ops" and f"TP {r.drafter.tp or r.tp}" in prof.provenance.notes
        assert (r.drafter.model if r.drafter.method == "draft_model" else f"{r.drafter.method} head of") in \
            prof.provenance.notes
