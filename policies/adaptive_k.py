"""Adaptive k: from the running acceptance estimate and this batch's step costs, maximise tokens per second.

For each k in 0..k_max the expected tokens of one step are Leviathan's (1 - a^(k+1)) / (1 - a), summed as
1 + a + ... + a^k (`best_k_rule`), and its time is `view.step_time_estimate(drafter, k)` (the whole batch's step
time if every request drafted k); the policy takes the k with the most expected tokens per unit time. Without an
estimate (plain loop) the time is 1 + draft_cost_ratio * k target steps. The rules (`adaptive_ks` and those it calls)
are plain Python over arrays, which the compiled engine compiles: one implementation.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from policies.acceptance_estimate import AcceptanceEstimate, check_estimate_params, estimate_value
from policies.base import NO_DRAFT, BatchView, Choice, Feedback, Policy, RequestView
from policies.bandit import SCOPES

_SHARED = "\x00shared"


def best_k_rule(a: float, times: np.ndarray, top: int) -> int:
    """argmax over k <= top of (1 + a + ... + a^k) / times[k], the first on ties: Leviathan's expected tokens per
    second. Plain Python over an array, so the policy calls it in Python and the kernels compile it (one rule)."""
    best = 0
    best_r = 1.0 / times[0]
    term = 1.0
    expected = 1.0
    for k in range(1, top + 1):
        term *= a
        expected += term
        r = expected / times[k]
        if r > best_r:
            best, best_r = k, r
    return best


def top_k_rule(k_max: int, match: int) -> int:
    """The largest k adaptive-k weighs for a request whose n-gram match is `match` tokens long: k_max, or the match
    length where it is shorter (never below 0). Plain Python, compiled by the engine too (one rule)."""
    return max(0, min(k_max, match))


def adaptive_ks(rows, n, est_s, est_f, shared, prior, weight, times, k_max, has_cap, cap, pos, ks):
    """A step's k for each of its `n` requests: request j reads the acceptance estimate (successes, failures) in row
    rows[j] of est_s and est_f (row 0 for all when `shared`) and weighs k up to k_max, or up to its match length
    cap[pos[j]] when `has_cap` (top_k_rule); its k has the most expected tokens per second at the step's times[k]
    (best_k_rule), into ks[j]. Plain Python over arrays: the policy calls it, the kernels compile it."""
    for j in range(n):
        e = 0 if shared else rows[j]
        top = top_k_rule(k_max, cap[pos[j]]) if has_cap else k_max
        ks[j] = best_k_rule(estimate_value(est_s[e], est_f[e], prior, weight), times, top)


class AdaptiveKPolicy(Policy):
    """One drafter; k re-chosen every step from the acceptance estimate and the step-time estimate."""

    name = "adaptive-k"
    description = "One drafter; k maximising Leviathan expected tokens / estimated step time, from running acceptance."

    def __init__(self, drafter: str, k_max: int = 8, prior: float = 0.6, prior_weight: float = 2.0,
                 decay: float = 0.95, draft_cost_ratio: float = 0.1, scope: str = "request"):
        where = f"policy {self.name!r}"
        check_estimate_params(prior, prior_weight, decay, where)
        if int(k_max) < 1:
            raise ValueError(f"{where}: k_max must be >= 1, got {k_max}")
        if scope not in SCOPES:
            raise ValueError(f"{where}: scope must be one of {SCOPES}, got {scope!r}")
        if draft_cost_ratio < 0:
            raise ValueError(f"{where}: draft_cost_ratio must be >= 0, got {draft_cost_ratio}")
        self.drafter = str(drafter)
        self.k_max = int(k_max)
        self.prior, self.prior_weight, self.decay = float(prior), float(prior_weight), float(decay)
        self.draft_cost_ratio = float(draft_cost_ratio)
        self.scope = scope
        self._est: dict[str, AcceptanceEstimate] = {}

    def estimate(self, request_id: str) -> AcceptanceEstimate:
        """The acceptance estimate a request's choices read (the shared one in shared scope); made on first use."""
        return self._estimate(request_id)

    def _estimate(self, request_id: str) -> AcceptanceEstimate:
        key = request_id if self.scope == "request" else _SHARED
        est = self._est.get(key)
        if est is None:
            est = self._est[key] = AcceptanceEstimate(self.prior, self.prior_weight, self.decay)
        return est

    def start_request(self, request_id: str) -> None:
        if self.scope == "request":
            self._est[request_id] = AcceptanceEstimate(self.prior, self.prior_weight, self.decay)

    def finish_request(self, request_id: str) -> None:
        if self.scope == "request":
            self._est.pop(request_id, None)

    def drafters_used(self) -> tuple[str, ...]:
        return (self.drafter,)

    def max_draft_tokens(self) -> int:
        return self.k_max

    def step_times(self, estimate: Callable[[str | None, int], float] | None) -> np.ndarray:
        """Time of a step at each k = 0..k_max (k = 0: plain decode)."""
        ks = np.arange(self.k_max + 1)
        if estimate is None:
            return 1.0 + self.draft_cost_ratio * ks
        return np.array([estimate(None, 0)] + [estimate(self.drafter, int(k)) for k in ks[1:]], dtype=float)

    def ks(self, request_ids, times: np.ndarray, caps) -> np.ndarray:
        """Each request's k at the step's times (k = 0..k_max), up to its match length caps[j] where caps is given
        (`adaptive_ks`)."""
        n = len(request_ids)
        ests = [self._estimate(r) for r in request_ids]
        est_s = np.array([e.successes for e in ests], dtype=np.float64)
        est_f = np.array([e.failures for e in ests], dtype=np.float64)
        cap = np.zeros(1, dtype=np.int64) if caps is None else np.asarray(caps, dtype=np.int64).reshape(-1)
        ks = np.zeros(n, dtype=np.int64)
        adaptive_ks(np.arange(n), n, est_s, est_f, False, self.prior, self.prior_weight,
                    np.asarray(times, dtype=np.float64), self.k_max, caps is not None, cap, np.arange(n), ks)
        return ks

    def choose(self, view: RequestView) -> Choice:
        k = int(self.ks([view.request_id], self.step_times(view.step_time_estimate),
                        view.proposal_len.get(self.drafter))[0])
        return Choice(self.drafter if k > 0 else None, k)

    def choose_batch(self, view: BatchView) -> tuple[np.ndarray, np.ndarray]:
        if self.drafter not in view.drafters:
            raise ValueError(f"policy {self.name!r}: drafter {self.drafter!r} is not in the trace's drafters "
                             f"{list(view.drafters)}")
        times = self.step_times(view.step_time_estimate)  # once per step: the same for every request
        ks = self.ks(view.request_ids, times, view.proposal_len.get(self.drafter))
        d = np.where(ks > 0, view.drafters.index(self.drafter), NO_DRAFT).astype(np.int64)
        return d, ks

    def observe(self, feedback: Feedback) -> None:
        if feedback.drafter == self.drafter:
            self._estimate(feedback.request_id).update(feedback.accepted, feedback.proposed)
