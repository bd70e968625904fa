"""The compiled kernels' arguments as a few named records (compiled_kernel.run_steps,
compiled_psd_kernel.run_psd_steps).

NamedTuples of arrays or typed scalars (numba compiles them as they are; plain Python reads the same fields with its
JIT off) and one-record structured arrays for the scalars a kernel call leaves behind (a numpy record array: `st =
state[0]; st.ptr = ...` writes through, compiled or plain). The types are fixed here, once, and `typed` coerces every
scalar to its field's type, so each run passes the same numba types and the cached kernels never recompile per run.
This module imports no numba: compiled_run builds the records before it imports the kernels.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple, get_type_hints

import numpy as np

from simulator.engine.rules.prefill_plan import PlanBuffers, plan_buffers

if TYPE_CHECKING:
    from simulator.engine.rules.pricing import DraftTerms, ProfileTerms


class Workload(NamedTuple):
    """The requests the kernel knows, in its numbering: arrival times (a closed loop appends its next submissions),
    each one's client (closed loop), prompt and output lengths, and the first / last flat trace positions."""
    arrival: np.ndarray  # float64
    client_of: np.ndarray  # int64; one element outside a closed loop
    prompt: np.ndarray  # int64
    out: np.ndarray  # int64
    first: np.ndarray  # int64
    last: np.ndarray  # int64


class Replay(NamedTuple):
    """The acceptance replay precomputed by traces/acceptance.py: `tab[rowof[g, k], 0 / 1, f]` the proposed /
    accepted drafts when drafter slot g is asked for k at flat trace position f; `cap[f]` the n-gram match length a
    policy reads; `choice_slot[f]`, `choice_k[f]` the (slot or -1, k) a policy that chooses by position alone takes
    at f (oracle/ground_truth.py position_choices); `tv` and `rng`: sampled verification's and the BD reward's
    (traces/sampled_acceptance.py); `policy_rng`: a drawing bandit's generator (here, not in PolicyState, which a
    cluster's loop rebuilds per replica step); `tree_*`: a static draft tree's shape and rank rows (rules/tree.py);
    `batch_k[n]`: the k a policy that chooses by batch size alone takes when n requests decode (policies/k_by_batch.py);
    `slot_k[g, f]`: the greedy oracle's k for slot g at f (oracle/best_drafter.py oracle_ks), or the exact plan's
    reach of the policy's g-th drafter (POL_PLAN: oracle/exact.py PlanFollower.reach)."""
    tab: np.ndarray  # int8 (rows, 2, flat positions)
    rowof: np.ndarray  # int64 (slots, k + 1)
    cap: np.ndarray  # int32
    choice_slot: np.ndarray  # int64
    choice_k: np.ndarray  # int64
    tv: np.ndarray  # float32 (slots, flat positions): TV per position (sampled verification, the BD reward)
    tree_parent: np.ndarray  # int32 (nodes): a static draft tree's parent per node (traces/tree.TreeShape)
    tree_rank: np.ndarray  # int32 (nodes): its rank among its parent's children
    tree_ranks: np.ndarray  # int8 or int16 (slots, flat positions, tree depth): rank rows (AcceptanceTable.tree_rank)
    tree_passes: np.ndarray  # int64 (depth): nodes with children per depth (TreeShape.draft_pass_tokens)
    batch_k: np.ndarray  # int64 (max_num_seqs + 1): k-by-batch's k at each count of decoding requests
    slot_k: np.ndarray  # int64 (slots, flat positions): the greedy oracle's oracle k of each slot (POL_PLAN: reach)
    rng: np.random.Generator  # sampled verification's draws (the server's generator, advanced in place)
    policy_rng: np.random.Generator  # a drawing bandit's own (BanditPolicy.rng, advanced in place)


class Costs(NamedTuple):
    """The step prices' records: the target's profile (rules.pricing.ProfileTerms), each drafter slot's draft cost
    (DraftTerms) and profile, padded to a multiple of compiled_run.SLOT_PAD, and the prompt passes in the policy's
    order."""
    target: ProfileTerms
    drafts: tuple[DraftTerms, ...]
    dprofiles: tuple[ProfileTerms, ...]
    pf_order: np.ndarray  # int64 slot indices


