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
positions per request, vectorised over steps, gives the same numbers as a copy-by-copy loop
(`simulate_batch_per_copy`, kept as a cross-check and selectable with `per_copy=True`).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from simulator.latency import LatencyProfile, LinearProfile, resolve_profile
from traces.acceptance import FIRST_DRAFT_POSITION, accepted_drafts, emitted_in_output
from traces.importers.specbench import SpecBenchRecord

PROPOSERS = ("eagle3", "ngram", "combined")
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


def _profile_times(profile: LatencyProfile, num_seqs, batched, kv) -> np.ndarray:
    """Vectorised step_time: closed form for linear profiles, element-wise otherwise."""
    if isinstance(profile, LinearProfile):
        c = profile.coefficients
        return (c.get("kv_tokens", 0.0) * np.asarray(kv, dtype=float)
                + c.get("batched_tokens", 0.0) * np.asarray(batched, dtype=float)
                + c.get("num_seqs", 0.0) * np.asarray(num_seqs, dtype=float) + c.get("const", 0.0))
    return np.vectorize(profile.step_time, otypes=[float])(num_seqs, batched, kv)


@dataclass(frozen=True)
class _RequestView:
    """One request as the run sees it: lengths, the acc_len that decides emission, the winner mask."""

    id: str
    prompt_len: int
    output_len: int
    acc: np.ndarray  # int64, length output_len
    eagle_wins: np.ndarray | None  # combined only: EAGLE's acc_len strictly larger (ties go to n-gram)


def _view(rec: SpecBenchRecord, proposer: str) -> _RequestView:
    n = rec.output_len(proposer)
    if proposer == "combined":
        e = rec.acc_len["eagle3"][:n].astype(np.int64)
        g = rec.acc_len["ngram"][:n].astype(np.int64)
        return _RequestView(rec.id, rec.prompt_len, n, np.maximum(e, g), e > g)
    return _RequestView(rec.id, rec.prompt_len, n, rec.acc_len[proposer][:n].astype(np.int64), None)


class _DraftRule:
    """Per-copy draft seconds for one step, given input_len, KV at step start, verify time, winner mask."""

    def __init__(self, proposer: str, charge_winner: bool, costs: CompatCosts):
        self.proposer, self.charge_winner, self.costs = proposer, charge_winner, costs

    def __call__(self, input_len: np.ndarray, kv, verify, eagle_wins: np.ndarray | None) -> np.ndarray:
        c = self.costs
        if self.proposer == "eagle3":
            return _profile_times(c.eagle_draft, 1, input_len, kv)
        ngram = np.where(input_len > 1, c.ngram_fraction * verify, 0.0)
        if self.proposer == "ngram":
            return ngram
        if not self.charge_winner:  # the reference charges n-gram drafting on every copy of `combined`
            return np.broadcast_to(c.ngram_fraction * verify, np.shape(input_len)).astype(float)
        return np.where(eagle_wins, _profile_times(c.eagle_draft, 1, input_len, kv), ngram)


# ---------------------------------------------------------------- one batch


def _prefill(req: _RequestView, batch_size: int, costs: CompatCosts) -> float:
    return float(_profile_times(costs.target, batch_size, batch_size * req.prompt_len, 0))


def ar_batch_latency(req: _RequestView, batch_size: int, costs: CompatCosts) -> tuple[float, int]:
    """Mean copy latency of AR (all copies identical) and its decode copy-steps."""
    steps = np.arange(req.output_len - 1)
    kv = batch_size * (req.prompt_len + 1 + steps)
    decode = _profile_times(costs.target, batch_size, batch_size, kv)
    ovh = costs.step_overhead_s
    return _prefill(req, batch_size, costs) + ovh + float(np.sum(decode + ovh)), batch_size * len(steps)


def _read_offset(convention: str) -> int:
    """acc_len index minus tokens generated: -1 for the reference (one position early), 0 for the engine."""
    return -1 if convention == "reference" else 0


def _emitted(acc: np.ndarray, input_len: np.ndarray, generated: np.ndarray, output_len: int,
             convention: str) -> np.ndarray:
    """Tokens each step adds: the reference's min(acc_len, input_len), or the engine's replay rule."""
    if convention == "reference":
        return np.minimum(acc, input_len)
    return emitted_in_output(accepted_drafts(acc, input_len - 1), generated, output_len)


def _chain(acc: np.ndarray, input_all: np.ndarray, convention: str) -> np.ndarray:
    """Tokens generated before each step of one copy: g_0 = 1 (the prefill's), g_{j+1} = g_j + emitted.

    The step at g reads acc_len[g + offset]; the copy stops once g reaches the output length (under the
    reference convention it always takes the first step, as the release does).
    """
    n, off = len(acc), _read_offset(convention)
    if convention == "engine" and n <= FIRST_DRAFT_POSITION:  # the prefill made the whole output
        return np.zeros(0, dtype=np.int64)
    g = np.arange(n + 1)
    idx = np.clip(g + off, 0, n - 1)
    nxt = (g + _emitted(acc[idx], input_all[idx], g, n, convention)).tolist()
    out, p = [FIRST_DRAFT_POSITION], nxt[FIRST_DRAFT_POSITION]
    while p < n:
        out.append(p)
        p = nxt[p]
    return np.asarray(out, dtype=np.int64)


