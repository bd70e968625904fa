"""EXP3 over drafters: exponential weights with importance-weighted rewards (adversarial bandit); its rules are
policies/bandit_rules.py's (exp3_probabilities, exp3_arm, exp3_update)."""
from __future__ import annotations

from typing import Sequence

from policies.bandit import BanditPolicy
from policies.bandit_rules import B_EXP3, BanditRule


class EXP3Policy(BanditPolicy):
    """EXP3 (Auer et al. 2002): sample from mixed exponential weights; update with reward / probability. Its state's
    second array holds the log weights."""

    name = "exp3"
    description = "EXP3 over drafters (exponential weights, exploration gamma); BE reward by default."

    def __init__(self, drafters: Sequence[str], k: int = 3, gamma: float = 0.1, reward: str | None = None,
                 scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, reward=reward, scope=scope, seed=seed)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"policy {self.name!r}: gamma must be in (0, 1], got {gamma}")
        self.gamma = float(gamma)
        self.rule = BanditRule(B_EXP3, exp3_gamma=self.gamma)