class Settings(NamedTuple):
    """The run's fixed settings (server, scheduler, policy), one typed scalar per field; the kernels take them as a
    one-record SETTINGS array (settings_record)."""
    sd: bool  # mode sd (a decode step's rows are verify rows)
    policy: int  # compiled_kernel POL_FIXED, _ADAPTIVE, _COMBINE, _BANDIT, _TABLE, _BATCH, _RATE, _GREEDY_ORACLE, _PLAN
    # or _GIVEN
    k: int  # the fixed policy's and a bandit's k
    nslot: int  # drafter slots (0: plain decoding)
    k_max: int  # the largest k a step estimate asks for (Scratch.times): adaptive-k's k_max, combine-adaptive's k,
    # the greedy oracle's largest oracle k
    max_seqs: int  # max_num_seqs
    budget: int  # max_num_batched_tokens
    chunked: bool  # chunked prefill
    separate: bool  # prefill: separate (prompt-only steps)
    block_size: int  # KV block size in tokens
    total_blocks: int  # the KV pool's blocks
    closed: bool  # a closed loop (each finish submits its client's next request after `think`)
    shared: bool  # the policy keeps one shared state (else one per request)
    has_cap: bool  # adaptive-k caps k at the n-gram match length `Replay.cap`
    min_match: int  # combine-match's rule
    k_ngram: int
    k_eagle: int
    ngram_slot: int  # combine-match's n-gram drafter slot
    proposers: int  # a mask of the slots whose cost is `engine_step` (vLLM V1's proposer, priced per step)
    arms: int  # a bandit's arms; the greedy oracle's drafters (PolicyState.arm_slot: their slots in its order)
    bandit: int  # POL_BANDIT's rule (policies/bandit_rules.B_UCB ... B_EXP3); beta to exp3_gamma: its BanditRule's
    decode_budget: int  # the tokens decodes may take from the step budget (rules/decode_budget.decode_side_budget)
    lookahead: int  # vLLM V1's lookahead KV slots per running request (rules/kv.lookahead_slots)
    async_sched: bool  # async scheduling (rules/engine_loop.overlapped_gap)
    routed: bool  # the caller pushes arrivals (a cluster replica): idle with none known, the kernel returns PAUSED
    overhead: float  # the step overhead (seconds)
    switch_cost: float  # a drafter's catch-up cost when a request changes drafter (run.switch_cost_s; 0: none)
    oracle_switch: float  # the greedy oracle's switching cost in its choice (OracleBestDrafterPolicy.switch_cost_s)
    think: float  # the closed loop's think time
    prior: float  # adaptive-k's acceptance estimate prior (combine-adaptive's n-gram's), its weight and decay
    prior_eagle: float  # combine-adaptive's EAGLE prior
    prior_weight: float
    decay: float
    beta: float  # UCB's exploration weight
    discount: float  # discounted UCB's gamma (1.0: none)
    epsilon: float  # epsilon-greedy's exploration probability
    exp3_gamma: float  # EXP3's exploration mix
    gap: float  # vLLM V1's engine-loop gap between busy steps (Server.gap_s)
    sampled: bool  # sampled verification: each kept draft accepted with probability 1 - tv (Replay.tv, rng)
    bd: bool  # a bandit's reward is MetaSD's block divergence over Replay.tv (else block efficiency)
    tree: bool  # the fixed policy drafts a static tree (Replay.tree_*): accepted by rank rows, drafted per depth


class PSDSettings(NamedTuple):
    """Two-batch PSD's fixed settings (simulator/server_config PSD block)."""
    split_min: int  # split_min_batch: fewer decoding requests verify as plain SD
    defer_kv: bool  # the drafted side holds KV for its drafts
    sync_s: float  # the sync after both devices finish


class Requests(NamedTuple):
    """The per-request state the kernel writes in place (kernel numbering) and the running array (admission
    order): tokens generated, prompt left / done, KV blocks held, times, the verify counters, the last drafter,
    preemptions, and the preempted requests waiting ahead of the arrivals (RUN_STATE `requeued` of them; the waiting
    queue is requeued[:requeued] then the arrivals admit..ptr-1, in index order: rules/queue.py)."""
    run: np.ndarray  # int64, max_num_seqs
    gen: np.ndarray
    prefill_left: np.ndarray
    prefill_done: np.ndarray
    blocks: np.ndarray
    last_emit: np.ndarray  # float64
    first_sched: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    dsteps: np.ndarray  # int64: verify steps, proposed and accepted drafts per request
    dprop: np.ndarray
    dacc: np.ndarray
    last_slot: np.ndarray  # int64: the drafter slot each request last drafted with, -1 before (switching cost)
    preempted: np.ndarray  # int64: preemptions per request
    requeued: np.ndarray  # int64, max_num_seqs: the preempted requests at the waiting queue's front, in order


