"""Example plug-in policy (docs/policies.md): per-request draft length by additive increase, multiplicative decrease.

One drafter. Each request starts at `k_start`; after a step whose proposal was accepted whole, its k grows by
one (up to `k_max`); after a step that accepted less than half of what it proposed, k halves (down to
`k_min`). It sees only what a server sees: the view (request id, position, batch size) and the feedback
(proposed and accepted counts), never the acceptance trace.

Run it from any config by file path:  policy: {name: docs/examples/aimd_k_policy.py:AIMDKPolicy, drafter: eagle3}
"""
from __future__ import annotations

from policies.base import Choice, Feedback, Policy, RequestView


class AIMDKPolicy(Policy):
    """Per request: k + 1 after a fully accepted proposal, k // 2 after one less than half accepted."""

    name = "aimd-k"
    description = "Per request: k grows by one after a fully accepted proposal, halves after a poor one."

    def __init__(self, drafter: str, k_start: int = 2, k_min: int = 1, k_max: int = 8):
        if not 1 <= k_min <= k_start <= k_max:
            raise ValueError(f"expected 1 <= k_min <= k_start <= k_max, got {k_min}, {k_start}, {k_max}")
        self.drafter = drafter
        self.k_start, self.k_min, self.k_max = k_start, k_min, k_max
        self._k: dict[str, int] = {}  # request id -> its current k

    # --- what the engine asks before a run (KV lookahead, which drafters are priced)
    def drafters_used(self) -> tuple[str, ...]:
        return (self.drafter,)

    def max_draft_tokens(self) -> int:
        return self.k_max

    # --- per request state
    def start_request(self, request_id: str) -> None:
        self._k[request_id] = self.k_start

    def finish_request(self, request_id: str) -> None:
        self._k.pop(request_id, None)

    # --- one decision per request and step, and what it learns afterwards
    def choose(self, view: RequestView) -> Choice:
        return Choice(self.drafter, self._k.setdefault(view.request_id, self.k_start))

    def observe(self, feedback: Feedback) -> None:
        if feedback.drafter != self.drafter or feedback.proposed == 0:
            return  # a plain decode step, or nothing could be proposed: no evidence either way
        k = self._k.get(feedback.request_id, self.k_start)
        if feedback.accepted == feedback.proposed:
            k = min(k + 1, self.k_max)
        elif 2 * feedback.accepted < feedback.proposed:
            k = max(k // 2, self.k_min)
        self._k[feedback.request_id] = k
