"""Step pricing: target forward time and each drafter's drafting / prefill time for the batch a step has.

Every duration passes `checked`, so a NaN, infinite or negative value (a bad profile coefficient, draft
fraction or overhead) is an error naming its source instead of a SimPy loop that never ends.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from policies.base import NO_DRAFT
from simulator.costs.draft_cost import DraftCost
from simulator.costs.latency import LatencyProfile
from simulator.engine.request_state import RequestState
from simulator.engine.rules.pricing import (DRAFT_NONE, DraftTerms, decode_tokens, drafters_prefill_time,
                                            step_estimate, target_time)
from simulator.engine.rules.tree import tree_draft_time
from simulator.costs.step_model import StepShape
from simulator.engine.workload_arrays import EngineWorkload


def checked(seconds: float, source: str) -> float:
    """`seconds` if it is a finite non-negative duration, else a ValueError naming `source`."""
    if not (seconds >= 0.0 and seconds != math.inf):  # also catches NaN
        raise ValueError(f"step duration from {source} is {seconds!r}; expected a finite number >= 0 "
                         "(check that profile's coefficients, the drafter's cost and the step overhead)")
    return seconds


class Pricing:
    """Prices target and drafter work of one server from its latency profiles and draft costs."""

    def __init__(self, target: LatencyProfile, draft_costs: Mapping[str, DraftCost], drafters: tuple[str, ...],
                 overhead_s: float, switch_cost_s: float, state: RequestState, wl: EngineWorkload,
                 tree_passes: tuple[int, ...] | None = None, proposers: tuple[str, ...] = ()):
        self.target = target
        # the policy's drafters of kind `engine_step` (vLLM V1's proposer), in drafter order: each runs every SD step
        self.proposers = proposers
        # a static draft tree's tokens read per drafting pass (traces/tree.TreeShape.draft_pass_tokens), or None
        self.tree_passes = tree_passes
        self.draft_costs = dict(draft_costs)
        self.drafters = drafters
        self.overhead = checked(overhead_s, "server.step_overhead_s")
        self.switch_cost_s = checked(switch_cost_s, "run.switch_cost_s")
        self.state, self.wl = state, wl
        self._target_src = f"target profile {getattr(target, 'name', type(target).__name__)!r}"
        # rules/pricing.draft_group and group_switches, compiled (numba)
        from simulator.engine.compiled_kernel import draft_group, group_switches

        self._draft_group, self._group_switches = draft_group, group_switches

    def cost_of(self, name: str) -> DraftCost:
        cost = self.draft_costs.get(name)
        if cost is None:
            raise ValueError(f"policy chose drafter {name!r} but the experiment's 'drafters:' gives no cost for it "
                             f"(have: {sorted(self.draft_costs)})")
        return cost

    def context(self, idx: np.ndarray) -> np.ndarray:
        """KV tokens of each request in `idx` (prompt + output so far)."""
        return self.wl.prompt_len[idx] + self.state.gen[idx]

    def step_shape(self, n_dec: int, drafts: int, kv_dec: int, pre: np.ndarray, chunk: np.ndarray) -> StepShape:
        """The shape of a target step: `n_dec` decoding sequences with `drafts` draft tokens over `kv_dec` KV,
        plus the prompt chunks `chunk` of requests `pre` (their KV before the chunk from the request state)."""
        if not len(pre):
            return StepShape(n_dec, drafts, kv_dec)
        done = self.state.prefill_done[pre]
        return StepShape(n_dec, drafts, kv_dec, len(pre), int(chunk.sum()), int((done + chunk).sum()),
                         int((chunk * (done + chunk)).sum()))

    def price(self, shape: StepShape) -> float:
        """The target's forward time for `shape`: the one pricing rule of simulated steps and policy estimates
        (a structured profile reads the whole shape, a batch profile its sequences, tokens and KV)."""
        return checked(target_time(self.target, shape.decode_seqs, shape.draft_tokens, shape.decode_kv,
                                   shape.prefill_seqs, shape.prefill_tokens, shape.prefill_kv, shape.prefill_attn),
                       self._target_src)

    def target_time(self, dec: np.ndarray, proposed: np.ndarray, pre: np.ndarray, chunk: np.ndarray,
                    kv_dec: int | None = None, prop_sum: int | None = None) -> tuple[float, int, int, int]:
        """Verify/decode (+ prefill) forward time for the batch the target actually runs; (time, seqs, tokens, kv)."""
        n = len(dec) + len(pre)
        if n == 0:
            return 0.0, 0, 0, 0
        if kv_dec is None:
            kv_dec = int(self.context(dec).sum())
        drafts = int(proposed.sum()) if prop_sum is None else prop_sum
        shape = self.step_shape(len(dec), drafts, kv_dec, pre, chunk)
        return self.price(shape), n, batch_tokens(shape), batch_kv(shape)

    def draft_time(self, groups, idx: np.ndarray, d_idx: np.ndarray, k: np.ndarray, proposed: np.ndarray,
                   verify_time: float, ctx: np.ndarray | None = None) -> tuple[float, list[str]]:
        """Each drafter used is charged once for its own sub-batch; plus switching cost. `groups` = groups(d_idx)."""
        total = 0.0
        used: list[str] = []
        if len(idx) == 0:
            return 0.0, used
        if ctx is None:
            ctx = self.context(idx)
        for di, mask in groups:
            # the requests of drafter di that propose (rules/pricing.draft_group, the rule the kernels run)
            n, prop_sum, k_max, kv = self._draft_group(di, d_idx, proposed, k, ctx, len(idx))
            if n == 0:
                continue
            name = self.drafters[di]
            cost = self.cost_of(name)
            if self.tree_passes is None:
                t = cost.draft_time(n, prop_sum, k_max, kv, verify_time)
            else:  # one drafter pass per depth of the tree (rules/tree.py)
                t = tree_draft_time(cost.terms, cost.profile, n, prop_sum, self.tree_passes, kv, verify_time)
            total += checked(t, f"drafter {name!r} draft cost")
            used.append(name)
            if self.switch_cost_s > 0 and self._group_switches(di, d_idx, proposed, idx, len(idx),
                                                                 self.state.last_drafter):
                total += self.switch_cost_s
        return total, used

    def engine_step_draft_time(self, sampling_seqs: int, step_tokens: int, kv_tokens: int) -> tuple[float, list[str]]:
        """The policy's drafters of kind `engine_step` (vLLM V1's proposer): each runs once per step over the step's
        tokens."""
        total, used = 0.0, []
        for name in self.proposers:
            t = self.draft_costs[name].engine_step_time(sampling_seqs, step_tokens, kv_tokens)
            if t > 0:
                total += checked(t, f"drafter {name!r} engine-step cost")
                used.append(name)
        return total, used

    def drafter_prefill_time(self, pre: np.ndarray, chunk: np.ndarray, names: tuple[str, ...]) -> float:
        """The drafters' own prefill of the prompt chunks the target prefilled (PSD: on the draft device)."""
        if len(pre) == 0 or not names:
            return 0.0
        tokens = int(chunk.sum())
        kv = int((self.state.prefill_done[pre] + chunk).sum())
        costs = [self.cost_of(name) for name in names]
        t = drafters_prefill_time([c.terms for c in costs], [c.profile for c in costs], range(len(names)), len(pre),
                                  tokens, kv)
        if not (t >= 0.0 and t != math.inf):  # name the drafter whose pass is bad
            for name, cost in zip(names, costs):
                checked(cost.prefill_time(len(pre), tokens, kv), f"drafter {name!r} prefill cost")
        return checked(t, f"drafters {list(names)} prefill cost")

    def estimator(self, n_batch: int, kv: int, pipelined: bool, prompts=None, engine_step: bool = False,
                  prefill_drafters: tuple[str, ...] = ()):
        """Step-time estimate a policy may ask for: (drafter, k) -> seconds of a step in which `n_batch` decoding
        sequences over `kv` KV tokens each verify k drafts, priced as the simulated step is (`price` on its full
        shape, the drafter's cost, vLLM V1 proposer costs when `engine_step`, `prefill_drafters`' own prompt
        passes). `prompts(tokens_used)` -> (requests, chunks, chunks ending their prompt) is the prompt part the
        step would add after the decodes' tokens (Scheduler.preview_prefills); None: no prompt chunk."""
        passes = [self.cost_of(name) for name in prefill_drafters]
        pass_costs, pass_profiles = [c.terms for c in passes], [c.profile for c in passes]
        pass_order = range(len(passes))

        def estimate(drafter: str | None, k: int) -> float:
            k = k if drafter is not None else 0
            cost = self.draft_costs[drafter] if k > 0 else None
            decoding = decode_tokens(n_batch, k)
            pre, chunk, ending = prompts(decoding) if prompts is not None else (_NONE, _NONE, 0)
            shape = self.step_shape(n_batch, decoding - n_batch, kv, pre, chunk)  # drafts: tokens beyond one each
            verify = self.price(shape)
            proposer = 0.0
            if engine_step:
                proposer = self.engine_step_draft_time(n_batch + ending, batch_tokens(shape), batch_kv(shape))[0]
            t = step_estimate(verify, _NO_COST if cost is None else cost.terms, None if cost is None else cost.profile,
                              pass_costs, pass_profiles, pass_order, self.overhead, proposer, pipelined, n_batch, kv, k,
                              shape.prefill_seqs, shape.prefill_tokens, shape.prefill_kv)
            return checked(t, f"drafter {drafter!r} draft cost or the prompt pass of drafters {list(prefill_drafters)}")

        return estimate


