"""SpecDecode-Bench compatibility mode: the closed-batch AR-vs-SD experiment of that release (issue 2, part 4).

Rules: sample `num_requests` requests with `random.Random(seed).sample`; for each, a batch of B
identical copies runs once with AR and once with SD from an empty KV. Prefill is one forward
over all prompts (each copy then has 1 output token; KV = prompts + 1 per copy). A forward costs
the target profile over (KV tokens, batched tokens); every step of every copy also pays a fixed
overhead. SD: at output position p a copy sends `input_len` = k+1 (FIXED_k) or acc_len[p]
(ORACLE) tokens and emits min(acc_len[p], input_len). n-gram under FIXED_k: where acc_len[p] is 1
the copy finds no match with probability 1 - m and sends 1 token (the draws continue the same
generator after the sample, copy by copy, as the reference does). Draft time per copy: EAGLE =
draft profile over (the batch's KV at the step's start, input_len); n-gram = a fraction of that
step's verify time, zero for a copy sending 1 token; `combined` (ORACLE, max of both acc_len)
pays the n-gram fraction on every copy as the reference does, or with `charge_winner` the cost of
the drafter whose acc_len is larger (ties go to the cheaper n-gram). Per batch, throughput =
total output tokens / mean copy latency; speedup = mean SD throughput / mean AR throughput.

Position convention (`position_convention`): `reference` (the default, so the published numbers reproduce)
reads acc_len at `generated - 1`, one position early, as the release does, and lets a last step overshoot
the output; `engine` applies draftsim's replay rule (`traces.acceptance`): a copy that has generated g
tokens reads acc_len[g] and emits min(1 + accepted, output_len - g).

All B copies of a request always stand at the same position: where an n-gram draw differs
between copies, acc_len is 1, so a matched copy and an unmatched one both emit 1 token; the draws
only change how many tokens the batch sends and which copies pay drafting. So one chain of
positions per request gives the same numbers as a copy-by-copy loop (`simulate_batch_per_copy`, kept
as a cross-check and selectable with `per_copy=True`), and a linear profile prices a whole chain from
the sums of its terms. Plain Python: the default run imports neither numpy nor the trace bundle, so
`draftsim specbench` starts fast (the engine convention loads numpy for `traces.acceptance`).
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import gt, mul
from typing import Callable, Sequence

from simulator.costs.latency import LatencyProfile, LinearProfile, resolve_profile
from traces.importers.specbench import SpecBenchRecord

PROPOSERS = ("eagle3", "ngram", "combined")
# the acc_len lists of a record each proposer reads (a reader may keep only these: read_specbench(acc_lists=...))
ACC_LISTS = {"eagle3": ("eagle3",), "ngram": ("ngram",), "combined": ("eagle3", "ngram")}
POSITION_CONVENTIONS = ("reference", "engine")
TARGET_PROFILE = "llama3.1-8b-h100-specbench"
EAGLE_DRAFT_PROFILE = "eagle3-llama3.1-8b-h100-specbench"
NGRAM_DRAFT_FRACTION = 0.005875  # n-gram drafting = 0.5875 % of the same step's verify time
# fixed per-step overhead of every copy (the release's fit, vLLM 0.10.1.1 on H100): the project's one copy of this
# published figure; configs that cannot import it (YAML) name it in a comment
STEP_OVERHEAD_S = 1.20683946e-03
# probability that an n-gram lookup finds a match where the first draft would be rejected
NGRAM_MATCH_PROBABILITY = {"sharegpt": 0.2, "cnn": 0.4, "gsm8k": 0.2, "instructcoder": 0.8}
DEFAULT_NUM_REQUESTS = 300
DEFAULT_SEED = 42


@dataclass(frozen=True)
class CompatCosts:
    """Prices of the compatibility mode: target forward, EAGLE draft, n-gram fraction, step overhead."""

    target: LatencyProfile
    eagle_draft: LatencyProfile
    ngram_fraction: float = NGRAM_DRAFT_FRACTION
    step_overhead_s: float = STEP_OVERHEAD_S

    @classmethod
    def builtin(cls) -> "CompatCosts":
        """The release's published Llama-3.1-8B / H100 fits (built-in profiles)."""
        return cls(resolve_profile(TARGET_PROFILE), resolve_profile(EAGLE_DRAFT_PROFILE))


