"""Acceptance measured through vLLM: the recorded fixture gives a bundle that matches vLLM's own
per-request metrics; the censoring rule and the replay rule agree on every verify step."""
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibration.vllm_steps.acceptance import (ClientRequest, build_bundle, check_against_vllm, join_ids,
                                               load_censoring, measure_acceptance, save_measured_bundle)
from calibration.vllm_steps.records import RequestStep, load_steps
from traces.acceptance import accepted_drafts, emitted_tokens
from traces.bundle import load_bundle
from traces.errors import TraceFormatError

FIXTURE = Path(__file__).parent / "fixtures" / "vllm-ngram-k3"


def _clients():
    res = json.loads((FIXTURE / "result.json").read_text())
    return [ClientRequest(str(q["id"]), q["prompt_token_ids"], q["output_token_ids"], q["spec_decode_metrics"])
            for g in res["groups"] for q in g["requests"]]


def _build(clients=None):
    return build_bundle(load_steps(FIXTURE / "steps.jsonl"), clients or _clients(), drafter="ngram-k3", kind="ngram",
                        cost_model="p-ngram-k3", params={"k": 3}, target="smollm2-135m-instruct", dataset="fixture",
                        source={"backend": "vllm"}, where=str(FIXTURE))


def test_fixture_bundle_round_trips_and_matches_vllm(tmp_path):
    bundle, censoring = _build()
    folder = save_measured_bundle(bundle, censoring, tmp_path / "b")
    back = load_bundle(folder)
    masks = load_censoring(folder / "censoring.jsonl")
    res = {c.id: c for c in _clients()}
    drafted_total = 0
    for r in back.requests:
        t = r.drafters["ngram-k3"]
        m = masks[r.id]["ngram-k3"]
        assert r.output_token_ids == res[r.id].output_token_ids
        assert 0 not in m["measured"]  # the prefill's token is never a verify step
        assert set(m["censored"]) <= set(m["measured"])
        sd = res[r.id].spec_metrics
        drafted_total += sd["num_draft_tokens"]
        # every exact position where something was drafted is one of vLLM's per-step outcomes
        verify = [p for p in m["measured"] if t.proposal_len[p] > 0]
        assert len(verify) == len(sd.get("per_step_drafted", []))
        for p, a in zip(verify, sd.get("per_step_accepted", [])):
            assert t.acc_len[p] == a + 1
    assert drafted_total > 0  # the fixture exercises speculation


def test_mismatch_with_vllm_metrics_is_an_error():
    clients = _clients()
    sd = next(c.spec_metrics for c in clients if c.spec_metrics.get("per_step_accepted"))
    sd["per_step_accepted"] = [a - 1 if a else a + 1 for a in sd["per_step_accepted"]]
    with pytest.raises(TraceFormatError, match="but vLLM reports"):
        _build(clients)


def test_output_length_must_match_kept_tokens():
    clients = _clients()
    clients[0].output_token_ids = clients[0].output_token_ids + [1]
    with pytest.raises(TraceFormatError, match="step records keep"):
        _build(clients)


def test_join_ids():
    assert join_ids(["0", "x-1"], ["0-8db411b2", "x-1-0000abcd"], "w") == {"0": "0-8db411b2", "x-1": "x-1-0000abcd"}
    with pytest.raises(TraceFormatError, match="matches 0 engine requests"):
        join_ids(["7"], ["0-8db411b2"], "w")


def test_missing_metrics_say_how_to_get_them():
    m = measure_acceptance([RequestStep("a", 5, 0, 5, 5, 0, 0, 0, 1, 1)], 1, "w")
    with pytest.raises(TraceFormatError, match="per-request-spec-decode-metrics detailed"):
        check_against_vllm(m, None, "w")


@st.composite
def _runs(draw):
    """A request's steps: prefill emits 1, then verify steps with proposals <= k and accepted <= drafted."""
    k = draw(st.integers(1, 5))
    steps = [RequestStep("r", 7, 0, 7, 7, 0, 0, 0, 1, 1)]
    done = 1
    for _ in range(draw(st.integers(0, 12))):
        proposed = draw(st.integers(0, k))
        drafted = draw(st.integers(0, proposed))
        accepted = draw(st.integers(0, drafted))
        emitted = accepted + 1
        steps.append(RequestStep("r", 1 + drafted, 7 + done - 1, 7 + done, 7, proposed, drafted, accepted, emitted,
                                 emitted))
        done += emitted
    return k, steps, done


@settings(max_examples=60, deadline=None)
@given(_runs())
def test_measured_positions_replay_each_verify_step(run):
    k, steps, out_len = run
    m = measure_acceptance(steps, out_len, "w")
    pos = np.flatnonzero(m.measured)
    assert pos.tolist() == np.cumsum([s.kept for s in steps])[:-1].tolist()
    for p, s in zip(pos, steps[1:]):
        assert accepted_drafts(m.acc_len[p], s.drafted) == s.accepted  # the replay rule gives vLLM's outcome
        assert emitted_tokens(m.acc_len[p], s.drafted, m.proposal_len[p]) == s.emitted
        exact = s.accepted < s.drafted or s.proposed == 0
        assert bool(m.censored[p]) == (not exact)
    assert m.censored[~m.measured].all() and (m.acc_len[~m.measured] == 1).all()