def sd_batch_chain(req: _RequestView, batch_size: int, pred: Predictor, draft: _DraftRule, costs: CompatCosts,
                   *, match_probability: float | None, uniform: Callable[[], float],
                   convention: str = "reference") -> tuple[float, int, int]:
    """SD batch as one chain of positions: (mean copy latency, steps, tokens emitted over copies).

    With `match_probability` set (n-gram FIXED_k), each step at acc_len 1 draws one `uniform()` per
    copy, in copy order, steps in order; the unmatched copies send 1 token and pay no drafting.
    """
    B = batch_size
    input_all = req.acc if pred.k is None else np.full_like(req.acc, pred.k + 1)
    g = _chain(req.acc, input_all, convention)
    p = np.clip(g + _read_offset(convention), 0, req.output_len - 1)  # the acc_len index each step reads
    acc = req.acc[p]
    inp = np.broadcast_to(input_all[p], (B, len(p)))  # [copy, step]
    if match_probability is not None:
        at_one = np.flatnonzero(acc == 1)
        draws = np.array([uniform() for _ in range(at_one.size * B)]).reshape(at_one.size, B)
        inp = np.array(inp)
        inp[:, at_one] = np.where(draws.T < match_probability, inp[:, at_one], 1)
    kv = B * (req.prompt_len + g)
    verify = _profile_times(costs.target, B, inp.sum(axis=0), kv)
    wins = None if req.eagle_wins is None else req.eagle_wins[p]
    d = draft(inp, kv, verify, wins)
    ovh = costs.step_overhead_s
    latency = _prefill(req, B, costs) + ovh + float(np.sum(verify + ovh)) + float(np.sum(d)) / B
    emitted = int(_emitted(acc[None, :], inp, g[None, :], req.output_len, convention).sum())
    return latency, len(p), emitted


def simulate_batch_per_copy(req: _RequestView, batch_size: int, pred: Predictor, draft: _DraftRule,
                            costs: CompatCosts, *, match_probability: float | None,
                            uniform: Callable[[], float], convention: str = "reference") -> tuple[float, int, int, int]:
    """SD batch copy by copy (vectorised over copies per step): (mean latency, steps, copy-steps, tokens).

    `match_probability` set = n-gram FIXED_k no-match draws, one `uniform()` per copy at acc_len 1,
    in copy order.
    """
    B, P, G = batch_size, req.prompt_len, req.output_len
    cur = np.ones(B, dtype=np.int64)  # tokens generated so far per copy
    latency = np.full(B, _prefill(req, B, costs) + costs.step_overhead_s)
    alive = np.arange(B) if convention == "reference" or G > FIRST_DRAFT_POSITION else np.arange(0)
    kv = B * (P + 1) if alive.size else 0
    steps = copy_steps = tokens = 0
    while alive.size:
        pos = cur[alive] + _read_offset(convention)
        acc = req.acc[pos]
        inp = acc.copy() if pred.k is None else np.full_like(acc, pred.k + 1)
        if match_probability is not None:
            need = np.flatnonzero(acc == 1)
            if need.size:
                draws = np.array([uniform() for _ in range(need.size)])
                inp[need[draws >= match_probability]] = 1
        verify = float(_profile_times(costs.target, alive.size, int(inp.sum()), kv))
        wins = None if req.eagle_wins is None else req.eagle_wins[pos]
        latency[alive] += verify + draft(inp, kv, verify, wins) + costs.step_overhead_s
        emitted = _emitted(acc, inp, cur[alive], G, convention)
        cur[alive] += emitted
        kv += int(emitted.sum())
        done = cur[alive] >= G
        kv -= int((cur[alive][done] + P).sum())
        steps += 1
        copy_steps += alive.size
        tokens += int(emitted.sum())
        alive = alive[~done]
    assert kv == 0, "KV must be empty once every copy has finished"
    return float(latency.mean()), steps, copy_steps, tokens


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
    draft = _DraftRule(proposer, charge_winner, costs)
    batches: list[BatchResult] = []
    request_steps = 0
    for rec in sample:
        req = _view(rec, proposer)
        ar_lat, ar_steps = ar_batch_latency(req, batch_size, costs)
        if per_copy:
            sd_lat, steps, copy_steps, tokens = simulate_batch_per_copy(
                req, batch_size, pred, draft, costs, match_probability=match_probability, uniform=rng.random,
                convention=position_convention)
        else:
            sd_lat, steps, tokens = sd_batch_chain(req, batch_size, pred, draft, costs,
                                                   match_probability=match_probability, uniform=rng.random,
                                                   convention=position_convention)
            copy_steps = steps * batch_size
        batches.append(BatchResult(req.id, req.output_len, ar_lat, sd_lat, steps, copy_steps, tokens))
        request_steps += ar_steps + copy_steps
    out_tokens = np.array([batch_size * b.output_len for b in batches], dtype=float)
    ar_lat = np.array([b.ar_latency_s for b in batches])
    sd_lat = np.array([b.sd_latency_s for b in batches])
    ar_tpt, sd_tpt = float(np.mean(out_tokens / ar_lat)), float(np.mean(out_tokens / sd_lat))
    return CompatResult(
        dataset=dataset, proposer=proposer, predict=pred.name, batch_size=batch_size, charge_winner=charge_winner,
        speedup=sd_tpt / ar_tpt, ar_throughput=ar_tpt, sd_throughput=sd_tpt,
        mean_ar_latency_s=float(ar_lat.mean()), mean_sd_latency_s=float(sd_lat.mean()),
        tokens_per_step=sum(b.sd_tokens for b in batches) / max(sum(b.copy_steps for b in batches), 1),
        num_requests=num_requests, excluded_empty=len(records) - len(population), request_steps=request_steps,
        seed=seed, match_probability=match_probability, batches=batches,
    )
