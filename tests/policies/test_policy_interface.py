"""Every policy states its drafters and its largest k (`drafters_used`, `max_draft_tokens`), and the statement holds:
run in the engine, no policy chooses a drafter it did not name or a k above its bound. Nobody guesses."""
import numpy as np
import pytest

import oracle.registry  # noqa: F401  (registers the ground-truth policies)
from policies.base import Choice, Policy
from policies.registry import POLICIES, make_policy
from simulator.costs.draft_cost import DraftCost
from simulator.engine.simulation import ServerSimulation
from simulator.scenario import inputs_from_traces
from tests.policies.test_ground_truth_hidden import online_specs, with_proposal_len
from tests.simulator.engine.engine_fixtures import scenario
from traces.pool import PoolSpec, make_pool_bundle, pool_drafters

SPEC = PoolSpec(num_requests=10, output_len=(40, 90), seed=5)
DRAFTERS = pool_drafters(SPEC)
ORACLE_SPECS = {
    "oracle-k": {"drafter": DRAFTERS[0]},
    "oracle-best-drafter": {"drafters": list(DRAFTERS[:2]), "k_max": 6},
    "oracle-combine": {"ngram": DRAFTERS[0], "eagle": DRAFTERS[1]},
    "oracle-best-fixed": {"drafters": list(DRAFTERS), "k": 2},
}


def _traces():
    return [with_proposal_len(r) for r in make_pool_bundle(SPEC).requests]


def _run_recording(policy: Policy, traces):
    """Simulate `policy` (sampled verification: the pool has tv) and record every (drafter, k) it chose."""
    chosen: list[tuple[str, int]] = []
    inner = policy.choose_batch

    def recording(view):
        d, k = inner(view)
        chosen.extend((view.drafters[int(i)], int(j)) for i, j in zip(d, k) if j > 0)
        return d, k

    policy.choose_batch = recording
    sc = scenario("sd", policy, costs={d: DraftCost("constant", seconds=0.001) for d in DRAFTERS},
                  max_num_seqs=4, verification="sampled")
    sim = ServerSimulation(sc, inputs_from_traces(traces, DRAFTERS, clients=4))
    sim.simulate()
    return chosen


def test_every_registered_policy_is_covered_here():
    assert set(POLICIES) == set(online_specs(DRAFTERS)) | set(ORACLE_SPECS)


@pytest.mark.parametrize("name", sorted({**online_specs(DRAFTERS), **ORACLE_SPECS}))
def test_what_a_policy_states_bounds_what_it_chooses(name):
    spec = {**online_specs(DRAFTERS), **ORACLE_SPECS}[name]
    policy = make_policy({"name": name, **spec}, seed=3)
    chosen = _run_recording(policy, _traces())
    assert chosen, f"{name} never drafted"
    used, top = set(policy.drafters_used()), policy.max_draft_tokens()
    assert {d for d, _ in chosen} <= used, name
    assert max(k for _, k in chosen) <= top, name


def test_an_oracle_without_k_max_reads_its_bound_from_the_ground_truth_or_says_what_to_set():
    pol = make_policy({"name": "oracle-k", "drafter": DRAFTERS[0]})
    with pytest.raises(ValueError, match="set k_max"):
        pol.max_draft_tokens()
    traces = _traces()
    pol.bind_ground_truth({t.id: t for t in traces})
    # independent of traces.acceptance: the longest all-accepted run that fits in the output and the proposal
    want = 0
    for t in traces:
        d = t.drafters[DRAFTERS[0]]
        for p in range(t.output_len):
            j = min(int(d.acc_len[p]) - 1, t.output_len - p - 1, int(d.proposal_len[p]))
            want = max(want, j)
    assert pol.max_draft_tokens() == want
    assert make_policy({"name": "oracle-k", "drafter": DRAFTERS[0], "k_max": 2}).max_draft_tokens() == 2


class _Silent(Policy):
    """A plug-in policy that states neither its drafters nor its k."""

    name = "silent"

    def choose(self, view):
        return Choice("d", 3)


def test_a_policy_that_states_nothing_is_refused_with_what_to_implement():
    from tests.simulator.engine.engine_fixtures import iid_traces, simulate, workload

    traces = iid_traces(3, seed=1)
    with pytest.raises(NotImplementedError, match=r"must state drafters_used\(\)"):
        simulate(traces, workload(traces, 3), policy=_Silent())


def test_the_kv_check_uses_the_stated_k():
    """A k-by-batch policy whose largest range k is 40 needs 40 lookahead tokens in KV: it is refused up front
    where the first range's k alone (2) would fit."""
    from tests.simulator.engine.engine_fixtures import iid_traces, simulate, workload

    traces = iid_traces(2, seed=2, prompt=(100, 101), out=(100, 101))
    pol = make_policy({"name": "k-by-batch", "drafter": "d", "ranges": [
        {"min_batch": 1, "max_batch": 1, "k": 2}, {"min_batch": 2, "max_batch": None, "k": 40}]})
    assert pol.max_draft_tokens() == 40
    need = 100 + 100 - 1 + 40
    with pytest.raises(ValueError, match="40 draft lookahead"):
        simulate(traces, workload(traces, 2), policy=pol, kv_tokens=16 * (need // 16), max_num_seqs=1)
    assert np.isfinite(simulate(traces, workload(traces, 2), policy=pol, kv_tokens=16 * (need // 16 + 1),
                                max_num_seqs=1).requests.finish_time).all()


class _Twice(Policy):
    """A plug-in policy that names one drafter twice."""

    name = "twice"

    def choose(self, view):
        return Choice("d", 3)

    def drafters_used(self):
        return ("d", "d")

    def max_draft_tokens(self):
        return 3


def test_a_policy_naming_a_drafter_twice_is_refused_before_any_step():
    from tests.simulator.engine.engine_fixtures import iid_traces, simulate, workload

    traces = iid_traces(3, seed=1)
    with pytest.raises(ValueError, match=r"policy 'twice' names drafter 'd' more than once in drafters_used\(\)"):
        simulate(traces, workload(traces, 3), policy=_Twice())
