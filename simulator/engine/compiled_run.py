"""A server's run in the kernels: AR or SD with a fixed, adaptive-k, combine-match, combine-adaptive, k-by-batch,
bandit, position-oracle, greedy-oracle or exact-plan policy by its compiled rule, or any other policy asked in Python
at each step; PSD with the fixed policy, adaptive-k or a bandit by its rule, or any policy asked in Python; open or
closed loop.

`refusal` says why a `Server` cannot run at all (a profile the kernels do not price: they price linear, table,
roofline and structured profiles, target and drafters; a policy over more than MAX_SLOTS drafters); `for_server`
gives its run. A policy without a compiled rule (`python_chooses`: a plug-in) is asked by the kernel itself: it
pauses before each step's choice (CHOOSE); `CompiledRun._heard` tells the policy what the step before did
(observe_batch, start_request, finish_request), `_choose` calls Drafting.choose (the policy's choose_batch, its
estimates priced by compiled_kernel.step_time_estimate). `CompiledRun.run` steps the whole run in
simulator/engine/compiled_kernel.py (PSD: compiled_psd_kernel.py) and writes the outcome into the server's state, step
log and counters, from which `Server.result()` builds the tables. A cluster replica's run is a
`compiled_replica.CompiledReplica`: the same kernels, the steps up to the replica's next external event (the router's
next routing) per call, in the replica's SimPy process.

The built-in policies' choices are their own rules (policies/adaptive_k.py adaptive_ks, policies/bandit_rules.py,
policies/acceptance_estimate.py), compiled: the same policy asked in Python
gives the same tables (tests/simulator/engine/test_compiled_run.py). The kernels are plain Python over arrays: with
numba's JIT off (NUMBA_DISABLE_JIT=1) they give the same tables bit for bit.

The kernel runs in segments: it returns when its row buffers are full or when a given number of requests have
finished, and continues from its state; `CompiledRun.run(stop=...)` uses the latter to let a caller end a run
early (a callable asked after every `check_every` finishes, or at the counts `next_check()` names). While it asks,
the server's state is complete up to the step just taken: every finish and first token up to the kernel's clock
(`now`, that step's end; the SimPy clock stands still during a run) and `n_finished`, which a step hook's snapshot
(simulator/measure/early_stop.py progress_of) reads.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import numpy as np

from policies.adaptive_k import AdaptiveKPolicy
from policies.bandit import BanditPolicy
from policies.base import NO_DRAFT, FixedPolicy
from policies.combine import CombineAdaptivePolicy, CombineMatchPolicy
from policies.bandit_rules import BanditState
from policies.epsilon_greedy import EpsilonGreedyPolicy, RandomDrafterPolicy
from policies.exp3 import EXP3Policy
from policies.k_by_batch import KByBatchPolicy
from policies.thompson import ThompsonPolicy
from policies.ucb import DiscountedUCBPolicy, MetaSDUCBPolicy, SlidingWindowUCBPolicy, UCBPolicy
from simulator.engine.arrivals import ClosedLoopArrivals
from simulator.costs.latency import LinearProfile, TableProfile
from simulator.engine.pricing import checked
from simulator.engine.kernel_records import (PSD_STATE, Costs, PolicyState, PSDCarry, PSDSettings, Replay, Requests, Scratch,
                                             Settings, StepRows, Workload, new_state, psd_scratch, rows_head,
                                             scratch_buffers, settings_record, step_buffers, typed)
from simulator.engine.rules import pricing as pricing_rules
from simulator.engine.rules.pricing import (DRAFT_NONE, PROFILE_LINEAR, PROFILE_ROOFLINE, PROFILE_STRUCTURED,
                                            PROFILE_TABLE, DraftTerms, ProfileTerms)
from simulator.costs.roofline import RooflineProfile, RooflineTerms
from simulator.costs.step_model import StructuredProfile

PHASES = ("prefill", "decode", "draft", "verify", "mixed", "draft_prefill", "sync")  # the kernels' phase codes
SEGMENT_ROWS = 1 << 18  # step rows per kernel call (untouched buffer pages cost nothing); more: further calls


def segment_rows() -> int:
    """Rows of a step-row buffer: SEGMENT_ROWS (tests lower it to fill buffers every few steps), room for one step
    of either kernel at least (a PSD step's rows are the most)."""
    import simulator.engine.compiled_psd_kernel as pker

    return max(SEGMENT_ROWS, pker.STEP_ROWS)
MAX_SLOTS = 31  # drafters a compiled policy may use: the step table's drafter codes (bits 0..2 x slots) fit an int64
SLOT_PAD = 8  # the kernel's drafter records come padded to a multiple of this many slots (one numba type, so one
# kernel build, for every run of up to 8 drafters; another per further 8)
UNUSED_SLOT = MAX_SLOTS + 1  # the slot of a drafter the policy does not use: no group has it


def padded_slots(slots: int) -> int:
    """The length of the kernel's drafter records for a run of `slots` drafters (SLOT_PAD)."""
    return -(-max(slots, 1) // SLOT_PAD) * SLOT_PAD
POLICY_METHODS = {"choose", "choose_batch", "observe", "observe_batch", "start_request", "finish_request"}
# the bandits the kernel runs (POL_BANDIT) by their `rule` (Settings.bandit to exp3_gamma)
BANDITS = (UCBPolicy, MetaSDUCBPolicy, DiscountedUCBPolicy, SlidingWindowUCBPolicy, EpsilonGreedyPolicy,
           RandomDrafterPolicy, ThompsonPolicy, EXP3Policy)
# compiled_kernel POL_FIXED, _ADAPTIVE, _COMBINE, _RATE (combine-adaptive), _BANDIT (BE or BD reward), _BATCH; the
# oracles POL_TABLE (by position, any oracle class) and POL_GREEDY_ORACLE (greedy_oracle below)
COMPILED_POLICIES = (FixedPolicy, AdaptiveKPolicy, CombineMatchPolicy, CombineAdaptivePolicy,
                     KByBatchPolicy) + BANDITS
# the rules the PSD kernel runs (compiled_psd_kernel: POL_FIXED, POL_ADAPTIVE, POL_BANDIT)
PSD_POLICIES = (FixedPolicy, AdaptiveKPolicy) + BANDITS
MAX_RING = 1 << 22  # sliding-window UCB's rounds the kernel keeps (states x window; 64 MiB)


def refusal(server) -> str | None:
    """Why the engine refuses `server`'s run before any step, or None: a profile the kernels do not price (the
    target's or a drafter's of the policy) or a policy over more drafters than the step table's codes hold."""
    why = profile_reason(server.pricing.target, "target")
    if why is not None:
        return why
    return _policy_reason(server, server.drafting.policy)


def greedy_oracle(policy) -> bool:
    """Whether `policy` says it is the greedy oracle the kernel runs (POL_GREEDY_ORACLE: its `greedy_by_rate`,
    oracle/best_drafter.py): each drafter's oracle k (`oracle_ks`) weighed by the step's time estimate."""
    return bool(getattr(policy, "greedy_by_rate", False))


def time_plan(policy):
    """The PlanFollower of an oracle's plan min-time that the kernel follows (POL_PLAN: its `time_plan`,
    oracle/exact.py), or None."""
    return getattr(policy, "time_plan", None)


def python_chooses(server, policy) -> bool:
    """Whether the kernel pauses for the policy itself, in Python, at each SD or PSD step that drafts (POL_GIVEN: its
    `choose_batch`, then `observe_batch`, `start_request`, `finish_request`; docs/policies.md): a policy
    the kernel has no rule for (a plug-in, a subclass of a built-in), one with those methods replaced on the
    instance, or a built-in whose state the kernel cannot keep as the policy does (per-request state under repeated
    request ids, which share it; sliding-window UCB past MAX_RING rounds) or whose k-by-batch ranges end below
    max_num_seqs (its own k_for names the batch that passes them); under PSD every policy but the fixed one,
    adaptive-k and the bandits (PSD_POLICIES)."""
    if server.mode not in ("sd", "psd"):
        return False
    if set(vars(policy)) & POLICY_METHODS:  # a wrapper set on the instance (a recorder, a test spy)
        return True
    if server.mode == "psd" and type(policy) not in PSD_POLICIES:
        return True
    if type(policy) not in COMPILED_POLICIES and not getattr(policy, "by_position", False) \
            and not greedy_oracle(policy) and time_plan(policy) is None:
        return True
    if type(policy) is KByBatchPolicy and policy.ranges[-1][1] is not None \
            and policy.ranges[-1][1] < server.max_num_seqs:
        return True
    if isinstance(policy, CombineAdaptivePolicy) or (isinstance(policy, (AdaptiveKPolicy, BanditPolicy))
                                                     and policy.scope == "request") or greedy_oracle(policy) \
            or time_plan(policy) is not None:
        ids = server.wl.request_ids
        if len(set(ids)) != len(ids):
            return True
    if type(policy) is SlidingWindowUCBPolicy:
        states = 1 if policy.scope == "shared" else len(server.wl)
        if states * policy.window > MAX_RING:
            return True
    return False


def _policy_reason(server, policy) -> str | None:
    """Why the drafters the policy uses cannot run (more than MAX_SLOTS, or a profile the kernels do not price),
    or None."""
    used = policy.drafters_used()
    if not used:
        return None
    if len(used) > MAX_SLOTS:
        return (f"policy {policy.name!r} uses {len(used)} drafters; the engine runs a policy over at most {MAX_SLOTS} "
                "(the step table's drafters column codes each as a bit of an int64)")
    for name in used:
        p = server.pricing.draft_costs[name].profile
        if p is not None:
            why = profile_reason(p, "draft cost")
            if why is not None:
                return why
    return None


def profile_reason(profile, what: str) -> str | None:
    """Why the kernels cannot price `profile` (the target's or a drafter's), or None: LinearProfile or
    StructuredProfile (their coefficients finite and >= 0 when made), RooflineProfile, or TableProfile (its linear
    fit)."""
    if type(profile) in (LinearProfile, StructuredProfile, RooflineProfile):
        return None
    if type(profile) is TableProfile:
        return profile_reason(profile.fallback, f"{what} table's linear fit")
    return (f"{what} profile {getattr(profile, 'name', '?')!r} is a {type(profile).__name__}; the engine prices "
            "LinearProfile, RooflineProfile, StructuredProfile and TableProfile (docs/configs.md, inline profiles; "
            "docs/calibration.md: a measured table or a fitted step model)")


_NO_ROOFLINE = RooflineTerms(*(0.0,) * 13, False, 0.0)
NO_PROFILE = ProfileTerms(PROFILE_LINEAR, (0.0, 0.0, 0.0, 0.0), _NO_ROOFLINE)  # a drafter without one
NO_DRAFTER = DraftTerms(DRAFT_NONE, 0.0, 0.0, False)  # a padding slot


def profile_terms(profile) -> ProfileTerms:
    """The kernel's record of an eligible profile (profile_reason None), from the profile's public terms: a
    LinearProfile's (a, b, s, d), a RooflineProfile's RooflineTerms, a StructuredProfile's coefficient vector and
    form, or a TableProfile's triangulation and linear fit."""
    if type(profile) is LinearProfile:
        return ProfileTerms(PROFILE_LINEAR, tuple(float(t) for t in profile.terms), _NO_ROOFLINE)
    if type(profile) is StructuredProfile:
        return ProfileTerms(PROFILE_STRUCTURED, (0.0, 0.0, 0.0, 0.0), _NO_ROOFLINE, profile.vector,
                            profile.form == "roofline")
    if type(profile) is TableProfile:
        return ProfileTerms(PROFILE_TABLE, (0.0, 0.0, 0.0, 0.0), _NO_ROOFLINE, profile.data[None, :])
    return ProfileTerms(PROFILE_ROOFLINE, (0.0, 0.0, 0.0, 0.0), profile.terms)


def _put_bandit(state: BanditState, pol: PolicyState, x: int) -> None:
    """The kernel's state x (PolicyState rows) into a policy's bandit state, in place."""
    arms = len(state.first)
    state.first[:], state.second[:] = pol.arm_counts[x, :arms], pol.arm_sums[x, :arms]
    if state.ring_arm is not None:
        state.ring_arm[0], state.ring_reward[0], state.seen[0] = pol.ring_arm[x], pol.ring_reward[x], pol.seen[x]


def entry_point(kernel, args: tuple) -> Callable:
    """`kernel`'s compiled entry for `args`' types, once a call with them has compiled or loaded it: numba's
    dispatcher types every argument at every call (0.1-0.3 ms for the kernels' records; a policy asked in Python
    costs a call a step), the entry only unboxes them. `kernel` itself where it is plain Python
    (NUMBA_DISABLE_JIT) or has no such entry."""
    overloads = getattr(kernel, "overloads", None)
    if not overloads:
        return kernel
    from numba import typeof

    compiled = overloads.get(tuple(typeof(a) for a in args))
    return getattr(compiled, "entry_point", None) or kernel


def for_server(server, replica_run: type | None = None) -> CompiledRun:
    """The compiled run of `server`; a cluster replica's is a `replica_run` (simulator/engine/compiled_replica.py
    CompiledReplica, given by the caller: that module builds on this one)."""
    if getattr(server.arrivals, "routed", False):
        if replica_run is None:
            raise ValueError("compiled_run.for_server: a cluster replica needs its replica_run class")
        return replica_run(server)
    return CompiledRun(server)


class CompiledRun:
    """Runs one eligible server in compiled_kernel.run_steps and writes the outcome into its state."""

    stepwise = False  # True: a cluster replica's, stepped by its SimPy process (compiled_replica.CompiledReplica)
    where = ""  # what the kernel's errors name beside the engine (a cluster replica's: its number)

    def __init__(self, server):
        import simulator.engine.compiled_kernel as ker
        from traces.acceptance import accepted_drafts, proposed_tokens

        self.srv = server
        self.running, self.now = False, 0.0  # during run(): the kernel's clock at its last return
        self.gidx = np.arange(len(server.wl), dtype=np.int64)  # the kernel's request k is workload request gidx[k]
        self.kernel_calls = 0  # kernel calls (a count the tests read: runs of steps per call)
        self.steps_entry = self.estimate_entry = None  # POL_GIVEN's kernel calls, typed once (entry_point)
        wl, table, policy = server.wl, server.table, server.drafting.policy
        used = policy.drafters_used() if server.mode in ("sd", "psd") else ()
        self.psd = server.mode == "psd"
        # drafter slots in ascending drafter index (the drafting's group order); prompt passes in `used` order
        self.slots = sorted(used, key=table.drafters.index)
        self.drafter_idx = [table.drafters.index(d) for d in self.slots]
        # a drafter index (or NO_DRAFT, the last entry) -> its slot, -1, or UNUSED_SLOT for one the policy does not use
        self.slot_of_drafter = np.full(len(table.drafters) + 1, UNUSED_SLOT, dtype=np.int64)
        self.slot_of_drafter[self.drafter_idx], self.slot_of_drafter[NO_DRAFT] = np.arange(len(self.slots)), -1
        self.pass_names = "+".join(used)  # the draft_prefill row's drafters
        self._names: dict[int, str] = {}  # the drafters column's strings by code (_drafter_names)
        G = len(self.slots)
        cfg = server.scenario.server
        # the kernel's Settings (kernel_records.py), every field named; typed() fixes their types
        v = dict(sd=server.mode == "sd", policy=ker.POL_FIXED, k=0, nslot=G, k_max=0, max_seqs=server.max_num_seqs,
                 budget=cfg.max_num_batched_tokens, chunked=cfg.chunked_prefill, separate=cfg.prefill == "separate",
                 block_size=server.sched.pool.block_size, total_blocks=server.sched.pool.total_blocks, closed=False,
                 shared=False, has_cap=False, min_match=0, k_ngram=0, k_eagle=0, ngram_slot=0, arms=0,
                 proposers=sum(1 << self.slots.index(d) for d in server.pricing.proposers),
                 decode_budget=server.sched.decode_budget, lookahead=server.sched.lookahead,
                 async_sched=server.async_scheduling, routed=False, overhead=server.pricing.overhead,
                 switch_cost=server.pricing.switch_cost_s, oracle_switch=0.0, think=0.0,
                 prior=0.0, prior_eagle=0.0, prior_weight=0.0, decay=0.0, beta=0.0, gap=server.gap_s,
                 sampled=G > 0 and server.drafting.verification == "sampled",
                 bd=isinstance(policy, BanditPolicy) and policy.reward == "bd" and policy.learns,
                 tree=server.drafting.tree is not None, bandit=0, discount=1.0, epsilon=0.0, exp3_gamma=0.0)
        self.closed = isinstance(server.arrivals, ClosedLoopArrivals)
        if self.closed:
            v.update(closed=True, think=server.arrivals.think_time)
        n_flat = int(table.offsets[-1])
        cap = np.zeros(1, dtype=np.int32)
        choice_slot, choice_k = np.full(1, -1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        batch_k = np.zeros(1, dtype=np.int64)
        slot_k = np.zeros((1, 1), dtype=np.int64)
        if python_chooses(server, policy):  # asked in Python at each step (run: _choose, _heard)
            v.update(policy=ker.POL_GIVEN, k_max=server.drafting.stated_max_k(), bd=False)  # it rewards itself
            ks = [v["k_max"]] * G
        elif G == 0 or type(policy) is FixedPolicy:
            v.update(policy=ker.POL_FIXED, k=policy.k)
            ks = [policy.k] * G
        elif type(policy) is AdaptiveKPolicy:
            v.update(policy=ker.POL_ADAPTIVE, k_max=policy.k_max, shared=policy.scope == "shared", prior=policy.prior,
                     prior_weight=policy.prior_weight, decay=policy.decay)
            lens = table.proposal_len.get(policy.drafter)
            if lens is not None:
                v["has_cap"], cap = True, lens
            ks = [policy.k_max]
        elif type(policy) in BANDITS:
            rule = policy.rule
            v.update(policy=ker.POL_BANDIT, k=policy.k, arms=policy.num_arms, shared=policy.scope == "shared",
                     bandit=rule.rule, beta=rule.beta, discount=rule.discount, epsilon=rule.epsilon,
                     exp3_gamma=rule.exp3_gamma)
            ks = [policy.k] * G
        elif type(policy) is KByBatchPolicy:  # its k at every batch size a step can have
            v.update(policy=ker.POL_BATCH)
            batch_k = np.array([0] + [policy.k_for(n) for n in range(1, server.max_num_seqs + 1)], dtype=np.int64)
            ks = [max(1, int(batch_k.max()))]
        elif greedy_oracle(policy):  # each drafter's oracle k by position, weighed per step
            slot_k = self._oracle_k_table(n_flat)
            ks = [max(1, int(slot_k[g].max(initial=0))) for g in range(G)]
            v.update(policy=ker.POL_GREEDY_ORACLE, arms=len(policy.drafters), oracle_switch=policy.switch_cost_s,
                     k_max=max(ks))
        elif time_plan(policy) is not None:  # min-time: each request's exact plan, made at its first decode
            follower = time_plan(policy)
            slot_k = self._plan_reach_table(follower, n_flat)  # rows in the plan's drafters' order
            top = {d: max(1, int(slot_k[a].max(initial=0))) for a, d in enumerate(follower.drafters)}
            ks = [top[d] for d in self.slots]
            v.update(policy=ker.POL_PLAN, arms=len(follower.drafters), k_max=max(ks))
        elif getattr(policy, "by_position", False):  # an oracle's table of choices by position
            v.update(policy=ker.POL_TABLE)
            choice_slot, choice_k = self._position_table(used, n_flat)
            ks = [max(1, int(choice_k[choice_slot == g].max(initial=0))) for g in range(G)]
        elif type(policy) is CombineMatchPolicy:
            v.update(policy=ker.POL_COMBINE, min_match=policy.min_match, k_ngram=policy.k_ngram,
                     k_eagle=policy.k_eagle, ngram_slot=self.slots.index(policy.ngram), has_cap=True)
            cap = table.proposal_len[policy.ngram]
            ks = [policy.k_ngram if d == policy.ngram else policy.k_eagle for d in self.slots]
        else:  # CombineAdaptivePolicy: its n-gram's k capped by the match length where the trace has it
            v.update(policy=ker.POL_RATE, k_max=policy.max_draft_tokens(), k_ngram=policy.k_ngram,
                     k_eagle=policy.k_eagle, ngram_slot=self.slots.index(policy.ngram),
                     prior=policy.priors[policy.ngram], prior_eagle=policy.priors[policy.eagle],
                     prior_weight=policy.prior_weight, decay=policy.decay)
            lens = table.proposal_len.get(policy.ngram)
            if lens is not None:
                v["has_cap"], cap = True, lens
            ks = [policy.k_ngram if d == policy.ngram else policy.k_eagle for d in self.slots]
        # the replay rule (traces/acceptance.py) once over the table for each (slot, k) the policy can ask for:
        # tab[row, 0 / 1, f] = proposed / accepted at flat position f, rowof[g, k] its row; int8 (k <= 64,
        # traces.limits.MAX_DRAFT_TOKENS, checked by Drafting.stated_max_k), from inputs clipped where the rule
        # cannot tell (match lengths at k, acceptance lengths at k + 1)
        asks = [range(1, k + 1) if v["policy"] in (ker.POL_ADAPTIVE, ker.POL_TABLE, ker.POL_BATCH,
                                                   ker.POL_GREEDY_ORACLE, ker.POL_PLAN, ker.POL_GIVEN)
                or name == getattr(policy, "ngram", None) else [k]
                for name, k in zip(self.slots, ks)]  # adaptive-k, tables, combine-match's n-gram: k <= the most
        rowof = np.zeros((max(G, 1), max(ks, default=0) + 1), dtype=np.int64)
        rows = sum(len(a) for a in asks)
        # a Python policy may name a drafter at k = 0, and a PSD side drafts with no drafter: that row proposes nothing
        empty = v["policy"] == ker.POL_GIVEN or G == 0
        tab = np.empty((max(1, rows + empty), 2, max(n_flat, 1) if G or self.psd else 1), dtype=np.int8)
        if empty:
            tab[rows], rowof[:, 0] = 0, rows
        pad = padded_slots(G)
        drafts, dprofiles = [NO_DRAFTER] * pad, [NO_PROFILE] * pad  # slot g's cost and profile
        row = 0
        for g, name in enumerate(self.slots):
            cost = server.pricing.draft_costs[name]
            drafts[g] = cost.terms
            if cost.profile is not None:
                dprofiles[g] = profile_terms(cost.profile)
            lens, kmax = table.proposal_len.get(name), ks[g]
            acc_len = np.minimum(table.acc_len[name], kmax + 1).astype(np.int8)
            if lens is not None:
                lens = np.minimum(lens, kmax).astype(np.int8)
            for k in asks[g]:
                prop = proposed_tokens(k, lens) if lens is not None else np.int8(k)
                tab[row, 0] = prop
                tab[row, 1] = accepted_drafts(acc_len, prop)
                rowof[g, k] = row
                row += 1
        pf_order = np.array([self.slots.index(d) for d in used], dtype=np.int64)
        arms = time_plan(policy).drafters if v["policy"] == ker.POL_PLAN else getattr(policy, "drafters", ())
        self.arm_slot = np.array([self.slots.index(d) for d in arms] or [0],
                                 dtype=np.int64)  # a bandit's arms (its drafters' order; a plan's) -> slots
        # a drawing bandit's generator (advanced in place by the kernel's draws); any other run's is never drawn
        self.policy_rng = policy.rng if isinstance(policy, BanditPolicy) else server.drafting.rng
        self.settings = typed(Settings, **v)
        self.kernel_settings = settings_record(self.settings)  # the kernels' form (kernel_records.SETTINGS)
        self.first = server.drafting.first_flat.astype(np.int64)
        self.last = server.drafting.last_flat.astype(np.int64)
        tv = np.zeros((1, 1), dtype=np.float32)
        if v["sampled"] or v["bd"]:  # each slot's TV per flat position (Drafting refuses a drafter without)
            tv = np.stack([np.asarray(table.tv[name], dtype=np.float32) for name in self.slots])
        tree = server.drafting.tree
        if tree is None:
            shape = (np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros((1, 1, 1), np.int8), np.zeros(1, np.int64))
        else:  # each slot's rank rows, as deep as the tree (rules/tree.accept_tree reads no deeper)
            shape = (np.asarray(tree.parent, np.int32), np.asarray(tree.rank, np.int32),
                     np.stack([table.tree_rank[d][:, :tree.depth] for d in self.slots]),
                     np.asarray(server.pricing.tree_passes, np.int64))
        self.replay = Replay(tab=tab, rowof=rowof, cap=np.asarray(cap, dtype=np.int32), choice_slot=choice_slot,
                             choice_k=choice_k, tv=tv, rng=server.drafting.rng, policy_rng=self.policy_rng, batch_k=batch_k,
                             slot_k=slot_k,
                             **dict(zip(("tree_parent", "tree_rank", "tree_ranks", "tree_passes"), shape)))
        target = profile_terms(server.pricing.target)
        if any(pricing_rules.holds_rows(p.structured) for p in (target, *dprofiles)):  # a table: every record 2D,
            # one record type for the slots' tuple and one kernel build for all table runs
            target, *dprofiles = [p if pricing_rules.holds_rows(p.structured) else
                                  p._replace(structured=p.structured[None, :]) for p in (target, *dprofiles)]
        self.costs = Costs(target, tuple(drafts), tuple(dprofiles), pf_order)
        self.policy_kind = self.settings.policy
        # POL_GIVEN: each request's output position when the policy last chose for it (its feedback names it)
        self.positions = np.zeros(len(wl) if self.policy_kind == ker.POL_GIVEN else 0, dtype=np.int64)

    def _each_trace(self, what: str, table) -> Iterator[tuple[np.ndarray, slice]]:
        """For each trace the workload draws, the policy's `table(request id)` for the first request drawing it (a
        trace's table depends on it alone: a row per drafter or per field, each covering the trace) and the
        trace's flat positions."""
        srv = self.srv
        offsets, seen = srv.table.offsets, set()
        for rid, t in zip(srv.wl.request_ids, srv.wl.trace_index.tolist()):
            if t in seen:
                continue
            seen.add(t)
            lo, hi = int(offsets[t]), int(offsets[t + 1])
            rows = [np.asarray(row, dtype=np.int64) for row in table(rid)]
            if any(row.shape != (hi - lo,) for row in rows):
                raise ValueError(f"policy {srv.drafting.policy.name!r}: {what} of request {rid!r} gives "
                                 f"{[row.shape[0] if row.ndim else 0 for row in rows]} positions; its trace has "
                                 f"{hi - lo}")
            got = np.array(rows, dtype=np.int64).reshape(len(rows), hi - lo)
            yield got, slice(lo, hi)

    def _position_table(self, used: tuple[str, ...], n_flat: int) -> tuple[np.ndarray, np.ndarray]:
        """(slot or -1, k) at every flat trace position: the policy's position_choices for each trace."""
        slot_of = np.array([self.slots.index(d) for d in used], dtype=np.int64)
        choice_slot, choice_k = np.full(max(n_flat, 1), -1, dtype=np.int64), np.zeros(max(n_flat, 1), dtype=np.int64)
        for (d, k), at in self._each_trace("position_choices", self.srv.drafting.policy.position_choices):
            choice_slot[at] = np.where(d >= 0, slot_of[np.maximum(d, 0)], -1)
            choice_k[at] = k
        return choice_slot, choice_k

    def _plan_reach_table(self, follower, n_flat: int) -> np.ndarray:
        """The exact plan's reach of each of its drafters (rows in its drafters' order) at every flat trace position:
        PlanFollower.reach of each trace."""
        policy = self.srv.drafting.policy
        out = np.zeros((len(follower.drafters), max(n_flat, 1)), dtype=np.int64)
        for reach, at in self._each_trace("reach", lambda rid: follower.reach(policy.trace_of(rid))):
            out[:, at] = reach
        return out

    def _oracle_k_table(self, n_flat: int) -> np.ndarray:
        """The greedy oracle's oracle k of each slot at every flat trace position: its oracle_ks for each trace (rows
        in its drafters' order, here by slot)."""
        policy = self.srv.drafting.policy
        row_of = [policy.drafters.index(d) for d in self.slots]
        out = np.zeros((len(self.slots), max(n_flat, 1)), dtype=np.int64)
        for ks, at in self._each_trace("oracle_ks", policy.oracle_ks):
            out[:, at] = ks[row_of]
        return out

    def policy_state(self, n: int) -> PolicyState:
        """The kernel's PolicyState for `n` requests, fresh or from the policy's shared state (_estimates,
        _bandit_state); the greedy oracle's last choices from none."""
        import simulator.engine.compiled_kernel as ker

        per_request = self.policy_kind == ker.POL_GIVEN or (self.psd and self.policy_kind in (ker.POL_ADAPTIVE,
                                                                                            ker.POL_BANDIT))
        chosen = np.full(n if per_request or self.policy_kind == ker.POL_GREEDY_ORACLE else 1, -1, dtype=np.int64)
        chosen_k = np.zeros(n if per_request else 1, dtype=np.int64)
        return PolicyState(*self._estimates(n), *self._bandit_state(n), self.arm_slot,
                           np.zeros(len(self.slots) + 1, dtype=np.int64), chosen, chosen_k, *self._plan_rows(n))

    def _plan_rows(self, n: int) -> tuple[np.ndarray, ...]:
        """min-time's plans (PolicyState.plan_*), none made yet: one row per request that can hold one at a time
        (those that began decoding and have not finished; FIFO admission keeps them within max_num_seqs), each as
        long as the workload's longest trace."""
        import simulator.engine.compiled_kernel as ker

        self.plans_written = np.zeros(n, dtype=bool)  # the plans written back (_write_plans)
        if self.policy_kind != ker.POL_PLAN:
            return (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros((1, 1), np.int64),
                    np.zeros((1, 1), np.int64), np.zeros((1, 1)))
        rows = max(1, min(n, self.srv.max_num_seqs))
        width = int((self.last - self.first).max(initial=0)) + 1
        free = np.concatenate([[rows], np.arange(rows)]).astype(np.int64)
        return (np.full(n, -1, np.int64), free, np.zeros((rows, width), np.int64), np.zeros((rows, width), np.int64),
                np.zeros((rows, width + 1)))

    def _psd_records(self, side: np.ndarray) -> None:
        """PSD's kernel records for requests numbered as `side` (each one's sub-batch, written in place): no proposal
        pending and side 0 verified first (a server's run starts before any step), no fallback step yet."""
        import simulator.engine.compiled_psd_kernel as pker

        srv, n = self.srv, len(side)
        cfg = srv.scenario.psd
        self.psd_cfg = typed(PSDSettings, split_min=cfg.split_min_batch, defer_kv=cfg.defer_kv, sync_s=cfg.sync_s)
        self.psd_state = new_state(PSD_STATE, side=0, fallback=0)
        self.carry = PSDCarry(side, np.full(n, pker.NONE, dtype=np.int64), *(np.zeros(n, dtype=np.int64)
                                                                            for _ in range(3)))
        self.psd_scratch = psd_scratch(srv.max_num_seqs, 0 if self.slots else pker.NONE)

    def _write_psd(self, mine, theirs) -> None:
        """The PSD kernel's carry (its requests `theirs` are the kernel's `mine`: each one's pending proposal) and
        fallback count, into the server's state and step log."""
        srv, carry = self.srv, self.carry
        st = srv.state
        pend = carry.pend[mine]
        st.pending_d[theirs] = np.asarray(self.drafter_idx + [NO_DRAFT])[pend]  # pker.NONE (-1): NO_DRAFT
        st.pending_k[theirs], st.pending_prop[theirs] = carry.pend_k[mine], carry.pend_p[mine]
        srv.log.psd_fallback_steps = int(self.psd_state[0].fallback)

    def _kernel(self, work, state, req, pol, bufs, scratch, stop: int, until: float) -> int:
        """One kernel call (the PSD kernel or run_steps) over the given records; returns its code."""
        import simulator.engine.compiled_kernel as ker

        if self.psd:
            import simulator.engine.compiled_psd_kernel as pker

            kernel = pker.run_psd_steps
            args = (work, self.replay, self.costs, self.kernel_settings, self.psd_cfg, state, self.psd_state,
                    self.carry, req, pol, bufs, scratch, self.psd_scratch, stop, until)
        else:
            kernel = ker.run_steps
            args = (work, self.replay, self.costs, self.kernel_settings, state, req, pol, bufs, scratch, stop, until)
        self.kernel_calls += 1
        if self.steps_entry is not None:
            return self.steps_entry(*args)
        code = kernel(*args)
        if self.policy_kind == ker.POL_GIVEN:  # a call a step from here on
            self.steps_entry = entry_point(kernel, args)
        return code

    def _bandit_state(self, n: int) -> tuple[np.ndarray, ...]:
        """A bandit's per-(state, arm) arrays and sliding-window ring (PolicyState's arm_counts to seen): per request
        fresh (start_request; Thompson's from its priors), or copies of the policy's shared state."""
        import simulator.engine.compiled_kernel as ker

        policy = self.srv.drafting.policy
        none = (np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1)),
                np.zeros(1, dtype=np.int64))
        if self.policy_kind != ker.POL_BANDIT:
            return none
        # each state's arrays start as the policy's shared state, or as a new state (Thompson's priors)
        shared = policy.scope == "shared"
        start = policy.state("") if shared else policy.new_state()
        rows = 1 if shared else n
        first, second = np.tile(start.first, (rows, 1)), np.tile(start.second, (rows, 1))
        if start.ring_arm is None:
            return (first, second) + none[2:]
        return (first, second, np.tile(start.ring_arm, (rows, 1)), np.tile(start.ring_reward, (rows, 1)),
                np.tile(start.seen, rows))

    def _estimates(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The acceptance estimates (successes, failures): adaptive-k's per request from zero (start_request resets
        them; each request starts once: a preempted one keeps its estimate) or the policy's shared one;
        combine-adaptive's two per request (2 i + slot), from zero."""
        import simulator.engine.compiled_kernel as ker

        policy = self.srv.drafting.policy
        if self.policy_kind == ker.POL_RATE:
            return np.zeros(2 * n), np.zeros(2 * n)
        if self.policy_kind != ker.POL_ADAPTIVE:
            return np.zeros(1), np.zeros(1)
        if policy.scope == "shared":
            est = policy.estimate("")
            return np.array([est.successes]), np.array([est.failures])
        return np.zeros(n), np.zeros(n)

    def run(self, stop: Callable[[int], bool] | None = None, check_every: int = 1,
            next_check: Callable[[], int] | None = None) -> float | None:
        """Step the whole run (or until `stop(n_finished)` is true, asked every `check_every` finishes, or when
        `next_check()` finishes have happened if given); returns the simulated time it ends at. While `stop` is asked, `self.now` is the kernel's
        clock and the server's state holds every finish up to it."""
        import simulator.engine.compiled_kernel as ker

        srv = self.srv
        st, wl, n = srv.state, srv.wl, len(srv.wl)
        arr = srv.arrivals
        state = new_state(submitted=arr.submitted, now=srv.env.now)
        rec = state[0]  # the kernel's scalars, read and reset here between calls
        client_of = arr.client_of if self.closed else np.zeros(1, dtype=np.int64)
        # the request state the kernel writes (in place: a step hook's snapshot reads it mid-run)
        req = Requests(st.run, st.gen, st.prefill_left, st.prefill_done, st.blocks, st.last_emit, st.first_sched,
                       st.first_token, st.finish, *(np.zeros(n, dtype=np.int64) for _ in range(3)),
                       self.last_slots(st.last_drafter), st.preemptions, st.requeued)
        pol = self.policy_state(n)
        work = Workload(st.arrival, client_of, wl.prompt_len.astype(np.int64), wl.output_len.astype(np.int64),
                        self.first, self.last)
        if self.psd:
            self._psd_records(st.sub_batch)  # sides written in place
        # the ITL gaps go straight into one array with room for every gap the run can make (a request's first token
        # makes none, each later step of it one), so no segment of them is copied; rows go out a segment at a time
        gaps = int(np.maximum(wl.output_len.astype(np.int64) - 1, 0).sum()) + srv.max_num_seqs
        bufs = step_buffers(segment_rows(), gaps)
        scratch = scratch_buffers(srv.max_num_seqs, self.settings.k_max, len(self.slots))
        blocks_row, itl_parts = [], []

        def ask_at(done: int) -> int:
            return min(n, next_check() if next_check is not None else done + check_every)

        stop_at = n if stop is None else ask_at(0)
        self.running, self.now = True, float(rec.now)
        while True:
            code = self.call(work, state, req, pol, bufs, scratch, stop_at, math.inf)
            r, ni = int(rec.rows), int(rec.itl)
            n_fin = int(rec.finished)
            self.now = float(rec.now)  # the end of the step just taken: the state is complete up to it
            st.n_finished = n_fin
            if srv.on_step is not None and code == ker.DONE:  # told at the end; mid-run through `stop` (Server)
                srv.on_step(n_fin)
            last = code == ker.DONE or (code == ker.STOPPED and stop(n_fin))
            if last:  # the buffers are not reused: keep views
                blocks_row.append(rows_head(bufs.rows, r))
                itl_parts.append(bufs.itl[:ni])
                break
            if code == ker.FULL:  # rows stay in the buffer across the checks (STOPPED) until it is full
                blocks_row.append(rows_head(bufs.rows, r, copy=True))
                rec.rows = 0
                if ni + srv.max_num_seqs > len(bufs.itl):  # no room for another step's gaps (not expected): start over
                    itl_parts.append(bufs.itl[:ni].copy())
                    rec.itl = 0
            if code == ker.STOPPED:
                stop_at = ask_at(n_fin)
        self.running = False
        self._write(rec, req, pol.usage, blocks_row, itl_parts)
        self._write_last_drafter(req.last_slot, np.arange(n))
        if self.psd:  # sub_batch was written in place
            self._write_psd(slice(None), slice(None))
        self._write_policy(pol, req.run[:int(rec.n_run)], self.first, self.last)
        return float(rec.now)

    def call(self, work: Workload, state, req: Requests, pol: PolicyState, bufs, scratch: Scratch, stop: int,
             until: float) -> int:
        """Kernel calls until one returns DONE, FULL or STOPPED (a Python policy hears of each step and chooses
        for the next between them: _heard, _choose); a kernel's error raised."""
        import simulator.engine.compiled_kernel as ker

        scalars = state.view(np.ndarray)[0]  # the same record, its fields read and written faster (np.void)
        while True:
            code = self._kernel(work, state, req, pol, bufs, scratch, stop, until)
            if self.policy_kind == ker.POL_GIVEN:
                if scalars["pending"]:
                    self._heard(scalars, req, scratch)
                    scalars["pending"] = 0
                if code in (ker.CHOOSE, ker.HEAR):
                    if code == ker.CHOOSE:
                        self._choose(work, state, scalars, req, pol, scratch)
                    continue
            if code == ker.ERR_PLAN_COSTS:
                raise self.plan_costs_error(scratch, pol)
            if code < 0:
                what = "stalled" if code == ker.ERR_STALL else f"returned {code}"
                raise RuntimeError(f"compiled engine{self.where}: {what} at t={float(scalars['now']):.6f}s (a bug: "
                                   "please report it with the config)")
            return code

    def _write_policy(self, pol: PolicyState, running: np.ndarray, first: np.ndarray, last: np.ndarray) -> None:
        """The policy's state the kernel kept (PolicyState) back into the policy: its estimates, a bandit's
        statistics, the greedy oracle's last drafters and min-time's plans (`running`: the kernel's requests still
        running; `first`, `last`: each kernel request's trace positions)."""
        self._write_estimates(pol.est_s, pol.est_f, running)
        self._write_bandit(pol, running)
        self._write_chosen(pol.chosen, running)
        self._write_plans(pol, first, last)

    def _choose(self, work: Workload, state, scalars, req: Requests, pol: PolicyState, scratch: Scratch) -> None:
        """The Python policy's choices for the step the kernel paused in (CHOOSE, at its start `now`): the step
        path's Drafting.choose over the decoding requests (running, no prompt left, admission order), its
        step-time estimates the kernel's (compiled_kernel.step_time_estimate); each request's slot and k into
        PolicyState for the kernel to take."""
        import simulator.engine.compiled_kernel as ker

        srv = self.srv
        running = req.run[:int(scalars["n_run"])]
        dec = running[req.prefill_left[running] == 0]
        kv = int((work.prompt[dec] + req.gen[dec]).sum())
        ask = dec
        if self.psd:  # the requests the PSD kernel asks about (its list, compiled_psd_kernel._asked); the
            # estimates over every decoding request, pipelined
            ask = self.psd_scratch.ask[:int(self.psd_state[0].asked)].copy()
        policy, slot_of, k_max = srv.drafting.policy, {d: g for g, d in enumerate(self.slots)}, self.settings.k_max

        def estimate(drafter: str | None, k: int) -> float:
            k = k if drafter is not None else 0
            if drafter is not None and drafter not in slot_of or not 0 <= k <= k_max or int(k) != k:
                raise ValueError(f"policy {policy.name!r} asked for a step-time estimate at drafter {drafter!r}, "
                                 f"k = {k!r}; expected a drafter of its drafters_used() {list(policy.drafters_used())}"
                                 f" and k in 0..{k_max} (its max_draft_tokens())")
            args = (work, self.costs, self.kernel_settings, state, req, scratch, len(dec), kv,
                    slot_of.get(drafter, 0), int(k), self.psd)
            if self.estimate_entry is None:
                t = ker.step_time_estimate(*args)
                self.estimate_entry = entry_point(ker.step_time_estimate, args)
            else:
                t = self.estimate_entry(*args)
            return checked(float(t), f"drafter {drafter!r} draft cost or the prompt pass of drafters "
                                     f"{list(policy.drafters_used())}")

        d_idx, k = srv.drafting.choose(self.gidx[ask], float(scalars["now"]), estimate, req.gen[ask])
        slot = self.slot_of_drafter[d_idx]
        if (slot == UNUSED_SLOT).any():
            d = srv.table.drafters[int(d_idx[slot == UNUSED_SLOT][0])]
            raise ValueError(f"policy {policy.name!r} chose drafter {d!r}, which its drafters_used() "
                             f"{list(policy.drafters_used())} does not name")
        pol.chosen[ask], pol.chosen_k[ask] = slot, k
        self.positions[ask] = req.gen[ask]
        scalars["given"] = 1

    def _heard(self, scalars, req: Requests, scratch: Scratch) -> None:
        """What the Python policy is told after a step, at the kernel's next return (RUN_STATE `pending`): its
        decodes' feedback (the drafting ones, Scratch.heard; positions before the
        step), then each request whose prompt ended, started once (`start_request`), then each finished one that had
        started (`finish_request`), in the kernel's order."""
        srv = self.srv
        st, drafting, ids = srv.state, srv.drafting, srv.wl.request_ids
        n_dec = int(scalars["decoded"])
        slot, k, prop, acc = scratch.slot, scratch.kk, scratch.prop, scratch.acc  # PSD: the verified side's
        if self.psd:
            side = self.psd_scratch
            slot, k, prop, acc = side.v_slot, side.v_k, side.v_prop, side.v_acc
        drafted = slot[:n_dec] >= 0
        if drafting.learns and drafted.any():
            dec = scratch.heard[:n_dec][drafted]
            drafting.feedback(self.gidx[dec], self.positions[dec],
                              np.asarray(self.drafter_idx)[slot[:n_dec][drafted]], k[:n_dec][drafted],
                              prop[:n_dec][drafted], acc[:n_dec][drafted], float(scalars["forward"]))
        policy = drafting.policy
        pre = scratch.plan.request[:int(scalars["prefilled"])]
        for i in pre[req.prefill_left[pre] == 0].tolist():
            w = int(self.gidx[i])
            if not st.started[w]:
                st.started[w] = True
                policy.start_request(ids[w])
        for i in scratch.done[:int(scalars["ended"])].tolist():
            w = int(self.gidx[i])
            if st.started[w]:
                policy.finish_request(ids[w])

    def last_slots(self, last_drafter: np.ndarray) -> np.ndarray:
        """Each request's last drafter (RequestState.last_drafter, a drafter index or NO_DRAFT) as the kernel's slot:
        -1 before any draft; UNUSED_SLOT, a slot no group has, for a drafter the policy does not use."""
        return self.slot_of_drafter[last_drafter]

    def _write_last_drafter(self, last_slot: np.ndarray, theirs: np.ndarray) -> None:
        """The kernel's last drafter slots (of the requests `theirs`, workload indices, in order) into
        RequestState.last_drafter, which the switching cost reads; written only when it is charged."""
        if self.settings.switch_cost > 0:
            known = (last_slot >= 0) & (last_slot < len(self.drafter_idx))
            self.srv.state.last_drafter[theirs[known]] = np.asarray(self.drafter_idx, dtype=np.int64)[last_slot[known]]

    def _write_bandit(self, pol: PolicyState, running: np.ndarray) -> None:
        """A bandit's statistics back into the policy: the shared state, or those of requests still decoding."""
        import simulator.engine.compiled_kernel as ker

        if self.policy_kind != ker.POL_BANDIT:
            return
        policy, st, ids = self.srv.drafting.policy, self.srv.state, self.srv.wl.request_ids
        if policy.scope == "shared":
            _put_bandit(policy.state(""), pol, 0)
            return
        for i in running:
            w = self.gidx[i]
            if not np.isnan(st.first_token[w]):
                _put_bandit(policy.state(ids[w]), pol, i)

    def _write_chosen(self, chosen: np.ndarray, running: np.ndarray) -> None:
        """The greedy oracle's last drafter of each request still decoding back into the policy (finished ones are
        dropped, as finish_request does)."""
        import simulator.engine.compiled_kernel as ker

        if self.policy_kind != ker.POL_GREEDY_ORACLE:
            return
        policy, st, ids = self.srv.drafting.policy, self.srv.state, self.srv.wl.request_ids
        for i in running:
            w = self.gidx[i]
            if chosen[i] >= 0 and np.isnan(st.finish[w]):
                policy.remember_drafter(ids[w], self.slots[chosen[i]])

    def plan_costs_error(self, scratch: Scratch, pol: PolicyState) -> ValueError:
        """min-time refused the step-time estimates of a request's first decode step (ERR_PLAN_COSTS): the error
        StepCosts raises there, naming the request and the estimates (the kernel left them in `scratch`; the request
        is the step's first decode without a plan)."""
        policy = self.srv.drafting.policy
        i = next(int(i) for i in scratch.dec if pol.plan_row[i] < 0)
        rid = self.srv.wl.request_ids[self.gidx[i]]
        drafted = "; ".join(f"{d}: {scratch.price[a, 1:].tolist()}" for a, d in enumerate(time_plan(policy).drafters))
        return ValueError(f"policy {policy.name!r}, plan 'min-time': the step-time estimates at request {rid!r}'s "
                          f"first decode step must be finite and > 0 and must not decrease with k (plain decoding "
                          f"{float(scratch.times[0, 0])!r}; drafting k = 1, 2, ...: {drafted})")

    def _write_plans(self, pol: PolicyState, first: np.ndarray, last: np.ndarray) -> None:
        """min-time's plans of the requests not finished back into the policy's follower, each once
        (PlanFollower.adopt; `first`, `last`: each kernel request's trace positions)."""
        import simulator.engine.compiled_kernel as ker

        if self.policy_kind != ker.POL_PLAN:
            return
        follower, ids = time_plan(self.srv.drafting.policy), self.srv.wl.request_ids
        held, written = pol.plan_row >= 0, self.plans_written  # a replica settles again and again
        for i in np.flatnonzero(held & ~written).tolist():
            row, n_i = pol.plan_row[i], int(last[i] - first[i]) + 1
            follower.adopt(ids[self.gidx[i]], pol.plan_d[row, :n_i], pol.plan_k[row, :n_i],
                           pol.plan_value[row, :n_i + 1])
        self.plans_written = held | written

    def _write_estimates(self, est_s: np.ndarray, est_f: np.ndarray, running: np.ndarray) -> None:
        """The acceptance estimates back into the policy: adaptive-k's shared one, or those of requests still decoding
        (a finished request's is dropped, as finish_request does), one per drafter for combine-adaptive."""
        import simulator.engine.compiled_kernel as ker

        if self.policy_kind not in (ker.POL_ADAPTIVE, ker.POL_RATE):
            return
        policy, st, ids = self.srv.drafting.policy, self.srv.state, self.srv.wl.request_ids
        if self.policy_kind == ker.POL_ADAPTIVE and policy.scope == "shared":
            est = policy.estimate("")
            est.successes, est.failures = float(est_s[0]), float(est_f[0])
            return
        for i in running:
            w = self.gidx[i]
            if np.isnan(st.first_token[w]):
                continue
            if self.policy_kind == ker.POL_ADAPTIVE:
                est = policy.estimate(ids[w])
                est.successes, est.failures = float(est_s[i]), float(est_f[i])
                continue
            for g, name in enumerate(self.slots):
                est = policy.estimates(ids[w])[name]
                est.successes, est.failures = float(est_s[2 * i + g]), float(est_f[2 * i + g])

    def _write(self, rec, req: Requests, usage: np.ndarray, blocks_row, itl_parts) -> None:
        """The kernel's outcome (`rec`: its RUN_STATE record; `req`: its per-request arrays) into the server's state,
        counters, KV pool, ITL and step records."""
        srv = self.srv
        st, log = srv.state, srv.log
        ptr = int(rec.ptr)
        srv.arrivals.resume(ptr, int(rec.submitted))  # a closed loop's clients number their requests in order
        st.n_run, st.nq, st.admit, st.ptr = int(rec.n_run), int(rec.requeued), int(rec.admit), ptr  # in place
        st.started[~np.isnan(st.first_token)] = True
        st.n_finished = int(rec.finished)
        self._add_counts(self.gidx, req.dsteps, req.dprop, req.dacc, usage, rec)
        # one chunk or block per kernel segment: the ITL array and the steps table join them once, at the end
        log.itl_chunks.extend(part for part in itl_parts if len(part))
        for rows in blocks_row:
            if len(rows.step):
                log.steps.append_columns(self._columns(rows))

    def _add_counts(self, requests: np.ndarray, dsteps, dprop, dacc, usage: np.ndarray, rec) -> None:
        """Draft steps, proposed and accepted drafts of `requests` (workload indices) and each slot's uses added to
        the server's counters; the KV pool's use and peak and the step count as the kernel's `rec` holds them."""
        srv = self.srv
        st, pool = srv.state, srv.sched.pool
        drafted = bool(self.slots)
        st.verify_counts.add_run(requests, dsteps, dprop if drafted else None, dacc if drafted else None)
        for g, di in enumerate(self.drafter_idx):
            st.usage[di] += int(usage[g])
        st.usage[-1] += int(usage[-1])
        pool.used, pool.peak = int(rec.used), max(pool.peak, int(rec.peak))
        srv.log.step_no = int(rec.step)

    def _drafter_names(self, codes: np.ndarray) -> np.ndarray:
        """The drafters column's strings of compiled_kernel's codes over the run's G slots: a bit per slot that
        drafted; bit G the prompt pass's drafters; bit G + 1 + g slot g's proposer, named after them. Each code's
        string is made once per run; the column gathers them."""
        G = len(self.slots)
        found, at = np.unique(codes, return_inverse=True)
        for code in found.tolist():
            if code not in self._names:
                drafted = [d for g, d in enumerate(self.slots) if code >> g & 1]
                ran = [d for g, d in enumerate(self.slots) if code >> (G + 1 + g) & 1]
                self._names[code] = self.pass_names if code == 1 << G else "+".join(drafted + ran)
        return np.array([self._names[c] for c in found.tolist()], dtype=object)[at]

    def _columns(self, rows: StepRows) -> dict[str, np.ndarray]:
        """Step-table columns (records.STEP_COLUMNS) of the kernel's rows."""
        S = len(rows.step)
        phases = np.array(PHASES, dtype=object)
        # strings by a gather from a few objects (np.full fills object arrays one Python object at a time)
        dev = rows.device.astype(np.intp) if self.psd else np.zeros(S, dtype=np.intp)  # PSD's rows only
        sub = rows.sub_batch if self.psd else np.full(S, -1, dtype=np.int64)
        return {"step": rows.step, "device": np.array(["target", "drafter"], dtype=object)[dev],
                "phase": phases[rows.phase], "start": rows.start, "end": rows.end, "num_seqs": rows.num_seqs,
                "prefill_tokens": rows.prefill_tokens, "batched_tokens": rows.batched_tokens,
                "kv_tokens": rows.kv_tokens, "kv_blocks_used": rows.kv_blocks_used,
                "proposed_tokens": rows.proposed_tokens, "accepted_tokens": rows.accepted_tokens,
                "emitted_tokens": rows.emitted_tokens, "sub_batch": sub,
                "drafters": self._drafter_names(rows.drafters)}
