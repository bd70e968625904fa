"""The Policy interface: per request and step, pick a drafter and k; learn from what was accepted.

A policy sees only what a real server sees (request id, position, batch size, server-visible
n-gram match lengths, and after each step the accepted counts). The same object runs in the
simulator, in a plain loop, and in live mode. Oracles set `reads_ground_truth` and receive the
true traces through `bind_ground_truth`; live mode refuses them.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

NO_DRAFT = -1  # drafter index meaning "plain decode step, no speculation"


def tokens_per_time(k: int, step_s: float, switch_s: float) -> float:
    """The rate of drafting k tokens that will all be accepted: the 1 + k tokens the step emits over its estimated
    time plus any switching cost (0.0 when the drafter stays; k = 0: plain decoding). The greedy oracle's rule
    (oracle/best_drafter.py); plain Python the compiled engine runs too (simulator/engine/compiled_kernel.py). A
    step priced at nothing (a profile whose terms at this shape are all 0) emits at an unbounded rate: inf."""
    t = step_s + switch_s
    return math.inf if t <= 0.0 else (1 + k) / t


@dataclass(frozen=True)
class Choice:
    """What one request does this step: draft `k` tokens with `drafter` (None or k=0: no speculation)."""

    drafter: str | None
    k: int


@dataclass(frozen=True)
class RequestView:
    """What a server knows about one running request when it must pick a drafter and k."""

    request_id: str
    position: int  # output tokens generated so far = output position of the first token drafted now
    batch_size: int  # requests decoding in this step
    now: float = 0.0
    category: str | None = None  # workload label when the deployment knows it (route, task tag)
    proposal_len: Mapping[str, int] = field(default_factory=dict)  # known before drafting (n-gram match)
    step_time_estimate: Callable[[str | None, int], float] | None = None  # whole-batch step time if all used (d, k)


@dataclass(frozen=True)
class Feedback:
    """What a server learns after verifying one request's proposal."""

    request_id: str
    position: int
    drafter: str | None
    k: int  # asked for
    proposed: int  # tokens actually proposed (n-gram may propose fewer than k)
    accepted: int  # proposed tokens the target accepted, 0..proposed
    tv: tuple[float, ...] | None = None  # TV(p_j, q_j) per proposed position, when distributions are visible
    step_time: float = 0.0
    batch_size: int = 1


@dataclass
class BatchView:
    """One decode step's requests, as arrays (the simulator's fast path)."""

    now: float
    drafters: tuple[str, ...]
    request_ids: Sequence[str]
    positions: np.ndarray
    categories: Sequence[str | None]
    proposal_len: Mapping[str, np.ndarray] = field(default_factory=dict)
    step_time_estimate: Callable[[str | None, int], float] | None = None

    @property
    def batch_size(self) -> int:
        return len(self.request_ids)

    def request(self, i: int) -> RequestView:
        return RequestView(
            request_id=self.request_ids[i],
            position=int(self.positions[i]),
            batch_size=self.batch_size,
            now=self.now,
            category=self.categories[i],
            proposal_len={d: int(a[i]) for d, a in self.proposal_len.items()},
            step_time_estimate=self.step_time_estimate,
        )


@dataclass
class BatchFeedback:
    """Outcome of one decode step for all its requests, as arrays."""

    drafters: tuple[str, ...]
    request_ids: Sequence[str]
    positions: np.ndarray
    drafter_idx: np.ndarray  # NO_DRAFT for plain decode
    k: np.ndarray
    proposed: np.ndarray
    accepted: np.ndarray
    tv: Sequence[np.ndarray | None] | None = None  # per request: TV over proposed positions
    step_time: float = 0.0

    def item(self, i: int) -> Feedback:
        d = int(self.drafter_idx[i])
        tv = None
        if self.tv is not None and self.tv[i] is not None:
            tv = tuple(float(x) for x in self.tv[i])
        return Feedback(
            request_id=self.request_ids[i],
            position=int(self.positions[i]),
            drafter=None if d == NO_DRAFT else self.drafters[d],
            k=int(self.k[i]),
            proposed=int(self.proposed[i]),
            accepted=int(self.accepted[i]),
            tv=tv,
            step_time=self.step_time,
            batch_size=len(self.request_ids),
        )


