"""Oracle k: for one drafter, propose exactly the tokens that will be accepted (nothing when none will be)."""
from __future__ import annotations

from policies.base import Choice, RequestView
from oracle.ground_truth import GroundTruthPolicy, oracle_k


class OracleKPolicy(GroundTruthPolicy):
    """Drafts acc_len[p] - 1 tokens with `drafter` (capped by k_max); reads ground truth."""

    name = "oracle-k"
    description = "ORACLE: one drafter proposing exactly acc_len[p] - 1 tokens (never a rejected one)."

    def __init__(self, drafter: str, k_max: int | None = None):
        super().__init__()
        if k_max is not None and int(k_max) < 0:
            raise ValueError(f"policy {self.name!r}: k_max must be >= 0 or null, got {k_max}")
        self.drafter = str(drafter)
        self.k_max = None if k_max is None else int(k_max)

    def choose(self, view: RequestView) -> Choice:
        k = oracle_k(self.drafter_trace(view.request_id, self.drafter), view.position, self.k_max)
        return Choice(self.drafter if k > 0 else None, k)
