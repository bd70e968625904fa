"""Base for drafter-choice bandits: one arm per drafter, fixed k, BE or BD reward, per-request or shared state.

MetaSD: each SD round one drafter proposes k tokens; its reward is block efficiency
(`be` = accepted / k) or block divergence (`bd` = mean 1 - TV over the drafted positions).
Scope `request` resets the statistics when a request starts (MetaSD's per-query bandit);
`shared` keeps one set of statistics across all requests of the server.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from policies.bandit_rules import BanditRule, BanditState, bandit_choices, bandit_updates
from policies.base import NO_DRAFT, BatchFeedback, BatchView, Choice, Feedback, Policy, RequestView
from traces.sampled_acceptance import REWARDS, reward_bd, reward_be

SCOPES = ("request", "shared")
_ROW0 = np.zeros(1, dtype=np.int64)  # a state's own arrays, as row 0 of the rule's per-state arrays
_SHARED = "\x00shared"


class BanditPolicy(Policy):
    """A built-in bandit sets `rule` (policies/bandit_rules.py), which chooses and learns over its BanditStates;
    another subclass defines `new_state()`, `_select(state) -> arm` and `_update(state, arm, reward)`."""

    default_reward = "be"
    rule: BanditRule | None = None

    def __init__(self, drafters: Sequence[str], k: int = 3, reward: str | None = None,
                 scope: str = "request", seed: int = 0):
        if isinstance(drafters, str) or not drafters:
            raise ValueError(f"policy {self.name!r}: drafters must be a non-empty list of drafter names, "
                             f"got {drafters!r}")
        if len(set(drafters)) != len(drafters):
            raise ValueError(f"policy {self.name!r}: drafters has duplicates: {list(drafters)}")
        if int(k) < 1:
            raise ValueError(f"policy {self.name!r}: k must be >= 1, got {k}")
        reward = self.default_reward if reward is None else reward
        if reward not in REWARDS:
            raise ValueError(f"policy {self.name!r}: reward must be one of {REWARDS}, got {reward!r}")
        if scope not in SCOPES:
            raise ValueError(f"policy {self.name!r}: scope must be one of {SCOPES}, got {scope!r}")
        self.drafters = tuple(str(d) for d in drafters)
        self.k = int(k)
        self.reward = reward
        self.scope = scope
        self.rng = np.random.default_rng(seed)
        self._index = {d: i for i, d in enumerate(self.drafters)}
        self._states: dict[str, Any] = {}

    @property
    def num_arms(self) -> int:
        return len(self.drafters)

    @property
    def needs_tv(self) -> bool:
        """True when the reward is BD: the run must refuse a trace without tv."""
        return self.reward == "bd"

    # -- state per scope
    def _key(self, request_id: str) -> str:
        return request_id if self.scope == "request" else _SHARED

    def state(self, request_id: str) -> Any:
        """The statistics a request's choices read (the shared ones in shared scope); made on first use."""
        return self._state(request_id)

    def _state(self, request_id: str) -> Any:
        key = self._key(request_id)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = self.new_state()
        return state

    def start_request(self, request_id: str) -> None:
        if self.scope == "request":
            self._states[request_id] = self.new_state()

    def finish_request(self, request_id: str) -> None:
        if self.scope == "request":
            self._states.pop(request_id, None)

    # -- Policy interface
    def drafters_used(self) -> tuple[str, ...]:
        return self.drafters

    def max_draft_tokens(self) -> int:
        return self.k

    def choose(self, view: RequestView) -> Choice:
        arm = int(self._select(self._state(view.request_id)))
        return Choice(self.drafters[arm], self.k)

    def observe(self, feedback: Feedback) -> None:
        if feedback.drafter is None or feedback.proposed <= 0:
            return
        arm = self._index.get(feedback.drafter)
        if arm is None:
            raise ValueError(f"policy {self.name!r} got feedback for drafter {feedback.drafter!r}, "
                             f"which is not one of its arms {list(self.drafters)}")
        r = reward_bd(feedback.tv) if self.reward == "bd" else reward_be(feedback.accepted, feedback.proposed)
        self._update(self._state(feedback.request_id), arm, float(r))

    def choose_batch(self, view: BatchView) -> tuple[np.ndarray, np.ndarray]:
        """`choose` for every request of the step, in batch order, without a RequestView per request."""
        if type(self).choose is not BanditPolicy.choose:
            return super().choose_batch(view)
        n = view.batch_size
        states = self._states_of(view.request_ids)
        arms = np.zeros(n, dtype=np.int64)
        if type(self)._select is not BanditPolicy._select or self.rule is None:  # a subclass's rule, per state
            arms[:] = np.fromiter((self._select(s) for s in states), dtype=np.int64, count=n)
        elif n:
            r = self.rule
            first, second = np.array([s.first for s in states]), np.array([s.second for s in states])
            bandit_choices(np.arange(n), n, first, second, np.arange(self.num_arms), self.num_arms,
                           self.scope == "shared", r.rule, r.beta, r.epsilon, r.exp3_gamma, self.rng, arms)
        to_view = np.array([view.drafters.index(d) if d in view.drafters else -2 for d in self.drafters],
                           dtype=np.int64)
        d_idx = to_view[arms]
        if n and d_idx.min() < 0:
            bad = self.drafters[int(arms[np.argmin(d_idx)])]
            raise ValueError(f"policy {self.name!r} chose drafter {bad!r}, which is not one of {list(view.drafters)}")
        return d_idx, np.full(n, self.k, dtype=np.int64)

    def observe_batch(self, feedback: BatchFeedback) -> None:
        """`observe` for every request of the step, in batch order: rewards as one array, then each update."""
        if type(self).observe is not BanditPolicy.observe:
            return super().observe_batch(feedback)
        d, prop = np.asarray(feedback.drafter_idx), np.asarray(feedback.proposed)
        rows = np.flatnonzero((d != NO_DRAFT) & (prop > 0))
        if not len(rows):
            return
        to_arm = np.array([self._index.get(x, -1) for x in feedback.drafters], dtype=np.int64)
        arms = to_arm[d[rows]]
        if arms.min() < 0:
            bad = feedback.drafters[int(d[rows][np.argmin(arms)])]
            raise ValueError(f"policy {self.name!r} got feedback for drafter {bad!r}, "
                             f"which is not one of its arms {list(self.drafters)}")
        if self.reward == "bd":
            tv = feedback.tv
            rewards = [reward_bd(None if tv is None or tv[i] is None else tuple(float(x) for x in tv[i]))
                       for i in rows]
        else:
            rewards = reward_be(np.asarray(feedback.accepted)[rows], prop[rows]).tolist()
        ids = feedback.request_ids
        self._update_batch(self._states_of([ids[i] for i in rows.tolist()]), arms, rewards)

    def _states_of(self, request_ids) -> list:
        """The state each request reads, created where missing (as `_state` does)."""
        if self.scope != "request":
            return [self._state(r) for r in request_ids]
        get = self._states.get
        return [s if (s := get(r)) is not None else self._state(r) for r in request_ids]

    def _update_batch(self, states: list, arms: np.ndarray, rewards) -> None:
        """`_update` of each (state, arm, reward) in order."""
        for state, arm, r in zip(states, arms.tolist(), rewards):
            self._update(state, arm, float(r))

    # -- the built-in rule; another subclass replaces all three
    def new_state(self) -> BanditState:
        """A state as a request starts with (the shared state too)."""
        return BanditState(np.zeros(self.num_arms), np.zeros(self.num_arms))

    def _select(self, state: BanditState) -> int:
        r = self.rule
        if r is None:
            raise NotImplementedError(f"policy {self.name!r}: a BanditPolicy without a rule defines _select")
        arm = np.zeros(1, dtype=np.int64)
        bandit_choices(_ROW0, 1, state.first[None], state.second[None], np.arange(self.num_arms), self.num_arms, False,
                       r.rule, r.beta, r.epsilon, r.exp3_gamma, self.rng, arm)
        return int(arm[0])

    def _update(self, state: BanditState, arm: int, reward: float) -> None:
        r = self.rule
        if r is None:
            raise NotImplementedError(f"policy {self.name!r}: a BanditPolicy without a rule defines _update")
        bandit_updates(_ROW0, 1, state.first[None], state.second[None], self.num_arms, False, r.rule,
                       np.array([arm]), np.array([reward]), state.ring_arm, state.ring_reward, state.seen, r.discount,
                       r.exp3_gamma)
