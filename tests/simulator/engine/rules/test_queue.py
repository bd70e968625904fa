"""The queue rules (simulator/engine/rules/queue.py), plain and compiled: hand-worked windows, admissions,
preemptions and finishes, then random sequences of arrivals, admissions, preemptions and finishes checked against a
list-and-deque model of vLLM's queues (running in admission order; waiting FIFO with the preempted put back at its
front, newest first)."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import compiled_kernel
from simulator.engine.rules import queue
from simulator.engine.rules.prefill_plan import PrefillLimits, plan_buffers
from simulator.engine.rules.psd_sides import assign_sides, leave_sides

PLAIN = {"window": queue.queue_window, "admit": queue.admit_planned, "requeue": queue.requeue_preempted,
         "drop": queue.drop_finished, "plan": queue.plan_step_prefills, "assign": assign_sides, "leave": leave_sides}
COMPILED = {"window": compiled_kernel._queue_window, "admit": compiled_kernel.admit_planned,
            "requeue": compiled_kernel.requeue_preempted, "drop": compiled_kernel.drop_finished,
            "plan": compiled_kernel.plan_step_prefills, "assign": compiled_kernel.assign_sides,
            "leave": compiled_kernel.leave_sides}
RULES = [pytest.param(PLAIN, id="plain"), pytest.param(COMPILED, id="compiled")]


def _i64(xs, size=None):
    a = np.zeros(max(len(xs), size or 0), np.int64)
    a[:len(xs)] = xs
    return a


@pytest.mark.parametrize("r", RULES)
def test_window_is_the_preempted_then_the_arrivals_up_to_the_free_seats(r):
    requeued, arrived, out = _i64([7, 5], 4), _i64([9, 2, 8, 6, 3]), np.full(4, -1, np.int64)
    # 2 preempted, arrivals 2, 8, 6 not admitted (admit 1, ptr 4); 1 running of 4 seats: 3 offered
    assert r["window"](4, out, 1, requeued, 2, arrived, 1, 4) == 3
    assert out[:3].tolist() == [7, 5, 2]
    assert r["window"](4, out, 4, requeued, 2, arrived, 1, 4) == 0  # no free seat
    assert r["window"](4, out, 0, requeued, 0, arrived, 4, 4) == 0  # nobody waiting
    # arrived=None: the arrivals in index order (the kernels'); admit 3, ptr 6: arrivals 3, 4, 5 wait
    assert r["window"](4, out, 0, requeued, 1, None, 3, 6) == 4
    assert out.tolist() == [7, 3, 4, 5]


@pytest.mark.parametrize("r", RULES)
def test_admission_takes_the_queue_head_the_preempted_first(r):
    plan = plan_buffers(4)
    plan.request[:3], plan.new[:3] = [4, 7, 5], [False, True, True]  # 4 continues its prompt; 7 and 5 admitted
    run, requeued = _i64([1, 4], 6), _i64([7, 5, 9], 6)
    n_run, nq, admit = r["admit"](plan, 3, run, 2, requeued, 3, 10)
    assert (n_run, nq, admit) == (4, 1, 10)
    assert run[:4].tolist() == [1, 4, 7, 5] and requeued[:1].tolist() == [9]
    plan.request[:2], plan.new[:2] = [9, 11], [True, True]  # the last preempted, then arrival 11
    n_run, nq, admit = r["admit"](plan, 2, run, 4, requeued, 1, 10)
    assert (n_run, nq, admit) == (6, 0, 11) and run[4:6].tolist() == [9, 11]


@pytest.mark.parametrize("r", RULES)
def test_preempted_lead_the_queue_in_admission_order(r):
    run, requeued = _i64([1, 2, 3, 4], 6), _i64([9], 6)
    assert r["requeue"](run, 2, 4, requeued, 1) == 3
    assert requeued[:3].tolist() == [3, 4, 9]


@pytest.mark.parametrize("r", RULES)
def test_finished_leave_the_running_in_order(r):
    run = _i64([5, 1, 4, 2])
    finish = np.full(6, np.nan)
    finish[[1, 2]] = 3.0
    assert r["drop"](run, 4, finish) == 2
    assert run[:2].tolist() == [5, 4]


@pytest.mark.parametrize("r", RULES)
def test_step_plan_offers_the_window_after_the_running_prompts(r):
    """Budget 10: running request 0 has 6 prompt tokens left (chunked), request 1 decodes; the queue holds the
    preempted 3 (prompt 4 + 2 generated: recomputes 6) then arrival 2 (prompt 5): 0 takes 6, 3 takes the last 4 of
    its 6 (chunked), 2 gets nothing."""
    lim = PrefillLimits(max_num_seqs=4, max_num_batched_tokens=10, chunked=True, block_size=16)
    prompt, gen = _i64([6, 3, 5, 4]), _i64([0, 1, 0, 2])
    left, done_, blocks = _i64([6, 0, 0, 0]), _i64([0, 3, 0, 0]), _i64([0, 1, 0, 0])
    plan, window = plan_buffers(4), np.zeros(4, np.int64)
    args = (_i64([0, 1], 4), 2, _i64([3], 4), 1, _i64([0, 1, 2, 3]), 3, 3, 100, prompt, gen, left, done_, blocks)
    sums = r["plan"](lim, plan, window, 0, True, *args)
    assert sums[0] == 2 and plan.request[:2].tolist() == [0, 3] and plan.tokens[:2].tolist() == [6, 4]
    assert plan.new[:2].tolist() == [False, True]
    sums = r["plan"](lim, plan, window, 0, False, *args)  # a step that preempted admits nobody
    assert sums[0] == 1 and plan.request[0] == 0


@pytest.mark.parametrize("r", RULES)
def test_sides_joined_on_admission_and_left_on_preemption(r):
    side, pend = np.array([0, 0, 1, -1, -1, 1], np.int64), np.array([2, -1, 0, -1, -1, 3], np.int64)
    run = _i64([0, 1, 2, 3, 4])
    # side 0 holds 0 and 1, side 1 holds 2; side 1 is verified now: 3 joins the smaller side 1, then 4 joins side 1
    # (2 against 2: a tie goes to the side verified now)
    r["assign"](side, run, 3, 5, 1)
    assert side[[3, 4]].tolist() == [1, 1]
    r["leave"](_i64([5, 0, 2]), 1, 3, side, pend, -1)
    assert side[[0, 2]].tolist() == [-1, -1] and pend[[0, 2]].tolist() == [-1, -1] and pend[5] == 3


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from("apfx"), st.integers(0, 5)), max_size=60), compiled=st.booleans(),
       index_order=st.booleans())
def test_queues_match_a_list_and_deque_model(ops, compiled, index_order):
    """Arrive (a), admit from the head (p: up to the free seats, the window's order), preempt the newest (x: they go
    back to the queue's front, newest first) and finish (f: the running request at a position): the arrays hold
    what vLLM's running list and waiting deque would. Requests arrive in index order, so the window reads the same
    with `arrived` or with None (the kernels')."""
    r = COMPILED if compiled else PLAIN
    seats, n = 4, 80
    run, requeued, arrived = np.zeros(seats, np.int64), np.zeros(seats, np.int64), np.zeros(n, np.int64)
    n_run = nq = admit = ptr = 0
    finish = np.full(n, np.nan)
    model_run, model_wait = [], deque()
    nxt = 0
    plan, window = plan_buffers(seats), np.zeros(seats, np.int64)
    for op, x in ops:
        if op == "a" and nxt < n:
            arrived[ptr], ptr = nxt, ptr + 1
            model_wait.append(nxt)
            nxt += 1
        elif op == "p":
            m = r["window"](seats, window, n_run, requeued, nq, None if index_order else arrived, admit, ptr)
            take = min(x, m)
            plan.request[:take], plan.new[:take] = window[:take], True
            n_run, nq, admit = r["admit"](plan, take, run, n_run, requeued, nq, admit)
            for _ in range(take):
                model_run.append(model_wait.popleft())
        elif op == "x" and n_run:
            keep = n_run - 1 - x % n_run
            nq = r["requeue"](run, keep, n_run, requeued, nq)
            for i in reversed(model_run[keep:]):
                model_wait.appendleft(i)
            del model_run[keep:]
            n_run = keep
        elif op == "f" and n_run:
            i = model_run.pop(x % n_run)
            finish[i] = 1.0
            n_run = r["drop"](run, n_run, finish)
        assert run[:n_run].tolist() == model_run
        waiting = requeued[:nq].tolist() + arrived[admit:ptr].tolist()
        assert waiting == list(model_wait)
        assert n_run + nq <= seats
