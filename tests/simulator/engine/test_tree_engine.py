"""Draft trees in the engine (the fixed policy's `tree:`): a width-1 tree runs exactly as the chain of its depth,
a tree's steps verify N + 1 tokens per sequence and accept at most its depth, the context grows by the emitted tokens
only, random trees keep the engine's invariants under vLLM V1's budget and closed loops, and what cannot be replayed
is refused with its reason."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings, strategies as st

from policies.base import Choice, FixedPolicy, Policy
from policies.registry import make_policy
from simulator.engine.acceptance_table import AcceptanceTable
from simulator.engine.simulation import ServerSimulation
from simulator.engine.workload_arrays import SimInputs
from tests.simulator.engine.engine_fixtures import COSTS, scenario, workload
from tests.simulator.engine.test_rules_invariants import check_invariants
from traces.bundle import DrafterTrace, RequestTrace
from traces.tree import tree_from_paths

FIVE = [[0], [1], [0, 0], [0, 1], [1, 0]]


def tree_traces(n: int, seed: int, depth: int, top_k: int, rate: float = 0.6, out=(3, 60),
                more: dict[str, float] | None = None) -> list[RequestTrace]:
    """Requests whose tree_rank rows are chain consistent with acc_len (leading zeros = min(acc_len - 1, depth)),
    the other ranks random in [0, top_k], every rank past the output's end top_k (the bundle's tail rule): drafter
    "d" at acceptance `rate`, and each drafter of `more` at its own."""
    rng = np.random.default_rng(seed)
    traces = []
    for t in range(n):
        o = int(rng.integers(*out))
        left = o - np.arange(o)  # tokens from p to the output's end
        drafters = {}
        for name, r in {"d": rate, **(more or {})}.items():
            acc = 1 + np.minimum(rng.geometric(1 - r, o) - 1, left - 1)
            ranks = rng.integers(0, top_k + 1, (o, depth))
            for p in range(o):
                z = min(int(acc[p]) - 1, depth)
                ranks[p, :z] = 0
                if z < depth:
                    ranks[p, z] = rng.integers(1, top_k + 1)
            for j in range(depth):
                ranks[max(o - j, 0):, j] = top_k
            drafters[name] = DrafterTrace(acc.astype(np.int32), tree_rank=ranks.astype(np.int8))
        traces.append(RequestTrace(f"t{t}", int(rng.integers(1, 80)), o, drafters))
    return traces


def run(traces, policy, *, cost="zero", top_k=4, rate=40.0, clients=0, **server):
    wl = workload(traces, rate=None if clients else rate, clients=clients)
    server = {"max_num_seqs": 8, "max_num_batched_tokens": 4096, **server}
    if server.get("scheduler", "draftsim") != "vllm-v1":
        server.setdefault("chunked_prefill", False)
    sc = scenario("sd", policy, costs={"d": COSTS[cost]}, **server)
    inputs = SimInputs(wl, AcceptanceTable.from_traces(traces, ["d"], tree_top_k={"d": top_k}), traces)
    return ServerSimulation(sc, inputs).simulate()


@settings(max_examples=12, deadline=None)
@example(depth=4, seed=1, cost="zero", v1=True, seqs=4, budget=8)  # cut drafts whose rows accept past the cut
@given(depth=st.integers(1, 4), seed=st.integers(0, 2**16), cost=st.sampled_from(sorted(COSTS)),
       v1=st.booleans(), seqs=st.integers(1, 6), budget=st.integers(4, 40))
def test_width_one_tree_runs_as_the_chain_of_its_depth(depth, seed, cost, v1, seqs, budget):
    """Whole run tables (requests, steps, ITL) equal, bit for bit, including vLLM V1's decode budget cutting drafts
    (a cut tree is its leading nodes, a cut chain its leading drafts): a budget of 4..40 tokens cuts often."""
    traces = tree_traces(6, seed, depth, top_k=4)
    server = dict(max_num_seqs=seqs, scheduler="vllm-v1", max_num_batched_tokens=budget) if v1 else \
        dict(max_num_seqs=seqs)
    chain = run(traces, FixedPolicy("d", depth), cost=cost, **server)
    tree = run(traces, FixedPolicy("d", tree={"widths": [1] * depth}), cost=cost, **server)
    pd.testing.assert_frame_equal(chain.requests, tree.requests, check_exact=True)
    pd.testing.assert_frame_equal(chain.steps, tree.steps, check_exact=True)
    assert chain.itl.tobytes() == tree.itl.tobytes()


@st.composite
def trees(draw, max_depth=3):
    paths: list[tuple[int, ...]] = []
    for _ in range(draw(st.integers(1, 12))):
        parent = draw(st.sampled_from([()] + [p for p in paths if len(p) < max_depth]))
        used = {p[-1] for p in paths if p[:-1] == parent}
        free = [r for r in range(3) if r not in used]
        if free:
            paths.append(parent + (draw(st.sampled_from(free)),))
    return paths or [(0,)]


@settings(max_examples=10, deadline=None)
@given(paths=trees(), seed=st.integers(0, 2**16))
def test_tree_steps_verify_n_plus_one_and_accept_within_the_tree(paths, seed):
    tree = tree_from_paths(paths)
    n = tree.n_nodes
    traces = tree_traces(5, seed, depth=3, top_k=3, rate=0.7)
    res = run(traces, FixedPolicy("d", tree=[list(p) for p in paths]), top_k=3)
    s = res.steps
    verify = s[s.phase.isin(["verify", "mixed"])]
    dec = verify.proposed_tokens // n  # decoding sequences: each verifies all N nodes (no budget cut)
    assert (verify.proposed_tokens == dec * n).all()
    # N + 1 query tokens per decoding sequence, plus the prompt chunks
    assert (verify.batched_tokens == dec * (n + 1) + verify.prefill_tokens).all()
    assert (verify.accepted_tokens <= dec * tree.depth).all()
    r = res.requests
    assert (r.accepted_tokens <= r.decode_steps * tree.depth).all()
    assert (r.proposed_tokens == r.decode_steps * n).all()
    # each request's accepted drafts, replayed by hand: from position 1 (the prompt step emits token 0) each step
    # accepts the longest prefix of the rank row that is a path, and emits 1 + that, cut at the output's end
    path_set = set(tree.paths)
    by_trace = {t.id: t for t in traces}
    for rid, tid, got in zip(r.request_id, r.trace_id, r.accepted_tokens):
        t = by_trace[tid]
        ranks, pos, total = t.drafters["d"].tree_rank, 1, 0
        while pos < t.output_len:
            row = [int(x) for x in ranks[pos]]
            a = 0
            while a < len(row) and tuple(row[:a + 1]) in path_set:
                a += 1
            total += a
            pos += min(1 + a, t.output_len - pos)
        assert got == total, rid


@settings(max_examples=25, deadline=None)
@given(paths=trees(), seed=st.integers(0, 2**16), cost=st.sampled_from(sorted(COSTS)), v1=st.booleans(),
       seqs=st.integers(1, 8), budget=st.integers(4, 64), clients=st.sampled_from([0, 0, 3]))
def test_random_trees_keep_the_invariants_and_run_alike_in_segments(paths, seed, cost, v1, seqs, budget, clients):
    """The kernel's tree branch (rules/tree.accept_tree over the kept nodes, tree_draft_time per depth) over random
    trees, draft costs, vLLM V1's budget cutting trees, open and closed loops: the engine's invariants hold
    (test_rules_invariants.check_invariants: emitted tokens are the outputs, KV and budget within bounds), no step
    accepts more than the tree's depth per sequence, and the run in segments of 4 step rows equals it in one."""
    from simulator.engine import compiled_run

    traces = tree_traces(6, seed, depth=3, top_k=3, rate=0.7)
    policy = [list(p) for p in paths]
    server = dict(max_num_seqs=seqs, scheduler="vllm-v1", max_num_batched_tokens=budget) if v1 else \
        dict(max_num_seqs=seqs)
    fast = run(traces, FixedPolicy("d", tree=policy), cost=cost, top_k=3, clients=clients, **server)
    check_invariants(fast, [t.output_len for t in traces], budget if v1 else None, v1)
    verify = fast.steps[fast.steps.phase.isin(["verify", "mixed"])]
    assert (verify.accepted_tokens <= verify.num_seqs * max(len(p) for p in paths)).all()
    rows, compiled_run.SEGMENT_ROWS = compiled_run.SEGMENT_ROWS, 4
    try:
        slow = run(traces, FixedPolicy("d", tree=policy), cost=cost, top_k=3, clients=clients, **server)
    finally:
        compiled_run.SEGMENT_ROWS = rows
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    assert fast.itl.tobytes() == slow.itl.tobytes()