class Policy:
    """Base class. Subclasses implement `choose` (and usually `observe`), `drafters_used` and `max_draft_tokens`.

    `choose_batch` / `observe_batch` have per-request defaults; vectorised policies override them.
    """

    name: ClassVar[str] = "base"
    description: ClassVar[str] = ""
    reads_ground_truth: ClassVar[bool] = False
    learns: ClassVar[bool] = True  # False: observe() does nothing, so a caller may skip building feedback
    needs_tv: bool = False  # True: feedback must carry TV (the BD reward); a trace without tv is refused
    # drafters whose n-gram match lengths (proposal_len) the policy reads each step; a trace without them is refused
    needs_match_lengths: tuple[str, ...] = ()
    # a static draft tree (traces/tree.TreeShape) drafted whole every step; a request's k is how many of its nodes
    # (in depth order) it verifies: all of them under the fixed policy, fewer where a decode budget cuts it.
    # None: chains (simulator/engine/rules/tree.py)
    tree: Any = None

    def start_request(self, request_id: str) -> None:
        """A request started decoding (per-request policies reset their state here)."""

    def finish_request(self, request_id: str) -> None:
        """A request finished; drop any per-request state."""

    def choose(self, view: RequestView) -> Choice:
        raise NotImplementedError

    def drafters_used(self) -> tuple[str, ...]:
        """Every drafter this policy may choose (the server prices their prompt passes and checks their traces)."""
        raise NotImplementedError(f"policy {self.name!r} ({type(self).__name__}) must state drafters_used(): "
                                  "the drafters it may choose")

    def max_draft_tokens(self) -> int:
        """The largest k this policy proposes for one request in one step (the server's up-front KV check)."""
        raise NotImplementedError(f"policy {self.name!r} ({type(self).__name__}) must state max_draft_tokens(): "
                                  "the largest k it proposes per request and step")

    def observe(self, feedback: Feedback) -> None:
        """Learn from one verified proposal. Default: nothing."""

    def choose_batch(self, view: BatchView) -> tuple[np.ndarray, np.ndarray]:
        """Return (drafter index per request, NO_DRAFT for none; k per request)."""
        index = {d: i for i, d in enumerate(view.drafters)}
        n = view.batch_size
        d_idx = np.full(n, NO_DRAFT, dtype=np.int64)
        ks = np.zeros(n, dtype=np.int64)
        for i in range(n):
            c = self.choose(view.request(i))
            if c.drafter is not None and c.k > 0:
                if c.drafter not in index:
                    raise ValueError(f"policy {self.name!r} chose drafter {c.drafter!r}, "
                                     f"which is not one of {list(view.drafters)}")
                d_idx[i] = index[c.drafter]
                ks[i] = c.k
        return d_idx, ks

    def observe_batch(self, feedback: BatchFeedback) -> None:
        for i in range(len(feedback.request_ids)):
            self.observe(feedback.item(i))

    def bind_ground_truth(self, traces: Mapping[str, Any]) -> None:
        """Oracles only: receive request id -> RequestTrace. Others must not be given it."""
        raise TypeError(f"policy {self.name!r} does not read ground truth")


class FixedPolicy(Policy):
    """Always the same drafter and k (k = 0 or drafter None: plain autoregressive decoding), or the same static
    draft tree: `tree` a path list (vLLM's speculative_token_tree, e.g. [[0], [1], [0, 0]]) or {widths: [w1, ...]}
    (traces/tree.py), its k then the tree's node count."""

    name = "fixed"
    description = "Always the same drafter and k (a chain), or the same draft tree."
    learns = False

    def __init__(self, drafter: str | None, k: int | None = None,
                 tree: list[list[int]] | dict[str, list[int]] | str | None = None):
        if tree is not None:
            if k is not None:
                raise ValueError("give k (a chain of k drafts) or tree, not both: a tree's drafts are its nodes")
            if drafter is None:
                raise ValueError("tree: needs a drafter")
            self.tree = _tree_of(tree)
            k = self.tree.n_nodes
        if k is None:
            raise ValueError("give k (drafts per step; 0 = no drafting) or tree (a static draft tree)")
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.drafter = drafter if k > 0 else None
        self.k = int(k) if drafter is not None else 0
        self._cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def choose(self, view: RequestView) -> Choice:
        return Choice(self.drafter, self.k)

    def drafters_used(self) -> tuple[str, ...]:
        return () if self.drafter is None else (self.drafter,)

    def max_draft_tokens(self) -> int:
        return self.k

    def choose_batch(self, view: BatchView) -> tuple[np.ndarray, np.ndarray]:
        n = view.batch_size
        key = (view.drafters, n)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        if self.drafter is None:
            out = np.full(n, NO_DRAFT, dtype=np.int64), np.zeros(n, dtype=np.int64)
        else:
            try:
                d = view.drafters.index(self.drafter)
            except ValueError:
                raise ValueError(f"fixed policy drafter {self.drafter!r} is not in the trace's drafters "
                                 f"{list(view.drafters)}") from None
            out = np.full(n, d, dtype=np.int64), np.full(n, self.k, dtype=np.int64)
        for a in out:
            a.setflags(write=False)  # shared between steps of the same batch size
        self._cache[key] = out
        return out

    def observe_batch(self, feedback: BatchFeedback) -> None:
        return None


def _tree_of(spec: Any):
    """A TreeShape from the fixed policy's `tree`: a path list (or its text) or {widths: [...]}."""
    from traces.tree import tree_from_paths, tree_from_widths

    if isinstance(spec, dict):
        if set(spec) != {"widths"}:
            raise ValueError(f"tree: a mapping holds only 'widths' (children per node at each depth), got keys "
                             f"{sorted(map(str, spec))[:5]}; or give the path list itself")
        return tree_from_widths(spec["widths"], "tree.widths")
    return tree_from_paths(spec, "tree")
