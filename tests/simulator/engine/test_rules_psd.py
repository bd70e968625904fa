"""PSD's rules (compiled_psd_kernel.run_psd_steps, rules/psd_sides.join_side, split_sides and carry_proposals,
rules/psd_timing.psd_step_time): the side a new request joins, the split into a verified and a drafted side,
the step time max(target, drafter) + sync, and the carry of proposals with the role flip. Target steps cost 1.0 s, the
drafter a constant per step, sync 0.25 s, k = 2, nothing accepted."""
from __future__ import annotations

import numpy as np
import pytest

from policies.base import Choice, Policy
from simulator.costs.draft_cost import DraftCost
from simulator.server_config import PSDConfig
from tests.simulator.engine.rule_cases import Req, col, req, run


def psd_run(reqs, draft_s: float, verification: str = "greedy", **psd):
    return run(reqs, mode="psd", k=2, costs={"d": DraftCost("constant", seconds=draft_s)},
               psd=PSDConfig(sync_s=0.25, **psd), verification=verification)


def step_durations(res) -> list[float]:
    s = res.steps.groupby("step")
    return (s.end.max() - s.start.min()).tolist()


@pytest.mark.parametrize("draft_s, split_min_batch", [(0.5, 0), (1.5, 0), (0.5, 2)])
def test_rule_psd_step_time_is_max_plus_sync(draft_s, split_min_batch):
    # r0 joins side 0, r1 side 1. Step 0: both prefill (1.0, nothing to sync). Steps 1-5: one side verifies (1.0 on
    # the target) while the other drafts (draft_s on the drafter): max(1.0, draft_s) + 0.25. r0 finishes in step 5;
    # step 6 has r1 alone: a fallback step, verifying the proposal it holds (1.0 + 0.25, no drafting).
    # split_min_batch 2 splits the 2 decoding requests all the same (fallback below 2 only)
    res = psd_run([Req(0.0, 4, 4), Req(0.0, 4, 4)], draft_s, split_min_batch=split_min_batch)
    pair = max(1.0, draft_s) + 0.25
    assert step_durations(res) == pytest.approx([1.0] + [pair] * 5 + [1.25], rel=1e-12)
    assert req(res, "sub_batch") == [0, 1]
    assert req(res, "finish_time") == pytest.approx([1.0 + 5 * pair, 2.25 + 5 * pair], rel=1e-12)
    # step 1 verifies r0 with no proposal yet (a plain token); from step 2 each verify carries the 2 drafted before
    assert col(res, "proposed_tokens", phase="verify") == [0, 2, 2, 2, 2, 2]
    assert col(res, "proposed_tokens", phase="draft", device="drafter") == [2, 2, 2, 2, 2]
    assert res.extras["psd_fallback_steps"] == 1


def test_rule_psd_defer_kv_reserves_the_drafted_sides_proposal_when_drafted():
    """MineDraft's defer_kv: the drafted side's request grows its KV to its context plus its proposal in the step that
    drafts it (the verify side then appends none); without it, only when the proposal is verified. The case above,
    blocks of one token, nothing accepted: a request drafted for the first time holds just its context (after its
    prefill or a plain token), so defer_kv adds 2 blocks then (steps 1 and 2: r1, then r0); drafted again, it still
    holds its last verify's context + 2 drafts = its context now + 1 (one token emitted), so defer_kv adds 1 (steps
    3-5). The prefill step and the last (a fallback step: r1 alone, nothing drafted) are the same."""
    kw = dict(mode="psd", k=2, costs={"d": DraftCost("constant", seconds=0.5)}, block_size=1)
    used = [col(run([Req(0.0, 4, 4), Req(0.0, 4, 4)], psd=PSDConfig(sync_s=0.25, defer_kv=defer), **kw),
                "kv_blocks_used") for defer in (True, False)]
    assert np.subtract(*used).tolist() == [0, 2, 2, 1, 1, 1, 0]