@dataclass(frozen=True)
class Predictor:
    """How many tokens a copy sends: k+1 for FIXED_k, the true acc_len for ORACLE (k = None)."""

    name: str
    k: int | None

    @classmethod
    def parse(cls, name: str) -> "Predictor":
        if name == "ORACLE":
            return cls(name, None)
        m = re.fullmatch(r"FIXED_([1-9][0-9]*)", name)
        if not m:
            raise ValueError(f"predict: expected ORACLE or FIXED_<k> with k >= 1 (e.g. FIXED_3), got {name!r}")
        return cls(name, int(m.group(1)))


@dataclass(frozen=True)
class BatchResult:
    """One batch of B copies of one request: mean copy latencies and output tokens."""

    request_id: str
    output_len: int
    ar_latency_s: float
    sd_latency_s: float
    sd_steps: int  # SD decode steps of the batch (prefill excluded)
    copy_steps: int  # SD decode steps summed over copies
    sd_tokens: int  # tokens emitted by SD decode steps over all copies (reference convention: overshoot included)


@dataclass(frozen=True)
class CompatResult:
    """Outcome of one compatibility run (one proposer, predictor and batch size)."""

    dataset: str
    proposer: str
    predict: str
    batch_size: int
    charge_winner: bool
    speedup: float  # mean SD throughput / mean AR throughput over batches
    ar_throughput: float  # mean over batches, output tokens per second
    sd_throughput: float
    mean_ar_latency_s: float  # mean over batches of the mean copy latency
    mean_sd_latency_s: float
    tokens_per_step: float  # SD decode tokens per copy-step
    num_requests: int
    excluded_empty: int  # requests left out of the population because their output is empty
    request_steps: int  # simulated copy-steps, AR and SD decode together (for speed figures)
    seed: int
    match_probability: float | None
    batches: list[BatchResult] = field(repr=False, default_factory=list)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "batches"}
        d["speedup"] = round(self.speedup, 6)
        return d


# ---------------------------------------------------------------- cost evaluation

# Output tokens each copy holds after the prefill, so the first SD step starts there: the value of
# traces.acceptance.FIRST_DRAFT_POSITION, not imported because that module loads numpy, which the default
# (reference-convention) run does without (tests/simulator/reproductions/test_specbench.py checks the two agree).
PREFILL_TOKENS = 1
EAGLE, NGRAM = "eagle", "ngram"  # a copy's drafting cost: EAGLE's own profile, or n-gram's fraction of verify


class _Affine:
    """The sequence scale * (offset + x) for x in xs (KV per step, tokens per step), summed exactly in integers
    without building it: a chain of tens of thousands of steps is priced from two sums."""

    __slots__ = ("scale", "offset", "xs")

    def __init__(self, scale: int, offset: int, xs: Sequence[int]):
        self.scale, self.offset, self.xs = scale, offset, xs

    def __len__(self) -> int:
        return len(self.xs)

    def __iter__(self):
        scale, offset = self.scale, self.offset
        return (scale * (offset + x) for x in self.xs)

    def total(self) -> int:
        return self.scale * (self.offset * len(self.xs) + sum(self.xs))


def _total(values: Sequence[int]) -> int:
    """sum(values), exactly, without a pass where the sequence knows its sum (an `_Affine`, a step-1 range)."""
    if type(values) is _Affine:
        return values.total()
    if type(values) is range and values.step == 1:
        return len(values) * (values.start + values.stop - 1) // 2 if values else 0
    return sum(values)


