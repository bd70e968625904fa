"""First-token timing under `scheduler: vllm-v1`, pinned to vLLM V1 as read from its source:

- vllm/v1/engine/core.py (vllm-project/vllm @ 00080ee1): `run_busy_loop` = `_process_input_queue()` then
  `_process_engine_step()`; `step()` = `scheduler.schedule()`, `execute_model`, `update_from_output()`, whose
  outputs go to the output queue at once. So the engine's gap between busy steps (output hand-off, reading
  the input queue, entering schedule(): draftsim's step_overhead_s as `validate` measures it) comes after a
  step's tokens are out and before the next step's admissions; from idle the loop blocks on the input queue
  and schedules the moment a request arrives.
- vllm/v1/core/sched/scheduler.py (@ 00024d31): `schedule()` serves RUNNING requests first, then "Next,
  schedule the WAITING requests" with `num_new_tokens = min(request.num_tokens - num_computed_tokens,
  token_budget)` (chunked); a request's first token is sampled in the step that schedules its prompt's
  last token and is output by that step's `update_from_output()`.
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.workload_arrays import EngineWorkload
from tests.simulator.engine.engine_fixtures import iid_traces, linear, simulate

GAP = 0.004
PROFILE = dict(a_kv=0.0, b_tok=1e-5, const=5e-3)  # step = 5 ms + 10 us per batched token


def _run(arrivals, prompts, outs, mode="ar", budget=4096, gap=GAP):
    tr = iid_traces(len(arrivals), seed=0, out=(50, 51), prompt=(10, 11))
    wl = EngineWorkload([f"r{i}" for i in range(len(arrivals))], np.arange(len(arrivals)), np.array(arrivals, float),
                        np.array(prompts), np.array(outs), ["c"] * len(arrivals))
    res = simulate(tr, wl, mode=mode, k=2, chunked=True, scheduler="vllm-v1", overhead=gap, budget=budget,
                   target=linear(**PROFILE))
    return res.requests.set_index("request_id"), res.steps[res.steps.device == "target"].reset_index(drop=True)


def step_time(tokens: int) -> float:
    return PROFILE["const"] + PROFILE["b_tok"] * tokens


@pytest.mark.parametrize("mode", ["ar", "sd"])
def test_from_idle_the_prefill_starts_on_arrival_and_its_end_emits_the_first_token(mode):
    req, steps = _run([0.25], [100], [5], mode)
    assert steps.start[0] == 0.25
    assert req.loc["r0", "ttft"] == pytest.approx(step_time(100), abs=1e-12)


def test_an_arrival_during_the_gap_joins_the_next_step():
    first_end = step_time(100)  # r0's prefill, alone
    req, steps = _run([0.0, first_end + GAP / 2], [100, 100], [30, 30])
    # the gap after step 0 runs [end, end + GAP]; the arrival inside it is scheduled at end + GAP
    assert req.loc["r1", "first_scheduled_time"] == pytest.approx(first_end + GAP, abs=1e-12)
    mixed = steps[np.isclose(steps.start, first_end + GAP, rtol=0, atol=1e-12)].iloc[0]
    assert req.loc["r1", "first_token_time"] == pytest.approx(mixed.end, abs=1e-12)
    assert mixed.end - mixed.start == pytest.approx(step_time(101), abs=1e-12)  # its prefill + r0's decode


def test_an_arrival_during_a_step_waits_for_that_step_and_the_gap():
    req, steps = _run([0.0, step_time(100) / 2], [100, 40], [30, 30])
    assert req.loc["r1", "first_scheduled_time"] == pytest.approx(steps.end[0] + GAP, abs=1e-12)
    assert req.loc["r1", "ttft"] == pytest.approx(steps.end[0] + GAP + step_time(41) - step_time(100) / 2, abs=1e-12)


def test_a_chunked_prompt_emits_its_first_token_at_the_end_of_its_last_chunk():
    req, steps = _run([0.0], [250], [4], budget=100)  # chunks 100, 100, 50
    assert list(steps.batched_tokens[:3]) == [100, 100, 50]
    assert req.loc["r0", "first_token_time"] == pytest.approx(steps.end[2], abs=1e-12)
    assert req.loc["r0", "ttft"] == pytest.approx(2 * step_time(100) + step_time(50) + 2 * GAP, abs=1e-12)


def test_the_gap_separates_busy_steps_and_decode_pace_is_step_plus_gap():
    req, steps = _run([0.0], [20], [10])
    assert np.allclose(steps.start[1:].to_numpy() - steps.end[:-1].to_numpy(), GAP)
    assert req.loc["r0", "tpot"] == pytest.approx(step_time(1) + GAP, abs=1e-12)
