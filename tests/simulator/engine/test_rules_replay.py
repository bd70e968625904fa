"""Acceptance replay, emission, ITL and finish (drafting.Drafting.choose/accept with traces/acceptance.py,
compiled_run's replay table; the emission and finish rules of simulator/engine/rules/ through
step_outcome.StepOutcome.apply/finish and the kernels). Hand-worked: every step costs 1.0 s unless the case says
otherwise."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.simulator.engine.engine_fixtures import linear
from tests.simulator.engine.rule_cases import Req, col, req, run

ACC = [1, 4, 1, 3, 2, 5, 1, 1]  # acc_len per output position (position 0: the prefill's token)


def test_rule_replay_fixed_k():
    # k=3, output 8: position 1 (acc_len 4) accepts min(3, 3) = 3 and emits 4 -> 5 tokens; position 5 (acc_len 5)
    # accepts 3 and would emit 4, cut to the 3 left: the output ends at 8 after 2 verify steps
    res = run([Req(0.0, 4, 8, acc={"d": ACC})], mode="sd", k=3)
    assert col(res, "proposed_tokens") == [0, 3, 3]
    assert col(res, "accepted_tokens") == [0, 3, 3]
    assert col(res, "emitted_tokens") == [1, 4, 3]
    assert req(res, "decode_steps") == [2]
    assert req(res, "accepted_tokens") == [6]
    assert req(res, "finish_time") == [3.0]


def test_rule_replay_acceptance_below_k():
    # k=5: position 1 accepts acc_len - 1 = 3 (emits 4); position 5 accepts 4 and the output's end cuts it to 3
    res = run([Req(0.0, 4, 8, acc={"d": ACC})], mode="sd", k=5)
    assert col(res, "accepted_tokens") == [0, 3, 4]
    assert col(res, "emitted_tokens") == [1, 4, 3]


def test_rule_replay_proposal_cap():
    # an n-gram drafter proposes min(k, match length): matches 2, 0, 3 at positions 1, 4, 5 -> proposed 2 (all
    # accepted: acc_len 4), 0 (a plain decode), 3 (accepted, cut to the 3 tokens left)
    prop = [0, 2, 0, 0, 0, 3, 0, 0]
    res = run([Req(0.0, 4, 8, acc={"g": ACC}, proposal={"g": prop})], mode="sd", k=3, drafters=("g",))
    assert col(res, "proposed_tokens") == [0, 2, 0, 3]
    assert col(res, "accepted_tokens") == [0, 2, 0, 3]
    assert col(res, "emitted_tokens") == [1, 3, 1, 3]


def walk(acc: list[int], prop: list[int] | None, k: int, out: int) -> tuple[int, int, int]:
    """(verify steps, proposed, accepted) of one request by the replay rule, written out here."""
    g, steps, p_sum, a_sum = 1, 0, 0, 0
    while g < out:
        p = k if prop is None else min(k, prop[g])
        a = min(acc[g] - 1, p)
        g += min(1 + a, out - g)
        steps, p_sum, a_sum = steps + 1, p_sum + p, a_sum + a
    return steps, p_sum, a_sum


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rule_replay_matches_walk(data):
    n = data.draw(st.integers(1, 3))
    k = data.draw(st.integers(1, 4))
    cap = data.draw(st.booleans())
    reqs = []
    for _ in range(n):
        out = data.draw(st.integers(1, 12))
        acc = data.draw(st.lists(st.integers(1, 6), min_size=out, max_size=out))
        prop = data.draw(st.lists(st.integers(0, 5), min_size=out, max_size=out)) if cap else None
        reqs.append(Req(data.draw(st.sampled_from([0.0, 0.5, 2.0])), data.draw(st.integers(1, 9)), out,
                        acc={"d": acc}, proposal={"d": prop} if cap else None))
    res = run(reqs, mode="sd", k=k, max_num_seqs=2)
    got = list(zip(req(res, "decode_steps"), req(res, "proposed_tokens"), req(res, "accepted_tokens")))
    assert got == [walk(r.acc["d"], r.proposal["d"] if cap else None, k, r.output) for r in reqs]
    assert int(res.steps.emitted_tokens.sum()) == sum(r.output for r in reqs)


def test_rule_finish_with_prefill_when_output_is_one_token():
    res = run([Req(0.0, 4, 1), Req(0.0, 4, 3)], mode="sd", k=2)
    assert req(res, "first_token_time") == [1.0, 1.0]
    assert req(res, "finish_time") == [1.0, 3.0]
    assert req(res, "decode_steps") == [0, 2]
    assert col(res, "num_seqs") == [2, 1, 1]
    alone = run([Req(0.0, 4, 1), Req(1.5, 4, 1)], mode="sd", k=2)  # each prefilled by itself
    assert req(alone, "finish_time") == [1.0, 2.5]
    assert req(alone, "decode_steps") == [0, 0]


def test_rule_emission_itl_and_tpot():
    # step time 1 + 0.5 x batched tokens. r0 (prompt 2, output 3): prefill [0, 2], decode [2, 3.5]; r1 (prompt 2,
    # arrives 2.5) joins the next step: r0's decode + r1's prefill, 3 tokens, [3.5, 6]; r1 decodes [6, 7.5].
    # ITL: one gap per decode step and request, in step order: 1.5, 2.5 (r0), 1.5 (r1)
    res = run([Req(0.0, 2, 3), Req(2.5, 2, 2)], target=linear(0.0, 0.5, 1.0))
    assert res.itl.tolist() == [1.5, 2.5, 1.5]
    assert req(res, "first_token_time") == [2.0, 6.0]
    assert req(res, "finish_time") == [6.0, 7.5]
    assert req(res, "tpot") == [2.0, 1.5]
    assert col(res, "emitted_tokens") == [1, 1, 2, 1]