class TreeByParity(Policy):
    """A plug-in policy (asked in Python each step) drafting one static tree with drafter "d" at even output
    positions and "e" at odd ones, or always with `only`."""

    name = "tree-by-parity"
    learns = False

    def __init__(self, paths, only=None):
        self.tree, self.only = tree_from_paths([tuple(p) for p in paths]), only

    def choose(self, view):
        return Choice(self.only or ("d" if view.position % 2 == 0 else "e"), self.tree.n_nodes)

    def drafters_used(self):
        return (self.only,) if self.only else ("d", "e")

    def max_draft_tokens(self):
        return self.tree.n_nodes


def run_two(traces, policy, cost="zero", **server):
    wl = workload(traces, rate=40.0)
    server = {"max_num_seqs": 6, "max_num_batched_tokens": 4096, "chunked_prefill": False, **server}
    sc = scenario("sd", policy, costs={"d": COSTS[cost], "e": COSTS[cost]}, **server)
    table = AcceptanceTable.from_traces(traces, ["d", "e"], tree_top_k={"d": 3, "e": 3})
    return ServerSimulation(sc, SimInputs(wl, table, traces)).simulate()


@pytest.mark.parametrize("cost", sorted(COSTS))
def test_a_python_policy_drafting_a_tree_with_two_drafters_is_compiled(cost):
    """A plug-in policy drafting the five-node tree with two drafters runs compiled (each sequence accepted against
    its own drafter's rank rows); asked for one drafter only, it equals the fixed policy's tree over that drafter, a
    different kernel branch (the fixed rule, no Python choice)."""
    traces = tree_traces(8, 5, depth=3, top_k=3, rate=0.8, more={"e": 0.3})
    fast = run_two(traces, TreeByParity(FIVE), cost)
    assert {"d", "e", "d+e"} <= set(fast.steps.drafters)  # steps drafting with either, or both
    for only in ("d", "e"):
        plug, fixed = run_two(traces, TreeByParity(FIVE, only), cost), run_two(traces, FixedPolicy(only, tree=FIVE),
                                                                               cost)
        pd.testing.assert_frame_equal(plug.requests, fixed.requests, check_exact=True)
        assert plug.steps.accepted_tokens.sum() == fixed.steps.accepted_tokens.sum()
    # the high-acceptance drafter's rows accept more per verified tree than the low one's
    d, e = run_two(traces, TreeByParity(FIVE, "d")).steps, run_two(traces, TreeByParity(FIVE, "e")).steps
    assert d.accepted_tokens.sum() / d.proposed_tokens.sum() > e.accepted_tokens.sum() / e.proposed_tokens.sum()


