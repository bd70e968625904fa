"""Plain-loop bandit rounds over one request (no SimPy), stopping-time regret and best-arm ratio.

`run_rounds` plays a policy on a single request at batch size 1, with the engine's conventions
(prefill emits token 0; a round at position p drafts output tokens p, p+1, ...): each round the policy picks a
drafter and k from a RequestView, the proposal is verified (a seeded Bernoulli(1 - tv) draw per
drafted token when sampled, the greedy acc_len replay otherwise), and the policy sees only the
Feedback. Every round follows the replay rule of `traces.acceptance` (k is never cut to the budget; the
output's end cuts the emitted count). Stopping-time regret (MetaSD): E[rounds to emit B tokens] of the policy minus that of
the best fixed drafter; here both expectations are Monte-Carlo means over the same seeds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from policies.base import Feedback, Policy, RequestView
from traces.acceptance import (FIRST_DRAFT_POSITION, accepted_drafts, emitted_in_output, emitted_tokens,
                               proposed_tokens)
from traces.bundle import RequestTrace
from traces.sampled_acceptance import sample_accepted, tv_windows

NONE_ARM = -1


@dataclass
class RoundsResult:
    """Per-round record of one plain-loop run."""

    drafters: tuple[str, ...]
    arms: np.ndarray  # index into drafters, NONE_ARM for a plain decode round
    positions: np.ndarray  # position drafting started from
    proposed: np.ndarray
    accepted: np.ndarray
    emitted: np.ndarray
    reward_be: np.ndarray  # accepted / proposed (0 when nothing proposed)
    reward_bd: np.ndarray  # mean(1 - tv) over proposed positions; NaN without tv or proposal

    @property
    def rounds(self) -> int:
        return int(self.arms.shape[0])

    def rounds_to(self, budget: int) -> int:
        """Decode rounds until `budget` output tokens exist, counting the prefill's first token (stopping time)."""
        cum = 1 + np.cumsum(self.emitted)
        if budget <= 1:
            return 0
        if budget > cum[-1]:
            raise ValueError(f"this run produced only {int(cum[-1])} tokens, fewer than the budget {budget}")
        return int(np.searchsorted(cum, budget) + 1)


def run_rounds(policy: Policy, request_trace: RequestTrace, drafters: Sequence[str], k: int, budget_tokens: int,
               rng: np.random.Generator, *, sampled: bool | None = None) -> RoundsResult:
    """Play `policy` on one request until `budget_tokens` output tokens exist; k caps each proposal.

    `sampled` (default: every drafter has tv) draws acceptance from tv; otherwise greedy replay of acc_len.
    """
    drafters = tuple(drafters)
    missing = [d for d in drafters if d not in request_trace.drafters]
    if missing:
        raise ValueError(f"request {request_trace.id!r} has no trace for drafter(s) {missing}")
    if not 1 <= budget_tokens <= request_trace.output_len:
        raise ValueError(f"budget_tokens must be in [1, {request_trace.output_len}] (the request's output_len), "
                         f"got {budget_tokens}")
    has_tv = all(request_trace.drafters[d].tv is not None for d in drafters)
    if sampled is None:
        sampled = has_tv
    if sampled and not has_tv:
        raise ValueError(f"sampled verification needs tv for every drafter; request {request_trace.id!r} lacks it")
    index = {d: i for i, d in enumerate(drafters)}
    rid = request_trace.id
    cols: dict[str, list] = {c: [] for c in ("arms", "positions", "proposed", "accepted", "emitted", "be", "bd")}
    policy.start_request(rid)
    p = FIRST_DRAFT_POSITION  # the prefill emitted token 0; tokens 0..p-1 exist
    while p < budget_tokens:
        proposal = {d: int(t.proposal_len[p]) for d, t in request_trace.drafters.items()
                    if d in index and t.proposal_len is not None}
        view = RequestView(request_id=rid, position=p, batch_size=1, category=request_trace.category,
                           proposal_len=proposal)
        choice = policy.choose(view)
        d = choice.drafter if choice.k > 0 else None
        if d is not None and d not in index:
            raise ValueError(f"policy {policy.name!r} chose drafter {d!r}, not one of {list(drafters)}")
        kk = 0 if d is None else proposed_tokens(max(0, min(int(choice.k), int(k))), proposal.get(d))
        tv = None
        accepted = 0
        if d is not None and kk > 0:
            t = request_trace.drafters[d]
            if sampled:
                accepted = int(sample_accepted(tv_windows(t.tv, np.array([p]), kk), np.array([kk]), rng)[0])
            else:
                accepted = accepted_drafts(int(t.acc_len[p]), kk)
            if t.tv is not None:
                tv = tuple(float(x) for x in t.tv[p:p + kk])
        emitted = emitted_in_output(accepted, p, request_trace.output_len)
        policy.observe(Feedback(request_id=rid, position=p, drafter=d, k=int(choice.k), proposed=kk,
                                accepted=accepted, tv=tv, batch_size=1))
        cols["arms"].append(NONE_ARM if d is None else index[d])
        cols["positions"].append(p)
        cols["proposed"].append(kk)
        cols["accepted"].append(accepted)
        cols["emitted"].append(emitted)
        cols["be"].append(accepted / kk if kk else 0.0)
        cols["bd"].append(float(np.mean([1.0 - x for x in tv])) if tv else np.nan)
        p += emitted
    policy.finish_request(rid)
    as_int = lambda c: np.asarray(cols[c], dtype=np.int64)  # noqa: E731
    return RoundsResult(drafters, as_int("arms"), as_int("positions"), as_int("proposed"), as_int("accepted"),
                        as_int("emitted"), np.asarray(cols["be"], float), np.asarray(cols["bd"], float))


