"""Bandits' batch path (choose_batch / observe_batch over a step) against the per-request path, bit for bit."""
import numpy as np
from hypothesis import given, settings, strategies as st

from policies.base import NO_DRAFT, BatchFeedback, BatchView, Policy
from policies.registry import make_policy

DRAFTERS = ("eagle3", "ngram", "other")  # the view's drafters; the policy's arms are a subset
SPECS = [
    {"name": "ucb"}, {"name": "ucb", "beta": 0.3}, {"name": "metasd-ucb"}, {"name": "metasd-ucb", "reward": "be"},
    {"name": "discounted-ucb", "gamma": 0.9}, {"name": "discounted-ucb", "reward": "be"},
    {"name": "sliding-window-ucb", "window": 4}, {"name": "sliding-window-ucb", "window": 3, "reward": "be"},
    {"name": "thompson"}, {"name": "epsilon-greedy", "epsilon": 0.3}, {"name": "exp3", "gamma": 0.2},
    {"name": "random-drafter"},
]


def _state_bytes(pol) -> dict:
    out = {}
    for key, s in pol._states.items():
        if s is None:
            out[key] = None
            continue
        out[key] = {f: (v.tobytes() if isinstance(v, np.ndarray) else repr(v))
                    for f, v in vars(s).items()}
    return out


@settings(max_examples=60, deadline=None)
@given(spec=st.sampled_from(SPECS), scope=st.sampled_from(["request", "shared"]),
       arms=st.sampled_from([("eagle3", "ngram"), ("ngram", "eagle3", "other"), ("other",)]),
       seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 25))
def test_batch_path_equals_per_request_path(spec, scope, arms, seed, steps):
    rng = np.random.default_rng(seed)
    cfg = {**spec, "drafters": list(arms), "k": 3, "seed": seed % 1000}
    if spec["name"] != "random-drafter":
        cfg["scope"] = scope
    fast, ref = make_policy(cfg), make_policy(cfg)
    started: set[str] = set()
    for step in range(steps):
        ids = [f"r{i}" for i in rng.choice(12, size=int(rng.integers(0, 9)), replace=False)]
        for r in ids:
            if r not in started:
                started.add(r)
                fast.start_request(r)
                ref.start_request(r)
        pos = rng.integers(0, 50, size=len(ids))
        view = BatchView(now=0.1 * step, drafters=DRAFTERS, request_ids=ids, positions=pos,
                         categories=[None] * len(ids))
        d_fast, k_fast = fast.choose_batch(view)
        d_ref, k_ref = Policy.choose_batch(ref, view)
        assert np.array_equal(d_fast, d_ref) and np.array_equal(k_fast, k_ref)
        d = d_ref.copy()
        d[rng.random(len(ids)) < 0.2] = NO_DRAFT  # some requests decode plainly
        proposed = np.where(d == NO_DRAFT, 0, rng.integers(0, 4, size=len(ids)))
        accepted = np.array([rng.integers(0, p + 1) for p in proposed], dtype=np.int64)
        tv = [rng.random(int(p)) if p > 0 else None for p in proposed]
        fb = BatchFeedback(drafters=DRAFTERS, request_ids=ids, positions=pos, drafter_idx=d, k=k_ref,
                           proposed=proposed, accepted=accepted, tv=tv, step_time=0.01)
        fast.observe_batch(fb)
        Policy.observe_batch(ref, fb)
        assert _state_bytes(fast) == _state_bytes(ref)
        for r in ids:
            if rng.random() < 0.2:
                started.discard(r)
                fast.finish_request(r)
                ref.finish_request(r)
    assert fast.rng.bit_generator.state == ref.rng.bit_generator.state  # the same draws, in the same order


def test_batch_path_refuses_feedback_for_a_drafter_it_does_not_play():
    pol = make_policy({"name": "ucb", "drafters": ["eagle3"], "k": 3})
    fb = BatchFeedback(drafters=DRAFTERS, request_ids=["a"], positions=np.zeros(1, dtype=np.int64),
                       drafter_idx=np.array([1]), k=np.array([3]), proposed=np.array([3]), accepted=np.array([1]))
    try:
        pol.observe_batch(fb)
    except ValueError as e:
        assert "'ngram'" in str(e) and "eagle3" in str(e)
    else:
        raise AssertionError("feedback for an arm the policy does not have was accepted")


def test_a_subclass_that_redefines_select_or_update_keeps_its_own_rule():
    """The built-in rule stands only for a class that keeps it: a plug-in's _select / _update runs."""
    from policies.ucb import UCBPolicy

    class Greedy(UCBPolicy):
        name = "greedy-test"

        def _select(self, state):
            return int(np.argmax(state.second))  # the best reward sum, no exploration bonus

        def _update(self, state, arm, reward):
            state.first[arm] += 2.0
            state.second[arm] += 10 * reward

    fast, ref = Greedy(["eagle3", "ngram"]), Greedy(["eagle3", "ngram"])
    ids = ["a", "b", "c"]
    for step in range(6):
        pos = np.zeros(3, dtype=np.int64)
        view = BatchView(now=0.0, drafters=DRAFTERS, request_ids=ids, positions=pos, categories=[None] * 3)
        d, k = fast.choose_batch(view)
        assert np.array_equal(d, Policy.choose_batch(ref, view)[0])
        fb = BatchFeedback(drafters=DRAFTERS, request_ids=ids, positions=pos, drafter_idx=d, k=k,
                           proposed=np.full(3, 3), accepted=np.array([step % 4, 1, 3]))
        fast.observe_batch(fb)
        Policy.observe_batch(ref, fb)
    assert _state_bytes(fast) == _state_bytes(ref)
    assert all(float(s.first.sum()) == 12.0 for s in fast._states.values())  # its own update: 2 per round
