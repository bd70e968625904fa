"""Policy dispatch for one server: the policy's checks against the traces, and a Python policy's (drafter, k) per
request and its feedback (the kernels replay acceptance: greedy by traces/acceptance.py's rule, sampled by 1 - tv
per token).
"""
from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np

from policies.base import NO_DRAFT, BatchFeedback, BatchView, FixedPolicy, Policy
from simulator.engine.acceptance_table import AcceptanceTable
from simulator.engine.workload_arrays import EngineWorkload

Verification = Literal["greedy", "sampled"]


class Drafting:
    """Checks the policy against the traces; asks a Python policy for (drafter, k) per request and tells it what
    was accepted."""

    def __init__(self, policy: Policy | None, mode: str, table: AcceptanceTable, wl: EngineWorkload,
                 verification: Verification = "greedy", rng: np.random.Generator | None = None,
                 traces: Sequence[Any] | None = None, live: bool = False):
        if verification not in ("greedy", "sampled"):
            raise ValueError(f"verification: expected 'greedy' or 'sampled', got {verification!r}")
        self.policy = policy if (policy is not None and mode != "ar") else FixedPolicy(None, 0)
        self.mode, self.table, self.wl = mode, table, wl
        self.drafters = table.drafters
        self.verification = verification
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.learns = self.policy.learns
        # each request's first and last flat trace index (AcceptanceTable.flat_index, precomputed per request)
        self.first_flat = table.offsets[wl.trace_index]
        self.last_flat = table.offsets[wl.trace_index + 1] - 1
        pol = self.policy
        self.tree = pol.tree if mode != "ar" else None  # a static draft tree (traces/tree.py) or None: chains
        if self.tree is not None:
            self._check_tree(mode, verification)
        if pol.reads_ground_truth:
            if live:
                raise ValueError(f"policy {pol.name!r} reads the ground truth (an oracle) and cannot run live")
            if traces is None:
                raise ValueError(f"policy {pol.name!r} is an oracle and needs the ground-truth traces")
            # the oracle sees each request's own trace, keyed by the id it is served under
            pol.bind_ground_truth({rid: traces[t] for rid, t in zip(wl.request_ids, wl.trace_index)})
        if pol.needs_tv:
            wanted = pol.drafters_used()
            missing = [d for d in wanted if d not in table.tv]
            if missing:
                raise ValueError(f"policy {pol.name!r} uses the block-divergence reward, which needs per-position "
                                 f"tv, but the traces have none for {missing}; use reward: be (block efficiency)")
        missing = [d for d in pol.needs_match_lengths if d not in table.proposal_len]
        if missing:
            from policies.combine import missing_match_lengths

            raise ValueError(missing_match_lengths(pol, missing))
        if verification == "sampled" and mode != "ar":
            wanted = pol.drafters_used()
            missing = [d for d in wanted if d in self.drafters and d not in table.tv]
            if missing:
                raise ValueError(f"verification: sampled needs per-position tv in the traces, but drafter(s) "
                                 f"{missing} have none; use verification: greedy or collect traces with tv")
        self.max_k: int | None = None  # the policy's stated max_draft_tokens(), read at its first choice

    def _check_tree(self, mode: str, verification: str) -> None:
        """Refuse, before any step, a tree the traces cannot replay: greedy SD only, every drafter the policy
        uses with tree_rank traces deep and wide enough, and no proposal-length cap (a chain's n-gram rule)."""
        from traces.tree import tree_capacity_check

        tree, pol, table = self.tree, self.policy, self.table
        if mode != "sd":
            raise ValueError(f"policy {pol.name!r}: a draft tree runs in mode sd only (got mode {mode!r})")
        if verification != "greedy":
            raise ValueError(f"policy {pol.name!r}: a draft tree is replayed from tree_rank under greedy "
                             "verification only; use verification: greedy")
        for d in pol.drafters_used():
            if d not in table.tree_rank:
                raise ValueError(f"policy {pol.name!r} drafts a tree with drafter {d!r}, but the traces carry no "
                                 f"tree_rank for it in every request (a bundle's requests.jsonl field "
                                 f"drafters.{d}.tree_rank, with params tree_top_k and tree_depth in trace.yaml)")
            if d not in table.tree_top_k:
                raise ValueError(f"policy {pol.name!r}: drafter {d!r}'s tree_top_k is unknown (give the bundle's "
                                 "params, or tree_top_k to inputs_from_traces)")
            why = tree_capacity_check(tree, table.tree_top_k[d], int(table.tree_rank[d].shape[1]))
            if why is not None:
                raise ValueError(f"policy {pol.name!r}, drafter {d!r}: {why}")
            if d in table.proposal_len:
                raise ValueError(f"policy {pol.name!r}, drafter {d!r}: its traces carry proposal_len (a proposer "
                                 "whose proposal length caps a chain); a tree drafts its whole shape: use k")

    def stated_max_k(self) -> int:
        """The policy's max_draft_tokens(), checked once (an integer in [0, MAX_DRAFT_TOKENS]): the bound the
        server's KV check uses and every choice is held to."""
        if self.max_k is None:
            self.max_k = _stated_max_k(self.policy)
        return self.max_k

    def choose(self, idx: np.ndarray, now: float, estimator, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The Python policy's drafter index and k for requests `idx` at output positions `pos` (k 0 where it drafts
        nothing), checked (checked_choice); the policy sees each drafter's proposal length where the traces
        have it (clipped into each trace)."""
        m = len(idx)
        if m == 0 or self.mode == "ar":
            return _no_draft(m), _zeros(m)
        flat = np.minimum(self.first_flat[idx] + pos, self.last_flat[idx])
        prop_known = {d: a[flat] for d, a in self.table.proposal_len.items()}
        view = BatchView(now=now, drafters=self.drafters, request_ids=_Gather(self.wl.request_ids, idx),
                         positions=pos, categories=_Gather(self.wl.categories, idx), proposal_len=prop_known,
                         step_time_estimate=estimator)
        d_idx, k = checked_choice(self.policy, self.policy.choose_batch(view), m, len(self.drafters),
                                  self.stated_max_k())
        return d_idx, np.where(d_idx == NO_DRAFT, 0, k)

    def feedback(self, idx, pos, d_idx, k, proposed, accepted, step_time) -> None:
        """Tell the policy what was accepted; TV over the proposed positions where the trace has it."""
        tv = None
        if self.table.tv:
            tv = []
            for j, i in enumerate(idx):
                d = self.drafters[d_idx[j]]
                if d in self.table.tv and proposed[j] > 0:
                    w = self.table.tv_window(d, self.wl.trace_index[i:i + 1], pos[j:j + 1], int(proposed[j]))[0]
                    tv.append(w[~np.isnan(w)])
                else:
                    tv.append(None)
        ids = list(map(self.wl.request_ids.__getitem__, idx.tolist()))
        self.policy.observe_batch(BatchFeedback(
            drafters=self.drafters, request_ids=ids, positions=pos, drafter_idx=d_idx, k=k, proposed=proposed,
            accepted=accepted, tv=tv, step_time=step_time))


_ZEROS: dict[int, np.ndarray] = {}
_NO_DRAFT: dict[int, np.ndarray] = {}


def _zeros(n: int) -> np.ndarray:
    """A read-only int64 zero array of length n, shared (steps of the same size reuse it)."""
    a = _ZEROS.get(n)
    if a is None:
        a = _ZEROS[n] = np.zeros(n, dtype=np.int64)
        a.setflags(write=False)
    return a


def _stated_max_k(policy: Policy) -> int:
    """The policy's own max_draft_tokens(), checked: an integer in [0, traces.limits.MAX_DRAFT_TOKENS]."""
    from traces.limits import MAX_DRAFT_TOKENS

    k = policy.max_draft_tokens()
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or not 0 <= k <= MAX_DRAFT_TOKENS:
        raise ValueError(f"policy {policy.name!r} ({type(policy).__name__}): max_draft_tokens() returned "
                         f"{_short(k)}; expected an integer in [0, {MAX_DRAFT_TOKENS}]")
    return int(k)