@dataclass
class RegretCurve:
    """Mean rounds to each budget for a policy and every fixed drafter, over the same seeds."""

    budgets: np.ndarray
    policy_rounds: np.ndarray  # mean over seeds, per budget
    fixed_rounds: dict[str, np.ndarray]  # drafter -> mean over seeds, per budget
    best_arm_ratio: np.ndarray  # per round t: mean over seeds of the share of rounds <= t on the best arm

    @property
    def best_fixed(self) -> str:
        """The fixed drafter with the fewest mean rounds at the largest budget."""
        return min(self.fixed_rounds, key=lambda d: self.fixed_rounds[d][-1])

    @property
    def regret(self) -> np.ndarray:
        """Stopping-time regret per budget: policy rounds minus the best fixed drafter's (per budget)."""
        best = np.min(np.stack(list(self.fixed_rounds.values())), axis=0)
        return self.policy_rounds - best


def best_arm_by_position(request_trace: RequestTrace, drafters: Sequence[str], k: int,
                         segments: Sequence[tuple[int, str]] | None = None) -> np.ndarray:
    """Index of the best drafter for each position: most expected tokens per round within its segment.

    Uses tv when every drafter has it (expected tokens under sampled verification), else greedy acc_len.
    """
    from oracle.hindsight import expected_emitted  # local: hindsight imports nothing from here

    n = request_trace.output_len
    segs = list(segments) if segments else [(0, "")]
    starts = [s for s, _ in segs] + [n]
    use_tv = all(request_trace.drafters[d].tv is not None for d in drafters)
    per_pos = np.stack([expected_emitted(request_trace.drafters[d], k) if use_tv
                        else np.asarray(emitted_tokens(request_trace.drafters[d].acc_len, k), dtype=float)
                        for d in drafters])
    best = np.empty(n, dtype=np.int64)
    for (s, _), e in zip(segs, starts[1:]):
        best[s:e] = int(np.argmax(per_pos[:, s:e].mean(axis=1)))
    return best


def regret_curve(make_policy: Callable[[int], Policy], request_trace: RequestTrace, drafters: Sequence[str],
                 k: int, budgets: Sequence[int], seeds: Sequence[int], *, sampled: bool | None = None,
                 segments: Sequence[tuple[int, str]] | None = None,
                 make_fixed: Callable[[str], Policy] | None = None) -> RegretCurve:
    """Regret of the policy built by `make_policy(seed)` vs each fixed drafter, same verification seeds."""
    from policies.base import FixedPolicy

    make_fixed = make_fixed or (lambda d: FixedPolicy(d, k))
    budgets = np.asarray(sorted(budgets), dtype=np.int64)
    top = int(budgets[-1])
    best = best_arm_by_position(request_trace, drafters, k, segments)
    pol, ratios = [], []
    fixed = {d: [] for d in drafters}
    for seed in seeds:
        res = run_rounds(make_policy(seed), request_trace, drafters, k, top, np.random.default_rng(seed),
                         sampled=sampled)
        pol.append([res.rounds_to(b) for b in budgets])
        hit = (res.arms == best[res.positions]).astype(float)
        ratios.append(np.cumsum(hit) / np.arange(1, hit.shape[0] + 1))
        for d in drafters:
            r = run_rounds(make_fixed(d), request_trace, drafters, k, top, np.random.default_rng(seed),
                           sampled=sampled)
            fixed[d].append([r.rounds_to(b) for b in budgets])
    span = min(len(r) for r in ratios)
    return RegretCurve(budgets, np.mean(pol, axis=0), {d: np.mean(v, axis=0) for d, v in fixed.items()},
                       np.mean([r[:span] for r in ratios], axis=0))
