"""Acceptance levels: the three agree on tokens per step for i.i.d. traces; sources load, refuse bad files, warn."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.traces.synth_helpers import bundle_from
from traces.acceptance_levels import (AcceptanceSource, AcceptanceWarning, iid_rate, load_source, plausibility,
                                      proposal_rate_from_counts,
                                      resolve_levels, save_source, source_from_bundle, source_from_dict,
                                      source_from_per_request, with_level)
from traces.errors import TraceFormatError
from traces.expected_tokens import expected_tokens
from traces.synthetic.common import drafter_traces, tokens_per_step
from traces.synthetic.iid import IidAcceptance


@given(st.floats(0.0, 0.95), st.integers(1, 8))
def test_iid_rate_inverts_expected_tokens(a, k):
    assert iid_rate(expected_tokens(a, k), k) == pytest.approx(a, abs=1e-9)


@settings(max_examples=5, deadline=None)
@given(st.floats(0.2, 0.85), st.integers(0, 2**32 - 1))
def test_levels_agree_on_tokens_per_step_for_iid(a, seed):
    """Level 3 (the traces), 2 (per-position counters) and 1 (mean length) replayed: each level's measured tokens
    per step at k <= the measured k match the i.i.d. expectation (4-sigma sampling bound from the step count)."""
    k_meas = 5
    bundle = bundle_from(IidAcceptance(rate=a), n=150, length=200, seed=seed % 1000)
    src = source_from_bundle(bundle, "d", k_meas)
    assert src.mean_length == pytest.approx(expected_tokens(a, k_meas), abs=0.08)
    for level in ("mean_length", "per_position"):
        b = with_level(bundle, "d", src, level, seed)
        t, _ = tokens_per_step(drafter_traces(b, "d"), k_meas)
        t3, _ = tokens_per_step(drafter_traces(bundle, "d"), k_meas)
        for k in range(1, k_meas + 1):
            sd = np.sqrt(k * (k + 1) / 4) / np.sqrt(150 * 200 / expected_tokens(a, k))  # generous bound
            assert abs(t[k] - expected_tokens(a, k)) < 4 * sd + 0.02, (level, k)
            assert abs(t3[k] - expected_tokens(a, k)) < 4 * sd + 0.02, (level, k)


def test_level_one_keeps_the_mean_at_its_k_exactly_in_expectation():
    src = AcceptanceSource(measured_k=3, mean_length=2.5)
    bundle = bundle_from(IidAcceptance(rate=0.5), n=400, length=300)
    b = with_level(bundle, "d", src, "mean_length", seed=1)
    t, _ = tokens_per_step(drafter_traces(b, "d"), 3)
    assert t[3] == pytest.approx(2.5, abs=0.03)
    assert max(int(r.drafters["d"].acc_len.max()) for r in b.requests) <= 4  # nothing beyond k + 1
    assert [r.output_len for r in b.requests] == [r.output_len for r in bundle.requests]


def test_source_round_trip_and_bad_files(tmp_path):
    src = AcceptanceSource(measured_k=2, mean_length=2.1, per_position=[0.7, 0.4], target="m", dataset="d")
    save_source(src, tmp_path / "a.yaml")
    back = load_source(tmp_path / "a.yaml")
    assert back.mean_length == 2.1 and back.per_position == [0.7, 0.4]
    with pytest.raises(TraceFormatError, match="per_position.*non-increasing"):
        source_from_dict({"measured_k": 2, "per_position": [0.4, 0.7]}, "x.yaml")
    with pytest.raises(TraceFormatError, match="mean_length"):
        source_from_dict({"measured_k": 2, "mean_length": 3.5}, "x.yaml")
    with pytest.raises(TraceFormatError, match="measured_k"):
        source_from_dict({"mean_length": 1.5}, "x.yaml")


def test_warnings_for_implausible_or_borrowed_acceptance():
    src = AcceptanceSource(measured_k=3, mean_length=1.05, target="llama-8b", dataset="gsm8k")
    msgs = plausibility(src, "eagle", "qwen-32b", "sharegpt")
    assert any("near 1" in m for m in msgs) and any("target" in m for m in msgs) and any("dataset" in m for m in msgs)
    assert plausibility(AcceptanceSource(measured_k=3, mean_length=2.4), "eagle", None, None) == []
    bundle = bundle_from(IidAcceptance(rate=0.5), n=5, length=20)
    with pytest.warns(AcceptanceWarning, match="near 1"):
        resolve_levels(bundle, {"d": {"mean_length": 1.02, "k": 3}}, seed=0)


def test_per_request_metrics_file(tmp_path):
    p = tmp_path / "resp.jsonl"
    p.write_text('{"id": "a", "metrics": {"speculative_decoding": {"mean_acceptance_length": 1.2325581395348837, '
                 '"draft_acceptance_rate": 0.0775, "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43, '
                 '"num_accepted_draft_tokens": 10, "num_draft_tokens": 129, "num_spec_tokens": 3}}}\n'
                 '{"acceptance_histogram": [1, 1, 1, 1], "num_spec_steps": 4, "num_spec_tokens": 3}\n')
    src = source_from_per_request(p)
    assert src.measured_k == 3 and len(src.requests) == 2
    assert src.mean_length == pytest.approx(1 + (1 + 0 + 9 + 1 + 2 + 3) / 47)
    p.write_text('{"acceptance_histogram": [1, 1], "num_spec_steps": 3, "num_spec_tokens": 1}\n')
    with pytest.raises(TraceFormatError, match="line 1.*acceptance_histogram"):
        source_from_per_request(p)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = with_level(bundle_from(IidAcceptance(rate=0.5), n=3, length=50), "d", src, "per_request", seed=0)
    assert all(r.drafters["d"].acc_len.max() <= 4 for r in b.requests)


def test_a_config_can_use_a_level_as_a_drafters_acceptance(tmp_path):
    """traces: {acceptance: {base, drafters}} in an experiment: the run's measured acceptance length is the level's
    mean at its k (less the end-of-output cut), and the other drafter keeps its traces."""
    from experiments.run import run_experiment

    over = ["workload.num_requests=80", "traces={acceptance: {base: 'builtin:default', drafters: {eagle3: "
            "{mean_length: 2.6, k: 3}}}}"]
    res = run_experiment("default", overrides=over)
    base = run_experiment("default", overrides=over[:1])
    assert 2.45 < res.summary["eagle3-k3"]["pooled_acceptance_length"] <= 2.6
    assert res.summary["ngram-k3"]["pooled_acceptance_length"] == base.summary["ngram-k3"]["pooled_acceptance_length"]
    with pytest.raises(ValueError, match="traces"):
        run_experiment("default", overrides=["traces={acceptance: {drafters: {eagle3: {mean_length: 9, k: 3}}}}"])


def test_a_model_under_its_catalog_and_hub_names_is_not_borrowed():
    src = AcceptanceSource(measured_k=3, mean_length=2.4, target="llama3.1-8b")
    assert plausibility(src, "eagle", "meta-llama/Llama-3.1-8B-Instruct", None) == []
    assert plausibility(src, "eagle", "qwen3-8b", None)


# ------------------------------------------------------------------ proposal rate (steps that drafted nothing)

def test_proposal_rate_from_counts_hand_worked():
    """Two requests walked by hand (P = proposed and accepted a, N = proposed nothing, 1 token):
    A, 10 tokens: prefill 1, P(a=3) 4, N 1, P(a=0) 1, N 1, P(a=1) 2 -> 5 decode steps, 3 drafts, 4 accepted;
    B, 6 tokens: prefill 1, N 1, N 1, P(a=2) 3 -> 3 decode steps, 1 draft, 2 accepted.
    Totals: 16 tokens, 2 requests, 4 drafts, 6 accepted: 8 decode steps, half of them proposed."""
    p = proposal_rate_from_counts(16, 2, 4, 6, k=4)
    assert (p.decode_steps, p.rate) == (8, 0.5)
    assert p.rate_low == pytest.approx(4 / (8 + 2 * 4))  # up to k accepted per request trimmed past the end
    with pytest.raises(ValueError, match="cover requests other than these"):
        proposal_rate_from_counts(16, 2, 40, 6, k=4)


def test_source_from_bundle_counts_steps_that_proposed_nothing():
    """One request of 8 tokens at k = 2, walked by hand from position 1: p1 proposes 2, acc_len 3 -> accepts 2,
    emits p1..p3; p4 and p5 propose nothing -> 1 token each; p6 proposes 2, acc_len 1 -> accepts 0; p7 proposes
    2, acc_len 2 -> accepts 1 (cut at the end). 5 steps, 3 proposed, accepted 2, 0, 1: mean length
    1 + 3 / 3 = 2, per position [2/3, 1/3], proposal rate 3/5, tokens per decode step 1 + 3/5 * 1."""
    from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle

    t = DrafterTrace(acc_len=np.array([1, 3, 1, 1, 1, 1, 1, 2], dtype=np.int32),
                     proposal_len=np.array([0, 2, 0, 0, 0, 0, 2, 2], dtype=np.int32))
    bundle = TraceBundle(BundleMeta(target="m", drafters={"d": DrafterSpec("d", "ngram", "c")}, dataset="x"),
                         [RequestTrace("r", 4, 8, {"d": t})])
    src = source_from_bundle(bundle, "d", 2)
    assert src.proposal_rate == pytest.approx(3 / 5)
    assert src.mean_length == pytest.approx(2.0) and src.per_position == pytest.approx([2 / 3, 1 / 3])
    assert src.tokens_per_decode_step() == pytest.approx(1.6)


@settings(max_examples=4, deadline=None)
@given(st.floats(0.1, 0.9), st.floats(0.3, 0.8), st.integers(0, 2**32 - 1))
def test_replayed_counters_model_steps_that_propose_nothing(q, a, seed):
    """A level-1 source with proposal rate q replayed: the walk's share of proposing steps is q and its tokens per
    decode step is 1 + q (mean_length - 1), within 4 sigma of the step count (traces.walk counts them)."""
    from traces.walk import walk

    k = 4
    src = AcceptanceSource(measured_k=k, mean_length=expected_tokens(a, k), proposal_rate=q)
    b = with_level(bundle_from(IidAcceptance(rate=a), n=60, length=400, seed=seed % 997), "d", src, "mean_length",
                   seed)
    ws = [walk(r.drafters["d"], k) for r in b.requests]
    proposed = np.concatenate([w.proposed for w in ws]) > 0
    verified = np.concatenate([np.where(w.proposed > 0, 1 + w.accepted, 1) for w in ws])
    n = proposed.size
    assert abs(proposed.mean() - q) < 4 * np.sqrt(q * (1 - q) / n)
    assert abs(verified.mean() - src.tokens_per_decode_step()) < 4 * np.sqrt((k + 1) ** 2 / 4 / n)


def test_proposal_rate_round_trips_and_bad_value_names_the_field(tmp_path):
    save_source(AcceptanceSource(measured_k=2, mean_length=2.1, proposal_rate=0.25), tmp_path / "a.yaml")
    assert load_source(tmp_path / "a.yaml").proposal_rate == 0.25
    with pytest.raises(TraceFormatError, match="proposal_rate"):
        source_from_dict({"measured_k": 2, "mean_length": 2.0, "proposal_rate": 1.5}, "x.yaml")


def test_per_request_lines_with_output_counts_carry_the_proposal_rate(tmp_path):
    """Two responses: 20 tokens with histogram [2, 1, 0, 1] (4 proposing steps, 1 + 3 = 4 accepted) and 12 tokens
    with [1, 0, 1, 0] (2 steps, 2 accepted): decode steps 32 - 2 - 6 = 24, of which 6 proposed."""
    p = tmp_path / "resp.jsonl"
    p.write_text('{"id": "a", "usage": {"completion_tokens": 20}, "metrics": {"speculative_decoding": '
                 '{"acceptance_histogram": [2, 1, 0, 1], "num_spec_steps": 4, "num_spec_tokens": 3}}}\n'
                 '{"id": "b", "usage": {"completion_tokens": 12}, "metrics": {"speculative_decoding": '
                 '{"acceptance_histogram": [1, 0, 1, 0], "num_spec_steps": 2, "num_spec_tokens": 3}}}\n')
    src = source_from_per_request(p)
    assert src.proposal_rate == pytest.approx(6 / 24) and src.source["proposal_rate"]["decode_steps"] == 24


def test_inline_proposal_rate_in_a_config_reaches_the_replay():
    """`{mean_length, k, proposal_rate}` inline: the replayed drafter proposes at about that share of positions and
    nothing elsewhere: k drafts when capped at the measured k, any k (MAX_DRAFT_TOKENS) when extrapolated past it."""
    from traces.limits import MAX_DRAFT_TOKENS

    bundle = bundle_from(IidAcceptance(rate=0.5), n=40, length=300)
    for extrapolate, full in (("none", 3), ("geometric", MAX_DRAFT_TOKENS)):
        b = resolve_levels(bundle, {"d": {"mean_length": 2.0, "k": 3, "proposal_rate": 0.3,
                                          "extrapolate": extrapolate}}, seed=0)
        prop = np.concatenate([r.drafters["d"].proposal_len for r in b.requests])
        assert set(np.unique(prop)) == {0, full}
        assert abs((prop > 0).mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / prop.size)
    with pytest.raises(TraceFormatError, match="proposal_rate"):
        resolve_levels(bundle, {"d": {"mean_length": 2.0, "k": 3, "proposal_rate": 0}}, seed=0)