def test_rule_psd_side_assignment():
    # at t=0 four requests alternate sides 0, 1, 0, 1 (join the side verified now, drafted next, unless it has more)
    res = psd_run([Req(0.0, 4, 3)] * 4, 0.5)
    assert req(res, "sub_batch") == [0, 1, 0, 1]


def test_rule_psd_new_request_joins_side_drafted_next():
    # r2 arrives at 1.5; step 2 (from 2.25) verifies side 1, so side 1 is drafted next: with the sides even (1, 1)
    # r2 joins side 1
    res = psd_run([Req(0.0, 4, 6), Req(0.0, 4, 6), Req(1.5, 4, 3)], 0.5)
    assert req(res, "sub_batch") == [0, 1, 1]
    assert req(res, "first_scheduled_time") == [0.0, 0.0, 2.25]


def test_rule_psd_split_min_batch_fallback():
    # split_min_batch 3 with 2 decoding: every step is plain SD: drafts for both first (0.5, charged once), then the
    # verify (1.0), then the sync: 1.75; output 4 = prefill + 3 steps
    res = psd_run([Req(0.0, 4, 4), Req(0.0, 4, 4)], 0.5, split_min_batch=3)
    assert step_durations(res) == pytest.approx([1.0, 1.75, 1.75, 1.75], rel=1e-12)
    assert col(res, "proposed_tokens", phase="verify") == [4, 4, 4]
    assert res.extras["psd_fallback_steps"] == 3
    assert req(res, "finish_time") == pytest.approx([6.25, 6.25], rel=1e-12)



class AskedLog(Policy):
    """Drafts k = 2 with "d" for every request it is asked about, logging (now, the request ids asked) per step."""

    name = "asked-log"
    learns = False

    def __init__(self):
        self.log = []

    def drafters_used(self):
        return ("d",)

    def max_draft_tokens(self):
        return 2

    def choose_batch(self, view):
        self.log.append((view.now, list(view.request_ids)))
        return np.zeros(view.batch_size, np.int64), np.full(view.batch_size, 2, np.int64)


def test_rule_psd_asks_the_policy_about_the_drafted_side_in_admission_order():
    # r0, r1, r2 (output 4) join sides 0, 1, 0; r3 (output 2) arrives at 1.0 and joins side 1. Step 0 prefills r0-r2
    # (1.0). Step 1 (from 1.0): r3 prefills, side 0 verifies without proposals, side 1's decoding r1 is drafted:
    # asked [r1]; max(1.0, 0.5) + 0.25 = 1.25. Step 2 (2.25) verifies side 1 and drafts side 0: [r0, r2], in
    # admission order; r3 finishes at 3.5. Steps 3-5 alternate ([r1] at 3.5, [r0, r2] at 4.75, [r1] at 6.0); r0, r2
    # finish at 7.25, and step 6 verifies r1 alone (a fallback) on the proposal it holds, asking nobody
    pol = AskedLog()
    res = run([Req(0.0, 4, 4)] * 3 + [Req(1.0, 4, 2)], mode="psd", policy=pol,
              costs={"d": DraftCost("constant", seconds=0.5)}, psd=PSDConfig(sync_s=0.25))
    assert pol.log == [(1.0, ["r1"]), (2.25, ["r0", "r2"]), (3.5, ["r1"]), (4.75, ["r0", "r2"]), (6.0, ["r1"])]
    assert req(res, "sub_batch") == [0, 1, 0, 1] and req(res, "finish_time") == [7.25, 8.5, 7.25, 3.5]
    assert res.extras["psd_fallback_steps"] == 1
    # below split_min_batch every decode step is plain SD for all: each step asks about every decoding request, in
    # admission order (the verify side is all of them, none holding a proposal; no side is drafted apart)
    pol = AskedLog()
    res = run([Req(0.0, 4, 4)] * 3, mode="psd", policy=pol,
              costs={"d": DraftCost("constant", seconds=0.5)}, psd=PSDConfig(sync_s=0.25, split_min_batch=4))
    assert [ids for _, ids in pol.log] == [["r0", "r1", "r2"]] * 3 and res.extras["psd_fallback_steps"] == 3