class PolicyState(NamedTuple):
    """The built-in policies' learning state, written in place: adaptive-k's estimates (one per request, or one
    shared; combine-adaptive: two per request, request i's of slot g at 2 i + g), a bandit's two per-(state, arm)
    arrays (UCB and epsilon-greedy: play counts and reward sums; Thompson: alpha and beta; EXP3: -, log weights) and
    sliding-window UCB's ring of rounds, each arm's drafter slot, the steps each slot (last: no drafter) served,
    the greedy oracle's last chosen slot per request (a drawing bandit's generator: Replay.policy_rng) and the exact
    plans of min-time (POL_PLAN): each request's row of them (-1 before its first decode), the free rows (plan_free[0]
    of them, in plan_free[1:]) and per row the action (drafter in the policy's order or -1, k) and cost to go by
    position."""
    est_s: np.ndarray
    est_f: np.ndarray
    arm_counts: np.ndarray
    arm_sums: np.ndarray
    ring_arm: np.ndarray  # int64 (states, window): sliding-window UCB's arm of round s at s % window
    ring_reward: np.ndarray  # float64 (states, window): and its reward
    seen: np.ndarray  # int64 (states): its rounds so far
    arm_slot: np.ndarray  # int64
    usage: np.ndarray  # int64, slots + 1
    chosen: np.ndarray  # int64: the greedy oracle's last drafter slot per request, -1 before (switching cost); a
    # Python policy's (POL_GIVEN) or PSD adaptive-k's slot for each request of the step about to run
    chosen_k: np.ndarray  # int64: and its k (POL_GIVEN, PSD adaptive-k; else one entry)
    plan_row: np.ndarray  # int64 (requests)
    plan_free: np.ndarray  # int64 (rows + 1)
    plan_d: np.ndarray  # int64 (rows, positions)
    plan_k: np.ndarray  # int64 (rows, positions)
    plan_value: np.ndarray  # float64 (rows, positions + 1)


class StepRows(NamedTuple):
    """The step table's columns the kernels fill, one array each, a row per slice of a step (records.STEP_COLUMNS'
    names; phase as compiled_kernel's P_* code, drafters as its bit code)."""
    step: np.ndarray  # int64
    phase: np.ndarray
    num_seqs: np.ndarray
    prefill_tokens: np.ndarray
    batched_tokens: np.ndarray
    kv_tokens: np.ndarray
    kv_blocks_used: np.ndarray
    proposed_tokens: np.ndarray
    accepted_tokens: np.ndarray
    emitted_tokens: np.ndarray
    drafters: np.ndarray
    start: np.ndarray  # float64
    end: np.ndarray
    device: np.ndarray  # int64, PSD's only (0 target, 1 drafter)
    sub_batch: np.ndarray  # int64, PSD's only


class StepBuffers(NamedTuple):
    """The kernel's output buffers: the step rows and the ITL gaps."""
    rows: StepRows
    itl: np.ndarray


def step_buffers(rows: int, gaps: int, replicas: int | None = None) -> StepBuffers:
    """Empty buffers for `rows` step rows and `gaps` ITL gaps (untouched pages cost nothing); with `replicas`, one
    of each per replica along a first axis (a cluster's stacked buffers)."""
    floats = ("start", "end")
    lead = () if replicas is None else (replicas,)
    return StepBuffers(StepRows._make(np.empty(lead + (rows,), dtype=np.float64 if f in floats else np.int64)
                                      for f in StepRows._fields), np.empty(lead + (gaps,)))


