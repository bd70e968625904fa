"""Step pricing: a policy's step estimate prices the step the simulator then runs, prompt chunks included,
by the same rule (rules/pricing.target_time on the step's full shape; its hand-worked prices by shape:
tests/simulator/engine/rules/test_pricing.py)."""
from __future__ import annotations

import numpy as np
import pytest

from policies.base import BatchView, Policy
from simulator.costs.draft_cost import DraftCost
from simulator.engine.simulation import ServerSimulation
from simulator.costs.latency import LinearProfile, Provenance
from simulator.costs.step_model import StructuredProfile
from tests.simulator.engine.engine_fixtures import iid_traces, inputs, scenario, workload

# prompt tokens priced far from draft tokens: an estimate that read them as drafts would miss by a lot
TARGET = StructuredProfile("t", {"const": 0.01, "num_seqs": 0.002, "draft_tokens": 0.004, "decode_kv": 1e-6,
                                 "prefill_tokens": 2e-4, "prefill_seqs": 0.003, "prefill_attn": 1e-8,
                                 "prefill_step": 0.005, "verify_step": 0.001})
DRAFT_PROFILE = LinearProfile("d", {"kv_tokens": 1e-7, "batched_tokens": 3e-5, "const": 0.002},
                              provenance=Provenance("test"))


class EstimatingPolicy(Policy):
    """Fixed drafter and k for the whole batch; records the step estimate it is offered at each step."""

    name = "test-estimating"
    learns = False

    def __init__(self, k: int):
        self.k = k
        self.seen: dict[float, float] = {}

    def drafters_used(self):
        return ("d",)

    def max_draft_tokens(self):
        return self.k

    def choose_batch(self, view: BatchView):
        assert view.now not in self.seen  # one step per instant: the estimate is matched to its step by time
        self.seen[view.now] = view.step_time_estimate("d", self.k)
        n = view.batch_size
        return np.full(n, view.drafters.index("d"), dtype=np.int64), np.full(n, self.k, dtype=np.int64)


CASES = {
    # draftsim scheduler: step overhead inside the step; the drafter's own prompt pass on the target's device
    "draftsim": dict(costs={"d": DraftCost("autoregressive", profile=DRAFT_PROFILE)}, step_overhead_s=0.003,
                     scheduler="draftsim", chunked_prefill=True),
    # vLLM V1: the proposer runs once per step over every token scheduled (prompt chunks included)
    "vllm-v1": dict(costs={"d": DraftCost("engine_step", profile=DRAFT_PROFILE)}, step_overhead_s=0.003,
                    scheduler="vllm-v1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_estimate_equals_the_simulated_step_price_with_prompt_chunks(case):
    """Every step the policy chose k for is priced by its estimate exactly: decodes with prompts joining
    (whole and chunked under a small token budget) as well as plain verify steps."""
    spec = dict(CASES[case])
    costs = spec.pop("costs")
    traces = iid_traces(40, seed=4, out=(10, 40), prompt=(20, 300))
    wl = workload(traces, rate=20.0, seed=2)
    policy = EstimatingPolicy(3)
    sc = scenario("sd", policy, target=TARGET, costs=costs, max_num_seqs=6, max_num_batched_tokens=160, **spec)
    res = ServerSimulation(sc, inputs(traces, wl)).simulate()
    assert int(res.requests.preemptions.sum()) == 0  # a preempting step admits nobody, which no estimate can foresee
    steps = res.steps.groupby("step").agg(start=("start", "min"), end=("end", "max"),
                                          prompt=("prefill_tokens", "sum"), seqs=("num_seqs", "max"))
    by_start = {float(s): (float(e), int(p)) for s, e, p in zip(steps.start, steps.end, steps.prompt)}
    with_prompt = 0
    for now, est in policy.seen.items():
        end, prompt = by_start[now]
        assert est == pytest.approx(end - now, rel=1e-12, abs=1e-15), (now, prompt)
        with_prompt += prompt > 0
    assert with_prompt >= 10 and with_prompt < len(policy.seen)  # both kinds of step were checked