def _sum_times(profile: LatencyProfile, seqs: int, batched: int | Sequence[int], kv: Sequence[int],
               weights: Sequence[float] | None = None) -> float:
    """sum_j w_j * profile.step_time(seqs, batched_j, kv_j) over steps j (`batched`: one number for every step or
    one per step; w_j = 1 without weights): from each term's sum for a linear profile, step by step otherwise."""
    if isinstance(profile, LinearProfile):
        c = profile.coefficients
        if weights is None:
            w, kv_sum = len(kv), _total(kv)
            b_sum = batched * w if isinstance(batched, int) else _total(batched)
        else:
            w, kv_sum = sum(weights), sum(map(mul, weights, kv))
            b_sum = batched * w if isinstance(batched, int) else sum(map(mul, weights, batched))
        return (c.get("kv_tokens", 0.0) * kv_sum + c.get("batched_tokens", 0.0) * b_sum
                + (c.get("num_seqs", 0.0) * seqs + c.get("const", 0.0)) * w)
    per_step = repeat(batched) if isinstance(batched, int) else batched
    t = profile.step_time
    if weights is None:
        return math.fsum(t(seqs, b, k) for b, k in zip(per_step, kv))
    return math.fsum(w * t(seqs, b, k) for w, b, k in zip(weights, per_step, kv) if w)


def draft_kind(proposer: str, charge_winner: bool, sent: int, eagle_wins: bool) -> str | None:
    """The drafting cost one copy pays at one step (None: none). EAGLE pays its own profile; n-gram pays its
    fraction of the step's verify time, except a copy sending 1 token (nothing drafted); `combined` pays n-gram's
    on every copy as the reference does, or with `charge_winner` the cost of the drafter whose acc_len is larger
    (ties go to the cheaper n-gram)."""
    if proposer == "eagle3":
        return EAGLE
    if proposer == "combined" and not charge_winner:
        return NGRAM
    if proposer == "combined" and eagle_wins:
        return EAGLE
    return NGRAM if sent > 1 else None


@dataclass(frozen=True)
class _RequestView:
    """One request as the run sees it: lengths, the acc_len that decides emission, the winner mask."""

    id: str
    prompt_len: int
    output_len: int
    acc: list[int]  # length output_len
    eagle_wins: list[bool] | None  # combined only: EAGLE's acc_len strictly larger (ties go to n-gram)


def _view(rec: SpecBenchRecord, proposer: str) -> _RequestView:
    n = rec.output_len(proposer)
    if proposer == "combined":
        e, g = rec.acc_len["eagle3"][:n], rec.acc_len["ngram"][:n]
        return _RequestView(rec.id, rec.prompt_len, n, list(map(max, e, g)), list(map(gt, e, g)))
    acc = rec.acc_len[proposer]  # read only, never changed: no copy
    return _RequestView(rec.id, rec.prompt_len, n, acc if len(acc) == n else acc[:n], None)


# ---------------------------------------------------------------- one batch


def _prefill(req: _RequestView, batch_size: int, costs: CompatCosts) -> float:
    return costs.target.step_time(batch_size, batch_size * req.prompt_len, 0)


def ar_batch_latency(req: _RequestView, batch_size: int, costs: CompatCosts) -> tuple[float, int]:
    """Mean copy latency of AR (all copies identical) and its decode copy-steps."""
    B, steps = batch_size, req.output_len - 1
    kv = range(B * (req.prompt_len + 1), B * (req.prompt_len + req.output_len), B)  # KV at each decode step
    ovh = costs.step_overhead_s
    decode = _sum_times(costs.target, B, B, kv)
    return _prefill(req, B, costs) + ovh + decode + ovh * steps, B * steps


def _read_offset(convention: str) -> int:
    """acc_len index minus tokens generated: -1 for the reference (one position early), 0 for the engine."""
    return -1 if convention == "reference" else 0


def _reference_emitted(acc_len: int, sent: int, generated: int, output_len: int) -> int:
    """The release's rule: a step adds min(acc_len, tokens sent), past the output's end if it comes to that."""
    return min(acc_len, sent)