_NONE = np.zeros(0, dtype=np.int64)
_NO_COST = DraftTerms(DRAFT_NONE, 0.0, 0.0, False)  # k = 0: nothing drafted


def batch_tokens(shape: StepShape) -> int:
    """Query tokens of a step: one per decoding sequence, its drafts, and the prompt chunks."""
    return shape.decode_seqs + shape.draft_tokens + shape.prefill_tokens


def batch_kv(shape: StepShape) -> int:
    """KV tokens a step attends over: the decoding sequences' context and the chunks' (cached + chunk)."""
    return shape.decode_kv + shape.prefill_kv


def groups(d_idx: np.ndarray):
    """(drafter index, mask) per drafter used; mask None when the whole batch uses one drafter."""
    if len(d_idx) == 0:
        return []
    lo, hi = d_idx.min(), d_idx.max()
    if lo == hi:
        return [] if lo == NO_DRAFT else [(int(lo), None)]
    present = np.flatnonzero(np.bincount(d_idx - NO_DRAFT)) + NO_DRAFT  # the drafters used, ascending
    return [(di, d_idx == di) for di in present.tolist() if di != NO_DRAFT]


def masked(a: np.ndarray, mask):
    """`a` where `mask` (None: all of it)."""
    return a if mask is None else a[mask]