class Scratch(NamedTuple):
    """run_steps' per-step working arrays (int64, one entry per running sequence; `times`: k_max + 1 floats per
    drafter slot; `plan`:
    the step's prefill plan), made once per run rather than per call: nothing in them outlives a step, so a
    cluster's replicas, whose calls never overlap, share one set sized for the largest."""
    dec: np.ndarray
    ctx: np.ndarray
    flat: np.ndarray
    slot: np.ndarray
    kk: np.ndarray
    prop: np.ndarray
    acc: np.ndarray
    cut: np.ndarray
    waitq: np.ndarray
    done: np.ndarray  # the step's finished requests, in the order the rules finish them (a cluster reads the last
    # step's)
    newb: np.ndarray
    hold: np.ndarray
    run_extra: np.ndarray  # the KV growth of each running request (admission order) when a step must preempt
    times: np.ndarray  # float64 (slots, k_max + 1)
    price: np.ndarray  # float64 (slots, k_max + 1): the exact plan's costs, in its drafters' order (POL_PLAN)
    plan: PlanBuffers
    reward: np.ndarray  # float64: each decode's bandit reward, read before its tokens move its position
    heard: np.ndarray  # the last step's decodes, kept for a Python policy's feedback (POL_GIVEN)
    played: np.ndarray  # each decode's bandit arm this step, -1 where it learns nothing (bandit_updates)


def scratch_buffers(max_seqs: int, k_max: int, slots: int = 1) -> Scratch:
    """Scratch for runs of at most `max_seqs` running sequences and step estimates up to k = `k_max` for `slots`
    drafter slots."""
    times = np.empty((max(slots, 1), k_max + 1), np.float64)
    return Scratch(*(np.empty(max_seqs, np.int64) for _ in range(13)), times, np.empty_like(times),
                   plan_buffers(max_seqs), np.empty(max_seqs, np.float64), np.empty(max_seqs, np.int64),
                   np.empty(max_seqs, np.int64))


class PSDScratch(NamedTuple):
    """run_psd_steps' per-step working arrays beside Scratch's (int64, one entry per running sequence): the verified
    and drafted sides, the verified side's proposals (k, proposed, accepted, drafter slot, the slot drafting it this
    step or -1), the drafted side's, the requests whose KV grows; `fixed_slot` (the fixed policy's slot for every
    request: 0, or -1 where it names no drafter, at k = 0) is only read. Made once per run, like Scratch."""
    verified: np.ndarray
    drafted: np.ndarray
    v_k: np.ndarray
    v_prop: np.ndarray
    v_acc: np.ndarray
    v_slot: np.ndarray
    v_draft: np.ndarray
    d_k: np.ndarray
    d_prop: np.ndarray
    d_acc: np.ndarray
    fixed_slot: np.ndarray
    grow: np.ndarray
    d_slot: np.ndarray  # the drafted side's slot (or -1) where a policy chose it (POL_GIVEN, POL_ADAPTIVE, POL_BANDIT)
    ask: np.ndarray  # the requests the policy is asked about (compiled_psd_kernel._asked)
    ask_slot: np.ndarray  # the policy's choice for each of them: a bandit's slot, adaptive-k's k
    ask_pos: np.ndarray  # and each one's next output position in the trace (adaptive-k's match-length cap)


def psd_scratch(max_seqs: int, fixed_slot: int = 0) -> PSDScratch:
    """PSDScratch for runs of at most `max_seqs` running sequences whose fixed policy drafts with `fixed_slot`."""
    arrays = {f: np.empty(max_seqs, np.int64) for f in PSDScratch._fields}
    arrays["fixed_slot"] = np.full(max_seqs, fixed_slot, np.int64)
    return PSDScratch(**arrays)


def rows_head(rows: StepRows, r: int, copy: bool = False) -> StepRows:
    """The first `r` rows (views, or copies when the buffer is reused)."""
    return StepRows._make(c[:r].copy() if copy else c[:r] for c in rows)


class PSDCarry(NamedTuple):
    """PSD's per-request sides and the drafted side's pending proposal (its drafter slot or -1, k, proposed,
    accepted), written in place."""
    side: np.ndarray
    pend: np.ndarray
    pend_k: np.ndarray
    pend_p: np.ndarray
    pend_a: np.ndarray