def _engine_emitted(acc_len: int, sent: int, generated: int, output_len: int) -> int:
    """draftsim's replay rule (traces.acceptance): 1 + accepted drafts, cut at the output's end."""
    from traces.acceptance import accepted_drafts, emitted_in_output

    return emitted_in_output(accepted_drafts(acc_len, sent - 1), generated, output_len)


def _steps_reference(acc: list[int], k: int | None) -> tuple[list[int], int]:
    """Tokens generated before each SD step of a copy (reference convention) and after its last step.

    The step at g reads acc_len[g - 1] and adds `_reference_emitted` (min(acc_len, tokens sent): acc_len itself
    under ORACLE); the first step is always taken (as the release does), and the copy stops once g reaches the
    output length."""
    sent = None if k is None else k + 1  # None: ORACLE sends acc_len itself
    n, starts, g = len(acc), [], PREFILL_TOKENS
    append = starts.append
    while True:
        append(g)
        a = acc[g - 1]
        g += a if sent is None or a < sent else sent  # _reference_emitted(a, sent) = min(a, sent), inlined: hot
        if g >= n:
            return starts, g


def _steps_engine(acc: list[int], k: int | None) -> tuple[list[int], int]:
    """As `_steps_reference` under the engine convention: the step at g reads acc_len[g] and adds
    `_engine_emitted`, computed for every position at once; no step when the prefill made the whole output."""
    import numpy as np

    from traces.acceptance import accepted_drafts, emitted_in_output

    n = len(acc)
    if n <= PREFILL_TOKENS:
        return [], PREFILL_TOKENS
    a = np.asarray(acc, dtype=np.int64)
    g = np.arange(n)
    sent = a if k is None else np.full_like(a, k + 1)
    nxt = (g + emitted_in_output(accepted_drafts(a, sent - 1), g, n)).tolist()
    starts, p = [], PREFILL_TOKENS
    while p < n:
        starts.append(p)
        p = nxt[p]
    return starts, p


def _matched(uniform: Callable[[], float], copies: int, match_probability: float) -> int:
    """Copies whose n-gram lookup finds a match: one `uniform()` per copy, in copy order."""
    return sum(1 for _ in range(copies) if uniform() < match_probability)


def sd_batch_chain(req: _RequestView, batch_size: int, pred: Predictor, proposer: str, charge_winner: bool,
                   costs: CompatCosts, *, match_probability: float | None, uniform: Callable[[], float],
                   convention: str = "reference") -> tuple[float, int, int]:
    """SD batch as one chain of positions: (mean copy latency, steps, tokens emitted over copies).

    With `match_probability` set (n-gram FIXED_k), each step at acc_len 1 draws one `uniform()` per
    copy, in copy order, steps in order; the unmatched copies send 1 token and pay no drafting.
    Per-step lists are built only where a rule reads them (FIXED_k EAGLE needs the chain's length and sum only).
    """
    B, k = batch_size, pred.k
    starts, end = (_steps_reference if convention == "reference" else _steps_engine)(req.acc, k)
    n = len(starts)
    kv = _Affine(B, req.prompt_len, starts)  # KV at each step's start: B * (prompt + generated)
    per_step_acc = k is None or match_probability is not None or req.eagle_wins is not None
    if per_step_acc:
        off = _read_offset(convention)
        idx = [g + off for g in starts] if off else starts  # the acc_len index each step reads
        acc = [req.acc[i] for i in idx]
    sent: int | list[int] = acc if k is None else k + 1  # tokens a copy sends, unless its n-gram lookup failed
    wins = [req.eagle_wins[i] for i in idx] if req.eagle_wins is not None else None
    groups: list[tuple[int | list[int], list[int] | None]] = [(sent, None)]  # (tokens sent, copies per step; None: B)
    if match_probability is None:
        batched: int | Sequence[int] = B * sent if isinstance(sent, int) else _Affine(B, 0, sent)
    else:
        full = [B if a != 1 else _matched(uniform, B, match_probability) for a in acc]
        groups = [(sent, full), (1, [B - f for f in full])]
        batched = [f * sent + B - f for f in full]
    verify = _sum_times(costs.target, B, batched, kv)
    draft = 0.0  # seconds over copies
    for group_sent, copies in groups:
        if wins is None:  # no winner mask: each distinct number sent is one key
            keys = [(s, False) for s in ({group_sent} if isinstance(group_sent, int) else set(group_sent))]
        else:
            keys = set(zip(repeat(group_sent, n) if isinstance(group_sent, int) else group_sent, wins))
        kinds = {key: draft_kind(proposer, charge_winner, *key) for key in keys}
        for kind in set(kinds.values()) - {None}:
            w = None
            if len(kinds) > 1:
                per_step_sent = repeat(group_sent, n) if isinstance(group_sent, int) else group_sent
                w = [float(kinds[key] == kind) for key in zip(per_step_sent, wins or repeat(False, n))]
            scale = B if copies is None else 1
            if copies is not None:
                w = copies if w is None else list(map(mul, w, copies))
            if kind == EAGLE:
                draft += scale * _sum_times(costs.eagle_draft, 1, group_sent, kv, w)
            else:
                draft += scale * costs.ngram_fraction * _sum_times(costs.target, B, batched, kv, w)
    ovh = costs.step_overhead_s
    latency = _prefill(req, B, costs) + ovh + verify + ovh * n + draft / B
    return latency, n, B * (end - PREFILL_TOKENS)