def test_context_grows_by_the_emitted_tokens_only():
    """One request, KV blocks of one token: each verify step's context (kv_tokens) is the last one's plus what it
    emitted (the rejected nodes add nothing), and the KV held after it is that context plus the N node slots."""
    traces = tree_traces(1, 3, depth=2, top_k=2, rate=0.8, out=(30, 31))
    res = run(traces, FixedPolicy("d", tree=FIVE), top_k=2, block_size=1)
    v = res.steps[res.steps.phase == "verify"].reset_index(drop=True)
    assert len(v) >= 5
    assert (v.kv_tokens.diff().iloc[1:].to_numpy() == v.emitted_tokens.iloc[:-1].to_numpy()).all()
    assert (v.kv_blocks_used == v.kv_tokens + 5).all()  # recorded before the last step's finish frees them
    assert (v.batched_tokens == 6).all() and (v.proposed_tokens == 5).all()


def test_hand_worked_step_of_the_five_node_tree():
    """Rows [1, 0], [0, 1], [2, 2] (K = 2, depth 2) at positions 0, 1, 3 of one request: the tree accepts 2, 2,
    0; emitted 3 (0 -> 3), then at 3 one token (-> 4), ... checked on the verify steps' accepted counts."""
    ranks = np.array([[1, 0], [0, 1], [0, 0], [2, 2], [0, 2]], dtype=np.int8)  # position 4: depth 1 past the end
    acc = np.array([3, 3, 3, 1, 2], dtype=np.int32)
    traces = [RequestTrace("t0", 4, 5, {"d": DrafterTrace(acc, tree_rank=ranks)})]
    res = run(traces, FixedPolicy("d", tree=FIVE), top_k=2)
    v = res.steps[res.steps.phase.isin(["verify"])]
    # the prompt step emits token 0 (position 1 next); at 1: row [0, 1] -> (0,), (0, 1): 2 accepted, 3 emitted
    # (positions 1..3, next 4); at 4: row [0, 2] -> (0,) only: 1 accepted, emitted cut to the 1 token left
    assert v.accepted_tokens.tolist() == [2, 1]
    assert v.emitted_tokens.tolist() == [3, 1]


