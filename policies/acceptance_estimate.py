"""Running per-token acceptance estimate from verified proposals (what a server can count).

A proposal of n tokens with m accepted gives m successes and, if m < n, one failure (the chain
stops there). The estimate is (successes + prior*w) / (successes + failures + w), with both
counts decayed by `decay` per observation so it follows recent behaviour.
"""
from __future__ import annotations

from dataclasses import dataclass


def estimate_value(s: float, f: float, prior: float, weight: float) -> float:
    """(successes + prior * w) / (successes + failures + w): the rule the policy and the compiled engine both run."""
    return (s + prior * weight) / (s + f + weight)


def estimate_update(s: float, f: float, accepted: int, proposed: int, decay: float) -> tuple[float, float]:
    """Successes and failures decayed, plus the accepted drafts and one failure when the chain stopped short;
    nothing for an empty proposal. Returns the new (successes, failures)."""
    if proposed <= 0:
        return s, f
    return decay * s + accepted, decay * f + (1.0 if accepted < proposed else 0.0)


@dataclass
class AcceptanceEstimate:
    """Decayed success/failure counts of one drafter, with a Beta-like prior."""

    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 0.95
    successes: float = 0.0
    failures: float = 0.0

    def update(self, accepted: int, proposed: int) -> None:
        self.successes, self.failures = estimate_update(self.successes, self.failures, accepted, proposed, self.decay)

    @property
    def value(self) -> float:
        return estimate_value(self.successes, self.failures, self.prior, self.prior_weight)


def check_estimate_params(prior: float, prior_weight: float, decay: float, where: str) -> None:
    """Reject a prior outside [0, 1], a weight <= 0 (the estimate divides by it before any feedback), or a
    decay outside (0, 1]."""
    if not 0.0 <= prior <= 1.0:
        raise ValueError(f"{where}: prior must be in [0, 1], got {prior}")
    if not prior_weight > 0:
        raise ValueError(f"{where}: prior_weight must be > 0, got {prior_weight}")
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"{where}: decay must be in (0, 1], got {decay}")