def simulate_batch_per_copy(req: _RequestView, batch_size: int, pred: Predictor, proposer: str,
                            charge_winner: bool, costs: CompatCosts, *, match_probability: float | None,
                            uniform: Callable[[], float], convention: str = "reference") -> tuple[float, int, int, int]:
    """SD batch copy by copy, step by step: (mean latency, steps, copy-steps, tokens); the chain path's cross-check.

    `match_probability` set = n-gram FIXED_k no-match draws, one `uniform()` per copy at acc_len 1,
    in copy order.
    """
    B, P, G, off = batch_size, req.prompt_len, req.output_len, _read_offset(convention)
    emitted = _reference_emitted if convention == "reference" else _engine_emitted
    ovh = costs.step_overhead_s
    cur = [PREFILL_TOKENS] * B  # tokens generated so far per copy
    latency = [_prefill(req, B, costs) + ovh] * B
    alive = list(range(B)) if convention == "reference" or G > PREFILL_TOKENS else []
    kv = B * (P + PREFILL_TOKENS) if alive else 0
    steps = copy_steps = tokens = 0
    while alive:
        pos = [cur[c] + off for c in alive]
        accs = [req.acc[p] for p in pos]
        sent = list(accs) if pred.k is None else [pred.k + 1] * len(accs)
        if match_probability is not None:
            for i, a in enumerate(accs):
                if a == 1 and not uniform() < match_probability:
                    sent[i] = 1
        verify = costs.target.step_time(len(alive), sum(sent), kv)
        added, kv_change, still = 0, 0, []
        for c, p, a, s in zip(alive, pos, accs, sent):
            kind = draft_kind(proposer, charge_winner, s, bool(req.eagle_wins and req.eagle_wins[p]))
            draft = (costs.eagle_draft.step_time(1, s, kv) if kind == EAGLE
                     else costs.ngram_fraction * verify if kind == NGRAM else 0.0)
            latency[c] += verify + draft + ovh
            e = emitted(a, s, cur[c], G)
            added += e
            if cur[c] + e >= G:
                kv_change -= cur[c] + P  # the finished copy's KV (prompt + tokens before this step) leaves
            else:
                kv_change += e
                still.append(c)
            cur[c] += e
        kv += kv_change
        steps += 1
        copy_steps += len(alive)
        tokens += added
        alive = still
    assert kv == 0, "KV must be empty once every copy has finished"
    return math.fsum(latency) / B, steps, copy_steps, tokens


# ---------------------------------------------------------------- the experiment


