"""Invariants of every step rule together, over random small configs (hypothesis): no request lost
or duplicated, timestamps in order, KV used never negative nor above the pool, max_num_seqs and the token budget
never exceeded per step, emitted tokens == output length, one ITL gap per decode step, and AR == SD with a
zero-cost drafter that proposes nothing or has nothing accepted."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.simulator.engine.engine_fixtures import linear
from tests.simulator.engine.rule_cases import Req, req, run

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def configs(draw, mode: str | None = None):
    """(requests, run keyword arguments) of one small server (`mode` or a drawn one): KV tight (so it may preempt)
    or roomy, `draftsim` or vLLM V1's rules."""
    n = draw(st.integers(1, 6))
    reqs = []
    for _ in range(n):
        out = draw(st.integers(1, 10))
        acc = draw(st.lists(st.integers(1, 5), min_size=out, max_size=out))
        reqs.append(Req(draw(st.sampled_from([0.0, 0.0, 0.3, 1.0, 2.5])), draw(st.integers(1, 12)), out,
                        acc={"d": acc}))
    mode = mode or draw(st.sampled_from(["ar", "sd", "psd"]))
    k = draw(st.integers(1, 3))
    bs = draw(st.sampled_from([1, 2, 4, 8]))
    chunked = draw(st.booleans())
    scheduler = "draftsim"
    if chunked and draw(st.booleans()):
        scheduler = "vllm-v1"
    prefill = "separate" if not chunked and draw(st.booleans()) else "mixed"
    longest = max(r.prompt for r in reqs)
    budget = draw(st.integers(4, 20)) if chunked else longest + draw(st.integers(0, 8))
    # the one request that needs the most KV must fit alone (Scheduler.check_fits); above that, tight or roomy
    need = max(-(-(r.prompt + r.output - 1 + (k if mode != "ar" else 1)) // bs) for r in reqs)
    kv_blocks = need + draw(st.integers(0, 3 * need))
    kw = dict(mode=mode, k=k if mode != "ar" else 0, block_size=bs, kv_tokens=kv_blocks * bs,
              max_num_seqs=draw(st.integers(1, 4)), budget=budget, chunked=chunked, prefill=prefill,
              scheduler=scheduler, target=linear(draw(st.sampled_from([0.0, 1e-3])), draw(st.sampled_from([0.0, 1e-2])),
                                                  1.0))
    return reqs, kw


def check_invariants(res, outputs: list[int], budget: int | None, one_budget: bool = False,
                     ids: list[str] | None = None) -> None:
    """The invariants of a run of requests with output lengths `outputs` under max_num_batched_tokens `budget`
    (`one_budget`: vLLM V1's, shared by every token of a step; None: the budget not checked); `ids`: the workload's
    request ids where some repeat (else each must be unique)."""
    rq = res.requests
    n = len(outputs)
    assert len(rq) == n  # none lost or duplicated
    assert rq.request_id.is_unique if ids is None else sorted(rq.request_id) == sorted(ids)
    assert np.isfinite(rq.finish_time).all()
    assert (rq.arrival_time <= rq.first_scheduled_time).all()
    assert (rq.first_scheduled_time < rq.first_token_time).all()
    assert (rq.first_token_time <= rq.finish_time).all()
    s = res.steps
    total = res.extras["kv_total_blocks"]
    assert (s.kv_blocks_used >= 0).all() and (s.kv_blocks_used <= total).all()
    assert 0 <= res.extras["kv_peak_blocks"] <= total
    target = s[(s.device == "target") & ~s.phase.isin(["draft", "draft_prefill", "sync"])]
    assert (target.num_seqs <= res.extras["max_num_seqs"]).all()
    B = budget
    if B is None:
        pass
    elif one_budget:  # one budget for every token of the step
        assert (target.batched_tokens <= B).all()
    else:  # prompt chunks take only the budget the decode and draft tokens left; an oversized recompute goes alone
        pre = target[target.prefill_tokens > 0]
        alone = (pre.num_seqs == 1) & (pre.batched_tokens == pre.prefill_tokens) & (rq.preemptions.sum() > 0)
        assert ((pre.batched_tokens <= B) | alone).all()
    assert int(target.emitted_tokens.sum()) == sum(outputs)  # emitted == output length
    assert len(res.itl) == int(rq.decode_steps.sum())  # one gap per decode step and request
    assert int(s.proposed_tokens[s.phase.isin(["verify", "mixed"])].sum()) == int(rq.proposed_tokens.sum())
    if rq.preemptions.sum() == 0:  # the gaps of a request add up to its decode span
        span = float((rq.finish_time - rq.first_token_time).sum())
        assert abs(float(res.itl.sum()) - span) <= 1e-9 * max(1.0, span)


@SETTINGS
@given(data=st.data())
def test_rule_invariants_random_configs(data):
    reqs, kw = data.draw(configs())
    check_invariants(run(reqs, **kw), [r.output for r in reqs], kw["budget"], kw["scheduler"] == "vllm-v1")


def with_acc(reqs, acc: int, proposal: int | None = None):
    return [r._replace(acc={"d": [acc] * r.output}, proposal=None if proposal is None else {"d": [proposal] * r.output})
            for r in reqs]


@SETTINGS
@given(data=st.data())
def test_rule_ar_equals_sd_with_drafter_proposing_nothing(data):
    # an n-gram drafter with no match proposes nothing: no draft tokens in the budget or KV, no draft time; every
    # timestamp as AR's, whatever the config (the token-priced target included)
    reqs, kw = data.draw(configs("sd"))  # KV sized for the drafts the policy may ask for
    sd = run(with_acc(reqs, 1, proposal=0), **kw)
    ar = run(with_acc(reqs, 1), **{**kw, "mode": "ar", "k": 0})
    for c in ("first_scheduled_time", "first_token_time", "finish_time", "decode_steps", "preemptions"):
        assert req(sd, c) == req(ar, c), c
    assert sd.itl.tolist() == ar.itl.tolist()


@SETTINGS
@given(data=st.data())
def test_rule_ar_equals_sd_with_zero_cost_zero_acceptance_drafter(data):
    # k drafts that are never accepted, at no draft cost, on a target whose time does not depend on batched tokens,
    # with room for every prompt and all KV: the same timestamps as AR (the drafts only take budget and KV slots)
    reqs, kw = data.draw(configs("sd"))
    kw = {**kw, "target": linear(1e-3, 0.0, 1.0), "budget": 10**4, "kv_tokens": 10**6,
          "scheduler": "draftsim"}
    sd = run(with_acc(reqs, 1), **kw)
    ar = run(with_acc(reqs, 1), **{**kw, "mode": "ar", "k": 0})
    for c in ("first_scheduled_time", "first_token_time", "finish_time", "decode_steps"):
        assert req(sd, c) == req(ar, c), c
    assert sd.itl.tolist() == ar.itl.tolist()
