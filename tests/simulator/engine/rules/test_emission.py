"""The emission rules (simulator/engine/rules/emission.py) on hand-worked steps and hypothesis invariants, as plain
Python and as compiled (the functions the kernels call)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import compiled_kernel
from simulator.engine.rules import emission

EMIT = [pytest.param(emission.emit_decoded, id="plain"), pytest.param(compiled_kernel.emit_decoded, id="compiled")]
PREFILL = [pytest.param(emission.advance_prefills, id="plain"),
           pytest.param(compiled_kernel.advance_prefills, id="compiled")]
NAN = float("nan")


def _i(*v):
    return np.array(v, dtype=np.int64)


class Requests:
    """Per-request arrays of a small server, as RequestState holds them."""

    def __init__(self, out, gen=None, last_emit=None, prompt_left=None):
        n = len(out)
        self.out = _i(*out)
        self.gen = _i(*(gen or [0] * n))
        self.last_emit = np.array(last_emit or [NAN] * n, dtype=np.float64)
        self.prefill_left = _i(*(prompt_left or [0] * n))
        self.prefill_done = _i(*[0] * n)
        self.first_token = np.full(n, NAN)
        self.steps, self.proposed, self.accepted = _i(*[0] * n), _i(*[0] * n), _i(*[0] * n)
        self.done = np.zeros(2 * n + 1, dtype=np.int64)

    def emit(self, rule, dec, accepted, proposed, now, n_done=0):
        itl = np.full(len(dec), -1.0)
        emitted, ni, n_done = rule(_i(*dec), len(dec), _i(*accepted), _i(*proposed), now, self.out, self.gen,
                                   self.last_emit, itl, 0, self.steps, self.proposed, self.accepted, self.done,
                                   n_done)
        assert ni == len(dec)
        return emitted, itl, list(self.done[:n_done])

    def prefill(self, rule, pre, chunk, now, n_done=0):
        first, n_done = rule(_i(*pre), _i(*chunk), len(pre), self.prefill_left, self.prefill_done, self.gen,
                             self.last_emit, self.first_token, now, self.out, self.done, n_done)
        return first, list(self.done[:n_done])


SAMPLING = [pytest.param(emission.sampling_seqs, id="plain"),
            pytest.param(compiled_kernel._sampling_seqs, id="compiled")]


@pytest.mark.parametrize("rule", SAMPLING)
def test_the_requests_that_sample_are_the_decodes_and_the_chunks_that_end_their_prompt(rule):
    # 3 decodes; chunks of requests 4, 5, 6: request 4's 8 tokens are all it has left (its first token is sampled),
    # request 5 has 20 left of which the chunk takes 8, request 6 (a new prompt: its whole prompt left) takes all 5
    left = _i(0, 0, 0, 0, 8, 20, 5)
    assert rule(3, _i(4, 5, 6), _i(8, 8, 5), 3, left) == 5
    assert rule(3, _i(4, 5, 6), _i(8, 8, 5), 1, left) == 4  # only the first chunk is in the step
    assert rule(0, _i(5), _i(8), 1, left) == 0  # a prompt's middle chunk alone samples nothing
    assert rule(2, _i(), _i(), 0, left) == 2


@pytest.mark.parametrize("rule", EMIT)
def test_emit_one_plus_accepted_cut_at_the_output_end(rule):
    # request 0: 3 of 8 out, 2 accepted -> emits 3 (gen 6); request 1: 4 of 6 out, 3 accepted -> 4 wanted, 2 left:
    # emits 2 and finishes; request 2: AR (nothing drafted) -> 1 token
    r = Requests([8, 6, 5], gen=[3, 4, 1], last_emit=[1.0, 1.5, 0.25])
    emitted, itl, done = r.emit(rule, [0, 1, 2], [2, 3, 0], [3, 3, 0], 2.0)
    assert emitted == 3 + 2 + 1
    assert list(r.gen) == [6, 6, 2]
    assert done == [1]
    assert list(itl) == [1.0, 0.5, 1.75]  # one gap per decoding request, from its last emission, in batch order
    assert list(r.last_emit) == [2.0, 2.0, 2.0]
    # counters: one step each; drafts as proposed and accepted by verification (before the output-end cut)
    assert list(r.steps) == [1, 1, 1] and list(r.proposed) == [3, 3, 0] and list(r.accepted) == [2, 3, 0]


@pytest.mark.parametrize("rule", EMIT)
def test_emit_leaves_requests_outside_the_batch_alone_and_appends_to_done(rule):
    r = Requests([4, 4, 4], gen=[3, 1, 2], last_emit=[0.5, 0.5, 0.5])
    r.done[0] = 7  # a finish already found this step stays first
    emitted, itl, done = r.emit(rule, [2, 0], [0, 0], [0, 0], 1.0, n_done=1)
    assert emitted == 2 and done == [7, 0]
    assert list(r.gen) == [4, 1, 3] and r.last_emit[1] == 0.5 and r.steps[1] == 0


@pytest.mark.parametrize("rule", PREFILL)
def test_prompt_end_emits_the_first_token(rule):
    # request 0: a 10-token prompt in chunks of 6 and 4: no token after the first, the first token after the second;
    # request 1: a one-token output prefilled whole finishes with its prompt
    r = Requests([3, 1], prompt_left=[10, 5])
    first, done = r.prefill(rule, [0, 1], [6, 5], 1.0)
    assert first == 1 and done == [1]
    assert list(r.prefill_left) == [4, 0] and list(r.prefill_done) == [6, 5] and list(r.gen) == [0, 1]
    assert r.first_token[1] == 1.0 and math.isnan(r.first_token[0]) and r.last_emit[1] == 1.0
    first, done = r.prefill(rule, [0], [4], 2.5)
    assert first == 1 and done == []
    assert r.gen[0] == 1 and r.first_token[0] == 2.5 and r.last_emit[0] == 2.5 and r.prefill_done[0] == 10


@pytest.mark.parametrize("rule", PREFILL)
def test_recompute_prefill_keeps_the_first_token_time(rule):
    # preempted after 2 output tokens: the recompute prefill (prompt 4 + 2 generated) emits the next token at 9.0,
    # the request's first token stays at 1.0
    r = Requests([5], gen=[2], last_emit=[3.0], prompt_left=[6])
    r.first_token[0] = 1.0
    first, done = r.prefill(rule, [0], [6], 9.0)
    assert first == 1 and done == []
    assert r.gen[0] == 3 and r.first_token[0] == 1.0 and r.last_emit[0] == 9.0


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 5), compiled=st.booleans())
def test_invariant_a_request_emits_exactly_its_output_and_finishes_once(data, n, compiled):
    """Whatever verification accepts, each request emits exactly its output length (never more), gets one ITL gap
    per decode step, and joins `done` exactly once: the step its last token is emitted."""
    emit = compiled_kernel.emit_decoded if compiled else emission.emit_decoded
    prefill = compiled_kernel.advance_prefills if compiled else emission.advance_prefills
    out = data.draw(st.lists(st.integers(1, 12), min_size=n, max_size=n))
    prompt = data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    r = Requests(out, prompt_left=prompt)
    finished_at: dict[int, int] = {}
    gaps = 0
    now = 0.0
    for step in range(200):
        now += 1.0
        running = [i for i in range(n) if i not in finished_at]
        if not running:
            break
        dec = [i for i in running if r.prefill_left[i] == 0]
        pre = [i for i in running if r.prefill_left[i] > 0]
        acc = data.draw(st.lists(st.integers(0, 6), min_size=len(dec), max_size=len(dec)))
        prop = [a + data.draw(st.integers(0, 2)) for a in acc]
        chunk = [min(int(r.prefill_left[i]), data.draw(st.integers(1, 9))) for i in pre]
        gen_before = r.gen.copy()
        emitted, itl, done = r.emit(emit, dec, acc, prop, now)
        gaps += len(itl)
        first, done = r.prefill(prefill, pre, chunk, now, n_done=len(done))
        assert emitted + first == int((r.gen - gen_before).sum())
        assert all(r.gen[i] > gen_before[i] for i in dec)  # a decoding request always emits (1 + accepted >= 1)
        assert (r.gen <= r.out).all()
        for i in done:
            assert i not in finished_at and r.gen[i] == r.out[i]
            finished_at[i] = step
        assert all(r.gen[i] < r.out[i] for i in range(n) if i not in finished_at)
    assert sorted(finished_at) == list(range(n))
    assert list(r.gen) == out
    assert gaps == int(r.steps.sum())  # one ITL gap per decode step
    assert not np.isnan(r.first_token).any()
