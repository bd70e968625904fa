"""Adaptive k: from the running acceptance estimate and this batch's step costs, maximise tokens per second.

For each k in 0..k_max the expected tokens of one step are Leviathan's (1 - a^(k+1)) / (1 - a), summed as
1 + a + ... + a^k (`best_k_rule`, which the compiled engine runs too), and its time is `view.step_time_estimate(drafter, k)` (the whole batch's step time if every request
drafted k); the policy takes the k with the most expected tokens per unit time. Without an
estimate (plain loop) the time is 1 + draft_cost_ratio * k target steps.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from policies.acceptance_estimate import AcceptanceEstimate, check_estimate_params
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

    def best_k(self, a: float, times: np.ndarray, cap: int | None) -> int:
        """argmax over k <= cap of the expected tokens per second (`best_k_rule`)."""
        top = self.k_max if cap is None else top_k_rule(self.k_max, int(cap))
        return best_k_rule(float(a), np.asarray(times, dtype=np.float64), top)

    def choose(self, view: RequestView) -> Choice:
        times = self.step_times(view.step_time_estimate)
        k = self.best_k(self._estimate(view.request_id).value, times, view.proposal_len.get(self.drafter))
        return Choice(self.drafter if k > 0 else None, k)

    def choose_batch(self, view: BatchView) -> tuple[np.ndarray, np.ndarray]:
        n = view.batch_size
        if self.drafter not in view.drafters:
            raise ValueError(f"policy {self.name!r}: drafter {self.drafter!r} is not in the trace's drafters "
                             f"{list(view.drafters)}")
        times = self.step_times(view.step_time_estimate)  # once per step: the same for every request
        caps = view.proposal_len.get(self.drafter)
        ks = np.array([self.best_k(self._estimate(view.request_ids[i]).value, times,
                                   None if caps is None else int(caps[i])) for i in range(n)], dtype=np.int64)
        d = np.where(ks > 0, view.drafters.index(self.drafter), NO_DRAFT).astype(np.int64)
        return d, ks

    def observe(self, feedback: Feedback) -> None:
        if feedback.drafter == self.drafter:
            self._estimate(feedback.request_id).update(feedback.accepted, feedback.proposed)