def checked_choice(policy: Policy, choice: Any, n: int, n_drafters: int, max_k: int) -> tuple[np.ndarray, np.ndarray]:
    """`choose_batch`'s answer as (drafter index, k) int64 arrays of length `n`, checked at the one place the
    engine takes it: drafter indices NO_DRAFT or in [0, n_drafters), k integers in [0, max_k] (the policy's own
    max_draft_tokens(), which the server's KV check relied on); else ValueError naming the policy and value."""
    who = f"policy {policy.name!r} ({type(policy).__name__})"
    if not isinstance(choice, (tuple, list)) or len(choice) != 2:
        raise ValueError(f"{who}: choose_batch returned {_short(choice)}; expected a pair (drafter indices, k)")
    out = []
    for what, value in zip(("drafter indices", "k"), choice):
        try:
            a = np.asarray(value)
        except Exception:  # noqa: BLE001 - any value numpy cannot take is the policy's error
            a = np.asarray(None)
        if a.shape != (n,) or not (np.issubdtype(a.dtype, np.integer) or (a.size == 0 and a.dtype == float)):
            raise ValueError(f"{who}: choose_batch returned {what} {_short(value)}; expected {n} integers "
                             "(one per request)")
        out.append(a.astype(np.int64, copy=False))
    d_idx, k = out
    if n:
        bad = (d_idx != NO_DRAFT) & ((d_idx < 0) | (d_idx >= n_drafters))
        if bad.any():
            raise ValueError(f"{who}: chose drafter index {int(d_idx[bad][0])}; expected {NO_DRAFT} (no draft) or "
                             f"0..{n_drafters - 1}")
        drafting = d_idx != NO_DRAFT
        if drafting.any():
            kk = k[drafting]
            if kk.min() < 0 or kk.max() > max_k:
                v = int(kk.min()) if kk.min() < 0 else int(kk.max())
                raise ValueError(f"{who}: chose k = {v}; expected 0..{max_k} (its max_draft_tokens())")
    return d_idx, k


def _short(value: Any) -> str:
    from traces.errors import shorten

    return shorten(value, 60)


def _no_draft(n: int) -> np.ndarray:
    a = _NO_DRAFT.get(n)
    if a is None:
        a = _NO_DRAFT[n] = np.full(n, NO_DRAFT, dtype=np.int64)
        a.setflags(write=False)
    return a


class _Gather:
    """A read-only sequence view `seq[idx[i]]`, so a step does not copy ids it may never read."""

    __slots__ = ("seq", "idx")

    def __init__(self, seq, idx):
        self.seq, self.idx = seq, idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.seq[j] for j in self.idx[i]]
        return self.seq[self.idx[i]]

    def __iter__(self):
        return map(self.seq.__getitem__, self.idx.tolist())