@pytest.mark.parametrize("change, match", [
    (dict(policy=dict(tree=[[0], [0, 0], [0, 0, 0]])), "3 deep but the drafter's tree_rank covers only tree_depth 2"),
    (dict(policy=dict(tree=[[0], [2]])), "uses child rank 2 but the drafter's tree_rank ranks only the top 2"),
    (dict(server=dict(verification="sampled")), "greedy verification only"),
    (dict(no_ranks=True), "carry no tree_rank"),
])
def test_trees_the_traces_cannot_replay_are_refused(change, match):
    traces = tree_traces(2, 0, depth=2, top_k=2)
    if change.get("no_ranks"):
        traces = [RequestTrace(t.id, t.prompt_len, t.output_len, {"d": DrafterTrace(t.drafters["d"].acc_len)})
                  for t in traces]
    policy = FixedPolicy("d", tree=change.get("policy", {}).get("tree", FIVE))
    with pytest.raises(ValueError, match=match):
        run(traces, policy, top_k=2, **change.get("server", {}))


def test_a_tree_outside_sd_mode_is_refused():
    traces = tree_traces(2, 0, depth=2, top_k=2)
    wl = workload(traces, rate=40.0)
    sc = scenario("psd", FixedPolicy("d", tree=FIVE), costs={"d": COSTS["zero"]}, chunked_prefill=False)
    inputs = SimInputs(wl, AcceptanceTable.from_traces(traces, ["d"], tree_top_k={"d": 2}), traces)
    with pytest.raises(ValueError, match="a draft tree runs in mode sd only"):
        ServerSimulation(sc, inputs).simulate()


def test_policy_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"runs\[a\]\.policy: tree: path \[1, 1\] has no parent"):
        make_policy({"name": "fixed", "drafter": "d", "tree": [[0], [1, 1]]}, "runs[a].policy")
    with pytest.raises(ValueError, match="give k .* or tree, not both"):
        make_policy({"name": "fixed", "drafter": "d", "k": 3, "tree": [[0]]})
    with pytest.raises(ValueError, match="give k"):
        make_policy({"name": "fixed", "drafter": "d"})
    with pytest.raises(ValueError, match="more than 64 nodes"):
        make_policy({"name": "fixed", "drafter": "d", "tree": {"widths": [8, 8]}})
    with pytest.raises(ValueError, match="holds only 'widths'"):
        make_policy({"name": "fixed", "drafter": "d", "tree": {"width": [2]}})
    p = make_policy({"name": "fixed", "drafter": "d", "tree": {"widths": [2, 2]}})
    assert p.k == 6 and p.max_draft_tokens() == 6 and p.tree.depth == 2
