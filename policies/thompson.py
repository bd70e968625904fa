"""Thompson sampling over drafters with Beta posteriors (fractional rewards update alpha and beta); its rules are
policies/bandit_rules.py's (thompson_arm, thompson_update)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from policies.bandit import BanditPolicy
from policies.bandit_rules import B_THOMPSON, BanditRule, BanditState


class ThompsonPolicy(BanditPolicy):
    """Sample a mean from each arm's Beta(alpha, beta) and play the largest; reward r adds r and 1 - r."""

    name = "thompson"
    description = "Thompson sampling over drafters (Beta posterior per arm); BE reward by default."
    rule = BanditRule(B_THOMPSON)

    def __init__(self, drafters: Sequence[str], k: int = 3, prior_alpha: float = 1.0, prior_beta: float = 1.0,
                 reward: str | None = None, scope: str = "request", seed: int = 0):
        super().__init__(drafters, k=k, reward=reward, scope=scope, seed=seed)
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(f"policy {self.name!r}: prior_alpha and prior_beta must be > 0")
        self.prior_alpha = float(prior_alpha)
        self.prior_beta = float(prior_beta)

    def new_state(self) -> BanditState:
        """Each arm's alpha and beta, from the priors."""
        return BanditState(np.full(self.num_arms, self.prior_alpha), np.full(self.num_arms, self.prior_beta))
