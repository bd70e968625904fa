"""Running per-token acceptance estimate from verified proposals (what a server can count).

A proposal of n tokens with m accepted gives m successes and, if m < n, one failure (the chain
stops there). The estimate is (successes + prior*w) / (successes + failures + w), with both
counts decayed by `decay` per observation so it follows recent behaviour.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AcceptanceEstimate:
    """Decayed success/failure counts of one drafter, with a Beta-like prior."""

    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 0.95
    successes: float = 0.0
    failures: float = 0.0

    def update(self, accepted: int, proposed: int) -> None:
        if proposed <= 0:
            return
        self.successes = self.decay * self.successes + accepted
        self.failures = self.decay * self.failures + (1.0 if accepted < proposed else 0.0)

    @property
    def value(self) -> float:
        s, f, w = self.successes, self.failures, self.prior_weight
        return (s + self.prior * w) / (s + f + w)


def check_estimate_params(prior: float, prior_weight: float, decay: float, where: str) -> None:
    """Reject a prior outside [0, 1], a weight <= 0 (the estimate divides by it before any feedback), or a
    decay outside (0, 1]."""
    if not 0.0 <= prior <= 1.0:
        raise ValueError(f"{where}: prior must be in [0, 1], got {prior}")
    if not prior_weight > 0:
        raise ValueError(f"{where}: prior_weight must be > 0, got {prior_weight}")
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"{where}: decay must be in (0, 1], got {decay}")
