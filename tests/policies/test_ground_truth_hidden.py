"""Online policies see only views and feedback: no ground truth, traces without tv or proposal_len work."""
import numpy as np
import pytest

from oracle.regret import run_rounds
from policies.base import Feedback, Policy, RequestView
from policies.registry import POLICIES, make_policy, policy_class
from traces.bundle import DrafterTrace, RequestTrace
from traces.pool import PoolSpec, make_pool_bundle, pool_drafters

SPEC = PoolSpec(num_requests=2, output_len=(300, 300), seed=11)
DRAFTERS = pool_drafters(SPEC)


def online_specs(drafters):
    """One spec per registered online policy, on the given drafters."""
    two = list(drafters[:2])
    return {
        "fixed": {"drafter": drafters[0], "k": 3},
        "k-by-batch": {"drafter": drafters[0], "ranges": [{"min_batch": 1, "max_batch": None, "k": 3}]},
        "ucb": {"drafters": list(drafters)},
        "metasd-ucb": {"drafters": list(drafters)},
        "discounted-ucb": {"drafters": list(drafters)},
        "sliding-window-ucb": {"drafters": list(drafters)},
        "exp3": {"drafters": list(drafters)},
        "thompson": {"drafters": list(drafters)},
        "epsilon-greedy": {"drafters": list(drafters)},
        "random-drafter": {"drafters": list(drafters)},
        "adaptive-k": {"drafter": drafters[0]},
        "combine-match": {"ngram": two[0], "eagle": two[1]},
        "combine-adaptive": {"ngram": two[0], "eagle": two[1]},
    }


def test_every_online_policy_is_covered_here():
    online = {n for n in POLICIES if not policy_class(n).reads_ground_truth}
    assert online == set(online_specs(DRAFTERS))


class Recorder(Policy):
    """Wraps a policy and records exactly what it was shown."""

    name = "recorder"

    def __init__(self, inner):
        self.inner, self.log = inner, []

    def start_request(self, rid):
        self.log.append(("start", rid))
        self.inner.start_request(rid)

    def finish_request(self, rid):
        self.log.append(("finish", rid))
        self.inner.finish_request(rid)

    def choose(self, view):
        c = self.inner.choose(view)
        self.log.append(("choose", view, c))
        return c

    def observe(self, fb):
        self.log.append(("observe", fb))
        self.inner.observe(fb)


def with_proposal_len(request):
    """Give the first drafter a server-visible match length, so combine-match has something to read."""
    d0 = DRAFTERS[0]
    t = request.drafters[d0]
    prop = np.where(np.arange(request.output_len) % 3 == 0, 0, 4).astype(np.int32)
    drafters = dict(request.drafters)
    drafters[d0] = DrafterTrace(t.acc_len, t.tv, prop)
    return RequestTrace(request.id, request.prompt_len, request.output_len, drafters, request.category)


@pytest.mark.parametrize("name", sorted(online_specs(DRAFTERS)))
def test_choices_are_a_function_of_views_and_feedback_only(name):
    """Replaying the recorded views and feedback, with no trace at all, reproduces every choice."""
    req = with_proposal_len(make_pool_bundle(SPEC).requests[0])
    spec = {"name": name, **online_specs(DRAFTERS)[name]}
    if "seed" in policy_class(name).__init__.__code__.co_varnames:
        spec["seed"] = 7
    rec = Recorder(make_policy(spec))
    with pytest.raises(TypeError):
        rec.inner.bind_ground_truth({req.id: req})
    run_rounds(rec, req, DRAFTERS, 4, 250, np.random.default_rng(0))
    fresh = make_policy(spec)
    for entry in rec.log:
        if entry[0] == "start":
            fresh.start_request(entry[1])
        elif entry[0] == "finish":
            fresh.finish_request(entry[1])
        elif entry[0] == "choose":
            assert fresh.choose(entry[1]) == entry[2]
        else:
            fresh.observe(entry[1])


def strip(request, tv=False):
    """The request with only acc_len (no tv, no proposal_len): what a bundle from plain greedy logs holds."""
    drafters = {d: DrafterTrace(t.acc_len, t.tv if tv else None, None) for d, t in request.drafters.items()}
    return RequestTrace(request.id, request.prompt_len, request.output_len, drafters, request.category)


@pytest.mark.parametrize("name", ["ucb", "exp3", "thompson", "epsilon-greedy", "adaptive-k", "combine-adaptive"])
def test_be_policies_run_on_a_trace_without_tv_or_proposal_len(name):
    req = strip(make_pool_bundle(SPEC).requests[0])
    pol = make_policy({"name": name, **online_specs(DRAFTERS)[name]})
    res = run_rounds(pol, req, DRAFTERS, 3, 250, np.random.default_rng(0))
    assert res.rounds_to(250) >= 250 / 4


def test_bd_policy_is_refused_on_a_trace_without_tv_with_a_pointer_to_be():
    req = strip(make_pool_bundle(SPEC).requests[0])
    pol = make_policy({"name": "metasd-ucb", "drafters": DRAFTERS})
    with pytest.raises(ValueError, match="use reward: be"):
        run_rounds(pol, req, DRAFTERS, 3, 250, np.random.default_rng(0))