@pytest.mark.parametrize("tv, acc, accepted", [(0.0, 1, [4, 4]), (1.0, 3, [0, 0])])
def test_rule_psd_sampled_verification_keeps_drafts_by_tv_not_by_the_greedy_trace(tv, acc, accepted):
    # two requests (output 7: the prefill makes token 0), k = 2, sampled verification: a kept draft is accepted while
    # u < 1 - tv. With tv 0 every draft is accepted although the greedy trace accepts none (acc_len 1): r0 (side 0)
    # verifies plainly in step 1 (token 1), then 3 tokens (2-4) and 2 (5, 6: the output's end cuts its third; its
    # 2 accepted drafts count), 3 decode steps; r1 (side 1) is drafted in step 1, so both its verifies carry a
    # proposal: 3 + 3. 4 accepted each. With tv 1 none is, although the greedy trace would accept both (acc_len 3):
    # 6 verifies of 1 token each
    reqs = [Req(0.0, 4, 7, acc={"d": [acc] * 7}, tv={"d": [tv] * 7})] * 2
    res = psd_run(reqs, 0.5, verification="sampled")
    assert req(res, "accepted_tokens") == accepted
    assert req(res, "decode_steps") == ([3, 2] if tv == 0.0 else [6, 6])


class TwoDrafters(Policy):
    """Drafts k = 2 with "d" at even output positions and "g" at odd ones, asked in Python each step."""

    name = "two-drafters"
    learns = False

    def drafters_used(self):
        return ("d", "g")

    def max_draft_tokens(self):
        return 2

    def choose(self, view):
        return Choice("d" if view.position % 2 == 0 else "g", 2)


def test_rule_psd_sampled_verification_checks_every_drafters_proposals():
    # test_rule_psd_sampled_verification_keeps_drafts_by_tv_not_by_the_greedy_trace's tv-0 case with two drafters,
    # d at even output positions and g at odd ones (the greedy traces of both accept nothing): each verify with a
    # proposal emits 3 whichever drafter made it, so the requests take the same steps and accept as many drafts as
    # with one drafter, 4 each; both drafters drafted
    reqs = [Req(0.0, 4, 7, acc={"d": [1] * 7, "g": [1] * 7}, tv={"d": [0.0] * 7, "g": [0.0] * 7})] * 2
    res = run(reqs, mode="psd", policy=TwoDrafters(), drafters=("d", "g"),
              costs={d: DraftCost("constant", seconds=0.5) for d in ("d", "g")}, psd=PSDConfig(sync_s=0.25),
              verification="sampled")
    assert req(res, "accepted_tokens") == [4, 4] and req(res, "decode_steps") == [3, 2]
    drafted = res.steps[(res.steps.phase == "draft") & (res.steps.device == "drafter")].drafters
    assert {"d", "g"} <= set("+".join(drafted).split("+"))


def test_rule_psd_a_step_whose_verify_side_was_preempted_costs_the_target_nothing():
    """KV too small for both requests at their largest (blocks of one token): when growth does not fit, the newest
    request is preempted; where it is the verified side's only member, the step verifies nobody and admits nobody (a
    step that preempted admits nobody), so the target runs nothing: the step lasts the drafter's 0.5 s drafting of the
    other side plus the 0.25 s sync, not the target's 1.0 s. Swept over the KV sizes between one request's need and
    both's, every such step checked."""
    checked = 0
    for kv in range(15, 26):  # one request needs 4 + 8 - 1 + 2 drafts = 13 slots; both at their largest 26
        res = run([Req(0.0, 4, 8), Req(0.0, 4, 8)], mode="psd", k=2, costs={"d": DraftCost("constant", seconds=0.5)},
                  psd=PSDConfig(sync_s=0.25), block_size=1, kv_tokens=kv)
        s = res.steps
        for _, rows in s.groupby("step"):
            target = rows[rows.device == "target"]
            if (target.phase == "sync").all() and (rows.phase == "draft").any():
                assert rows.end.max() - rows.start.min() == pytest.approx(0.75, rel=1e-12)
                checked += 1
    assert checked > 0