def simulate_specbench(records: Sequence[SpecBenchRecord], *, dataset: str, proposer: str, predict: str,
                       batch_size: int, charge_winner: bool = False, costs: CompatCosts | None = None,
                       num_requests: int = DEFAULT_NUM_REQUESTS, seed: int = DEFAULT_SEED,
                       match_probability: float | None = None, per_copy: bool = False,
                       position_convention: str = "reference") -> CompatResult:
    """Run the closed-batch experiment; `per_copy` forces the copy-by-copy loop (same result, slower)."""
    if position_convention not in POSITION_CONVENTIONS:
        raise ValueError(f"position_convention: expected one of {POSITION_CONVENTIONS}, got {position_convention!r}")
    if proposer not in PROPOSERS:
        raise ValueError(f"proposer: expected one of {PROPOSERS}, got {proposer!r}")
    pred = Predictor.parse(predict)
    if proposer == "combined" and pred.k is not None:
        raise ValueError("proposer 'combined' supports only predict ORACLE (as in the reference)")
    if charge_winner and proposer != "combined":
        raise ValueError("charge_winner applies only to proposer 'combined'")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
    needs_draws = proposer == "ngram" and pred.k is not None
    if needs_draws:
        if match_probability is None:
            if dataset not in NGRAM_MATCH_PROBABILITY:
                raise ValueError(f"dataset {dataset!r} has no n-gram match probability; expected one of "
                                 f"{sorted(NGRAM_MATCH_PROBABILITY)} or pass match_probability")
            match_probability = NGRAM_MATCH_PROBABILITY[dataset]
        if not 0.0 <= match_probability <= 1.0:
            raise ValueError(f"match_probability: expected a number in [0, 1], got {match_probability!r}")
    else:
        match_probability = None
    costs = costs or CompatCosts.builtin()
    population = [r for r in records if r.output_len(proposer) >= 1]
    if len(population) < num_requests:
        raise ValueError(f"only {len(population)} requests with output available for proposer {proposer!r}; "
                         f"num_requests is {num_requests} (lower it)")
    rng = random.Random(seed)
    sample = rng.sample(population, k=num_requests)
    batches: list[BatchResult] = []
    request_steps = 0
    for rec in sample:
        req = _view(rec, proposer)
        ar_lat, ar_steps = ar_batch_latency(req, batch_size, costs)
        if per_copy:
            sd_lat, steps, copy_steps, tokens = simulate_batch_per_copy(
                req, batch_size, pred, proposer, charge_winner, costs, match_probability=match_probability,
                uniform=rng.random, convention=position_convention)
        else:
            sd_lat, steps, tokens = sd_batch_chain(req, batch_size, pred, proposer, charge_winner, costs,
                                                   match_probability=match_probability, uniform=rng.random,
                                                   convention=position_convention)
            copy_steps = steps * batch_size
        batches.append(BatchResult(req.id, req.output_len, ar_lat, sd_lat, steps, copy_steps, tokens))
        request_steps += ar_steps + copy_steps
    n = len(batches)
    ar_tpt = math.fsum(batch_size * b.output_len / b.ar_latency_s for b in batches) / n
    sd_tpt = math.fsum(batch_size * b.output_len / b.sd_latency_s for b in batches) / n
    return CompatResult(
        dataset=dataset, proposer=proposer, predict=pred.name, batch_size=batch_size, charge_winner=charge_winner,
        speedup=sd_tpt / ar_tpt, ar_throughput=ar_tpt, sd_throughput=sd_tpt,
        mean_ar_latency_s=math.fsum(b.ar_latency_s for b in batches) / n,
        mean_sd_latency_s=math.fsum(b.sd_latency_s for b in batches) / n,
        tokens_per_step=sum(b.sd_tokens for b in batches) / max(sum(b.copy_steps for b in batches), 1),
        num_requests=num_requests, excluded_empty=len(records) - len(population), request_steps=request_steps,
        seed=seed, match_probability=match_probability, batches=batches,
    )