# the scalars a kernel call leaves for the next (its loop's counters and clock)
RUN_STATE = np.dtype([
    ("ptr", np.int64),  # arrivals pulled (the waiting queue's end)
    ("admit", np.int64),  # arrivals admitted (the head of the waiting queue's arrivals)
    ("requeued", np.int64),  # preempted requests waiting ahead of them (Requests.requeued)
    ("n_run", np.int64),  # running requests
    ("finished", np.int64),
    ("step", np.int64),  # the next step's number
    ("used", np.int64),  # KV blocks in use
    ("peak", np.int64),
    ("rows", np.int64),  # rows written into StepBuffers.rows_i / rows_f
    ("itl", np.int64),  # gaps written into StepBuffers.itl
    ("submitted", np.int64),  # arrivals known (open loop: all; closed loop or replica: so far)
    ("busy", np.int64),  # the last loop turn ran a step (vLLM V1's engine-loop gap follows it)
    ("now", np.float64),  # the clock
    ("forward", np.float64),  # the last step's duration (async scheduling hides the gap behind it)
    # a Python policy (POL_GIVEN): its choices for the next step are in PolicyState (set by the caller, cleared when
    # read); the last step's decodes, prompt chunks and finishes (Scratch.heard, PlanBuffers.request, Scratch.done),
    # `pending` till the caller told the policy (cleared by it)
    ("given", np.int64),
    ("decoded", np.int64),
    ("prefilled", np.int64),
    ("ended", np.int64),
    ("pending", np.int64),
], align=True)
# PSD's scalars: the side verified next, fallback steps so far
PSD_STATE = np.dtype([("side", np.int64), ("fallback", np.int64),
                      # a Python policy's choice (POL_GIVEN, CHOOSE): how many requests it is asked about
                      # (PSDScratch.ask[:asked], compiled_psd_kernel._asked)
                      ("asked", np.int64)], align=True)


def typed(cls, **values):
    """A `cls` record (Settings, PSDSettings) with each value coerced to its field's annotated type (int, float,
    bool), so every run passes the kernels the same numba types."""
    missing, extra = set(cls._fields) - set(values), set(values) - set(cls._fields)
    if missing or extra:
        raise TypeError(f"{cls.__name__}: no value for {sorted(missing)}, no field for {sorted(extra)}")
    kinds = _field_types(cls)
    return cls(**{f: kinds[f](values[f]) for f in cls._fields})


@functools.cache
def _field_types(cls) -> dict[str, type]:
    """A record class's annotated field types (get_type_hints resolves them anew at every call)."""
    return get_type_hints(cls)


def record_dtype(cls) -> np.dtype:
    """The structured dtype of a typed scalar record (Settings): one int64, float64 or bool field per field."""
    kinds, hints = {int: np.int64, float: np.float64, bool: np.bool_}, get_type_hints(cls)
    return np.dtype([(f, kinds[hints[f]]) for f in cls._fields], align=True)


SETTINGS = record_dtype(Settings)  # the kernels' form of Settings (settings_record)


def settings_record(settings: Settings) -> np.recarray:
    """The settings as the kernels take them: a one-record array of SETTINGS (a cluster stacks its replicas' along
    one axis and passes each replica its row)."""
    out = np.zeros(1, dtype=SETTINGS).view(np.recarray)
    out[0] = tuple(settings)
    return out


def new_state(dtype: np.dtype = RUN_STATE, **values) -> np.recarray:
    """A one-record state array of `dtype`, zero but for `values` (field names of the dtype)."""
    state = np.zeros(1, dtype=dtype).view(np.recarray)
    for name, v in values.items():
        state[name][0] = v
    return state


def submit_request(dst, gidx, cum, rs, src, i, blocks):
    """Request `i` of `src` (a Workload in the workload's numbering) becomes a replica's next request in `dst` (its
    Workload, in routing order; `rs` its RUN_STATE record counts them in `submitted`): its arrival, lengths and trace
    positions, its workload index in `gidx`, and its prompt's KV `blocks` added to the prefix sums `cum` (which the
    router's KV load reads, router.replica_kv_load)."""
    k = rs.submitted
    gidx[k] = i
    dst.arrival[k] = src.arrival[i]
    dst.prompt[k] = src.prompt[i]
    dst.out[k] = src.out[i]
    dst.first[k] = src.first[i]
    dst.last[k] = src.last[i]
    cum[k + 1] = cum[k] + blocks
    rs.submitted = k + 1
