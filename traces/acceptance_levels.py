"""Acceptance at three levels, each usable as a drafter's acceptance in any config.

1. `mean_length` at the served k: what every engine prints (vLLM's `1 + accepted / drafts`). Replayed as
   i.i.d. acceptance with the rate a that gives that many tokens per step at k (traces/expected_tokens.py).
2. `per_position`: vLLM's per-position counters, P(drafts 0..i all accepted) for i < k (unconditional, as
   `vllm:spec_decode_num_accepted_tokens_per_pos / num_drafts` and `vllm bench serve` report them). Replayed
   as positional acceptance with conditional rates S[i+1] / S[i] (traces/synthetic/positional.py).
3. `per_request`: a trace bundle (acc_len per request and position), or vLLM's per-request
   `metrics.speculative_decoding` histograms (each request replays draws from its own histogram).
Levels 1 and 2 were measured at one k; beyond it they are extrapolated by a stated model (`extrapolate: geometric`,
the default in configs): every further draft is accepted with the i.i.d. rate a that gives the measured mean length
at the measured k (Leviathan's expectation solved for a, `tail_rate`), so a run at a larger k sees the measured
positions as measured and a geometric tail after them. Loading warns, and each run names the extrapolation
(experiments/provenance.py). `extrapolate: none` caps acc_len at k + 1 instead (`check_k` then refuses a larger k).
Levels 1-2 drop every correlation between positions and requests.

vLLM counts a draft only on a decode step where the drafter proposed something (an n-gram step with no match
drafts nothing and emits one token): its counters, and the levels built from them, are conditional on
proposing. `proposal_rate` is the fraction of decode steps that proposed, derived from what the source records
(`proposal_rate_from_counts`: output tokens, requests, drafts and accepted tokens); a replay draws each position's
`proposal_len` (a full proposal with that probability, else 0) beside acc_len, so the non-proposing steps are
modelled.

A source file (`acceptance.yaml`, written by `draftsim import vllm-bench|vllm-acceptance`) holds what was
measured: {target, dataset, drafter_kind, measured_k, mean_length, per_position, requests: [{id, k,
histogram}], source}.
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import Field

from traces.atomic import atomic_write_text, check_output_file
from traces.bundle import DrafterSpec, DrafterTrace, TraceBundle
from traces.config_base import StrictModel, validate_model
from traces.errors import TraceFormatError, shorten
from traces.limits import MAX_DRAFT_TOKENS
from traces.expected_tokens import expected_tokens
from traces.parsing import iter_jsonl, load_yaml_file

LEVELS = ("mean_length", "per_position", "per_request")
LEARNED_KINDS = ("eagle", "draft_model", "mtp", "int8", "truncated")
NEAR_ONE = 1.15  # a learned drafter whose mean acceptance length is below this accepts almost nothing
SOURCE_KEYS = {"target", "dataset", "drafter_kind", "measured_k", "mean_length", "per_position", "proposal_rate",
               "requests", "source"}


class AcceptanceWarning(UserWarning):
    """Acceptance that is implausible or borrowed from another target or dataset."""


@dataclass
class RequestHistogram:
    """One request's vLLM per-request metrics: histogram[j] = verify steps that accepted exactly j drafts."""

    id: str
    k: int
    histogram: list[int]


@dataclass
class AcceptanceSource:
    """Measured acceptance at whichever levels the source had."""

    measured_k: int
    mean_length: float | None = None
    per_position: list[float] | None = None
    requests: list[RequestHistogram] = field(default_factory=list)
    target: str | None = None
    dataset: str | None = None
    drafter_kind: str | None = None
    source: dict[str, Any] = field(default_factory=dict)
    proposal_rate: float | None = None  # fraction of decode steps that proposed; None: every step (or unknown)

    def levels(self) -> list[str]:
        return [lv for lv, have in zip(LEVELS, (self.mean_length is not None, self.per_position is not None,
                                                bool(self.requests))) if have]

    def tokens_per_decode_step(self) -> float | None:
        """Tokens per decode step over all of them: 1 + proposal_rate * (mean_length - 1)."""
        if self.mean_length is None:
            return None
        return 1.0 + (1.0 if self.proposal_rate is None else self.proposal_rate) * (self.mean_length - 1.0)


@dataclass(frozen=True)
class ProposalRate:
    """Decode steps of finished requests and the share of them that proposed (vLLM's `num_drafts`).

    Each decode step emits 1 + its accepted drafts and the prefill emits the first token, so the decode steps
    are output tokens - requests - accepted tokens. vLLM also counts drafts accepted past a request's end (the
    stop trims them; at most k per request), so that count can be up to k * requests short: `rate` is an upper
    bound and `rate_low` the lower one."""

    rate: float
    rate_low: float
    decode_steps: float
    drafts: float


def proposal_rate_from_counts(output_tokens: float, requests: float, drafts: float, accepted: float, k: int,
                              where: str = "counters") -> ProposalRate:
    """The proposal rate from run totals (see ProposalRate); counts that cannot come from one run are an error."""
    decode = output_tokens - requests - accepted
    if requests < 1 or drafts < 0 or accepted < 0:
        raise ValueError(f"{where}: expected requests >= 1 and counts >= 0, got requests {requests:g}, drafts "
                         f"{drafts:g}, accepted {accepted:g}")
    if decode < drafts and drafts - decode > k * requests:
        raise ValueError(f"{where}: {drafts:g} drafts but only {decode:g} decode steps (output tokens "
                         f"{output_tokens:g} - requests {requests:g} - accepted {accepted:g}): the counters cover "
                         "requests other than these (another client, or a counter not reset between runs)")
    if decode <= 0:
        raise ValueError(f"{where}: no decode steps (output tokens {output_tokens:g}, requests {requests:g}, "
                         f"accepted {accepted:g})")
    return ProposalRate(min(1.0, drafts / decode), min(1.0, drafts / (decode + k * requests)), decode, drafts)


# ------------------------------------------------------------------ level -> rates

def iid_rate(mean_length: float, k: int) -> float:
    """The i.i.d. per-draft rate a with expected_tokens(a, k) = mean_length (bisection; exact to 1e-12)."""
    if k < 1 or not 1.0 <= mean_length <= k + 1:
        raise ValueError(f"mean acceptance length {mean_length} at k = {k}: expected 1 <= length <= k + 1")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expected_tokens(mid, k) < mean_length else (lo, mid)
    return 0.5 * (lo + hi)


def conditional_rates(per_position: list[float]) -> list[float]:
    """S[i] = P(drafts 0..i accepted) -> P(draft i accepted | drafts before it were)."""
    out, prev = [], 1.0
    for i, s in enumerate(per_position):
        if not 0.0 <= s <= prev + 1e-12:
            raise ValueError(f"per_position[{i}] = {s}: expected a non-increasing list of probabilities")
        out.append(min(1.0, s / prev) if prev > 0 else 0.0)
        prev = s
    return out


def histogram_survival(hist: list[int]) -> np.ndarray:
    """P(acc_len > j) for j = 0..k from a per-request histogram of accepted drafts per step."""
    h = np.asarray(hist, dtype=float)
    tot = h.sum()
    return np.concatenate([[1.0], h[::-1].cumsum()[::-1][1:] / tot]) if tot else np.concatenate([[1.0], np.zeros(len(h) - 1)])


def _draw(survival: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """acc_len draws with P(acc_len > j) = survival[j] (survival[0] = 1), capped at len(survival)."""
    u = rng.random(n)
    return (1 + (u[:, None] < survival[None, 1:]).sum(axis=1)).astype(np.int32)


def survival(level: str, src: AcceptanceSource, request: int | None = None) -> np.ndarray:
    """P(acc_len > j), j = 0..measured_k, at one level (per_request: of request `request`)."""
    k = src.measured_k
    if level == "mean_length":
        a = iid_rate(src.mean_length, k)
        return a ** np.arange(k + 1)
    if level == "per_position":
        return np.concatenate([[1.0], np.asarray(src.per_position[:k], dtype=float)])
    return histogram_survival(src.requests[request].histogram)


EXTRAPOLATIONS = ("geometric", "none")
EXTRAPOLATION_RULE = ("beyond the measured k, each further draft is accepted with the i.i.d. rate a that gives the "
                      "measured mean length at the measured k (Leviathan's expectation solved for a)")


@dataclass(frozen=True)
class Extrapolation:
    """How a level-1/2 acceptance measured at `measured_k` is carried to larger k: a geometric tail of `rate`."""

    model: str
    measured_k: int
    rate: float
    fitted_from: str  # the level whose mean length the rate was solved from


def tail_rate(level: str, src: AcceptanceSource) -> float:
    """The per-draft rate of the geometric tail beyond measured_k: iid_rate of the level's mean length at that k."""
    if level not in ("mean_length", "per_position"):
        raise ValueError(f"only levels mean_length and per_position extrapolate, not {level!r}")
    mean = src.mean_length if level == "mean_length" else 1.0 + float(np.sum(src.per_position[:src.measured_k]))
    return iid_rate(min(mean, src.measured_k + 1.0), src.measured_k)


def extrapolation(level: str, src: AcceptanceSource) -> Extrapolation:
    """The geometric extrapolation of a level-1/2 source (the rule in EXTRAPOLATION_RULE)."""
    return Extrapolation("geometric", src.measured_k, tail_rate(level, src), level)


def extrapolated_survival(level: str, src: AcceptanceSource, k: int) -> np.ndarray:
    """P(acc_len > j), j = 0..k, for a level-1/2 source served at any k: as measured up to measured_k, then
    times the tail rate per further draft (at k <= measured_k: `survival` cut to k + 1 entries)."""
    s = survival(level, src)
    if k <= src.measured_k:
        return s[: k + 1]
    a = tail_rate(level, src)
    return np.concatenate([s, s[-1] * a ** np.arange(1, k - src.measured_k + 1)])


def extrapolated_mean_length(level: str, src: AcceptanceSource, k: int) -> float:
    """Expected tokens per verify step at k under the extrapolation (sum of `extrapolated_survival`)."""
    return float(extrapolated_survival(level, src, k).sum())


def _draw_tail(acc: np.ndarray, measured_k: int, rate: float, cap: int, rng: np.random.Generator) -> np.ndarray:
    """Draws that accepted all measured_k drafts continue geometrically: extra accepted drafts m with
    P(m >= j) = rate^j. The tail stops at `cap` (the output length: tokens past the output's end are never
    emitted, so a longer draw changes nothing)."""
    full = acc == measured_k + 1
    if not full.any() or rate <= 0.0:
        return acc
    u = rng.random(int(full.sum()))
    extra = np.full(u.shape, cap, dtype=np.int64) if rate >= 1.0 else np.minimum(
        np.floor(np.log(u) / np.log(rate)), cap).astype(np.int64)
    out = acc.astype(np.int64)
    out[full] += extra
    return np.minimum(out, measured_k + 1 + cap).astype(np.int32)


# ------------------------------------------------------------------ applying a level to a bundle

def with_level(bundle: TraceBundle, drafter: str, src: AcceptanceSource, level: str, seed: int,
               spec: DrafterSpec | None = None, extrapolate: str = "none") -> TraceBundle:
    """The bundle with `drafter`'s acceptance replaced by draws at `level` (lengths, ids, other drafters kept);
    a drafter not in the bundle is added with `spec`. Request i draws from stream i of `seed`. With
    `extrapolate="geometric"` a level-1/2 draw that accepted all measured_k drafts continues with the tail
    (`extrapolation`); the first measured_k + 1 outcomes are the same draws either way."""
    if extrapolate not in EXTRAPOLATIONS:
        raise ValueError(f"extrapolate: expected one of {EXTRAPOLATIONS}, got {extrapolate!r}")
    if level not in src.levels():
        raise ValueError(f"acceptance level {level!r} is not in the source (has {', '.join(src.levels()) or 'none'})")
    if drafter not in bundle.meta.drafters and spec is None:
        raise ValueError(f"drafter {drafter!r} is not in the bundle; give its kind and cost_model")
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(len(bundle.requests))]
    shared = None if level == "per_request" else survival(level, src)
    tail = extrapolation(level, src) if extrapolate == "geometric" and shared is not None else None
    reqs = []
    rate = src.proposal_rate
    for i, (r, rng) in enumerate(zip(bundle.requests, rngs)):
        surv = shared if shared is not None else survival(level, src, int(rng.integers(len(src.requests))))
        drafters = dict(r.drafters)
        acc = _draw(surv, r.output_len, rng)
        if tail is not None:
            acc = _draw_tail(acc, src.measured_k, tail.rate, r.output_len, rng)
        # a proposing step offers k drafts (measured_k; any k when the tail extrapolates past it)
        full = src.measured_k if tail is None else MAX_DRAFT_TOKENS
        prop = None if rate is None or rate >= 1 else \
            np.where(rng.random(r.output_len) < rate, full, 0).astype(np.int32)
        drafters[drafter] = DrafterTrace(acc_len=acc, proposal_len=prop)
        reqs.append(dataclasses.replace(r, drafters=drafters))
    meta_drafters = dict(bundle.meta.drafters)
    if spec is not None:
        meta_drafters[drafter] = spec
    extra = dict(bundle.meta.extra)
    extra.setdefault("acceptance_levels", {})[drafter] = {
        "level": level, "measured_k": src.measured_k, "proposal_rate": rate, "source": src.source,
        "extrapolation": None if tail is None else dataclasses.asdict(tail),
        "target": src.target, "dataset": src.dataset}
    meta = dataclasses.replace(bundle.meta, drafters=meta_drafters, extra=extra)
    return TraceBundle(meta, reqs)


def check_k(bundle: TraceBundle, drafter: str, k: int, where: str) -> None:
    """Refuse a run at a k the drafter's level-1/2 acceptance was not measured at or below (unless extrapolated)."""
    info = bundle.meta.extra.get("acceptance_levels", {}).get(drafter)
    if info and k > info["measured_k"] and not info.get("extrapolation"):
        raise ValueError(f"{where}: k = {k} but {drafter}'s acceptance ({info['level']}) was measured at "
                         f"k = {info['measured_k']}; it says nothing about longer drafts")


def plausibility(src: AcceptanceSource, drafter_kind: str | None, target: str | None,
                 dataset: str | None) -> list[str]:
    """Warnings: a learned drafter with a mean length near 1, or acceptance measured on another target/dataset."""
    out = []
    kind = drafter_kind or src.drafter_kind
    mean = src.mean_length if src.mean_length is not None else (
        float(survival("per_position", src).sum()) if src.per_position is not None else None)
    if kind in LEARNED_KINDS and mean is not None and mean < NEAR_ONE:
        out.append(f"mean acceptance length {mean:.3f} at k = {src.measured_k} for a learned drafter ({kind}) is "
                   f"near 1: the drafter accepts almost nothing (wrong drafter for this target, or a broken setup?)")
    if src.target and target and not same_model(src.target, target):
        out.append(f"acceptance measured with target {src.target!r} is used for target {target!r}")
    if src.dataset and dataset and src.dataset != dataset:
        out.append(f"acceptance measured on dataset {src.dataset!r} is used for dataset {dataset!r}")
    return out


def same_model(a: str, b: str) -> bool:
    """The same model under two names: equal, the same folder name (a local path and the name draftsim records,
    e.g. `/root/.cache/draftsim/models/smollm2-135m-instruct` and `smollm2-135m-instruct`), or one catalog entry
    (its name, an alias or its Hugging Face id, `traces.catalog.catalog_name`)."""
    if a == b or a.rstrip("/").rsplit("/", 1)[-1].lower() == b.rstrip("/").rsplit("/", 1)[-1].lower() and \
            (a.startswith(("/", ".")) or b.startswith(("/", "."))):
        return True
    from traces.catalog import catalog_name

    name = catalog_name(a)
    return name is not None and name == catalog_name(b)


def extrapolation_note(drafter: str, ex: Extrapolation) -> str:
    """The label of an extrapolated acceptance: the model, its rate and the measured k beside it."""
    return (f"{drafter}'s acceptance ({ex.fitted_from}) was measured at k = {ex.measured_k}; at larger k it is "
            f"extrapolated ({ex.model}: each further draft accepted with a = {ex.rate:.3f})")


def warn(messages: list[str]) -> None:
    for m in messages:
        warnings.warn(m, AcceptanceWarning, stacklevel=3)


# ------------------------------------------------------------------ from a bundle (for comparing levels)

def source_from_bundle(bundle: TraceBundle, drafter: str, k: int) -> AcceptanceSource:
    """What levels 1 and 2 would report for `drafter` served at k on this bundle: vLLM's counters over every
    verify step of a walk at k (mean length, P(drafts 0..i accepted))."""
    from traces.walk import walk

    drafted = np.zeros(k)
    steps = all_steps = 0
    for r in bundle.requests:
        w = walk(r.drafters[drafter], k)
        acc = w.accepted[w.proposed > 0]  # vLLM counts a draft only when the drafter proposed something
        steps += acc.size
        all_steps += w.accepted.size
        drafted += (acc[:, None] > np.arange(k)[None, :]).sum(axis=0)
    if not steps:
        raise ValueError(f"{drafter} proposed nothing at k = {k} on this bundle")
    per_pos = (drafted / steps).tolist()
    return AcceptanceSource(measured_k=k, mean_length=1.0 + float(sum(per_pos)), per_position=per_pos,
                            proposal_rate=steps / all_steps,
                            target=bundle.meta.target, dataset=bundle.meta.dataset,
                            drafter_kind=bundle.meta.drafters[drafter].kind,
                            source={"bundle": bundle.meta.dataset, "drafter": drafter, "k": k})


# ------------------------------------------------------------------ files

def source_to_dict(src: AcceptanceSource) -> dict[str, Any]:
    d = {"target": src.target, "dataset": src.dataset, "drafter_kind": src.drafter_kind,
         "measured_k": src.measured_k, "mean_length": src.mean_length, "per_position": src.per_position,
         "proposal_rate": src.proposal_rate, "requests": [dataclasses.asdict(r) for r in src.requests],
         "source": src.source}
    return {k: v for k, v in d.items() if v is not None and not (k == "requests" and v == [])}  # nothing else dropped


def save_source(src: AcceptanceSource, path: str | Path, inputs: tuple | list = ()) -> None:
    """Write `src` atomically after checking it with the rules load_source applies (source_from_dict), so no
    importer writes a file that cannot be loaded or describes impossible acceptance."""
    doc = source_to_dict(src)
    source_from_dict(doc, str(path))
    check_output_file(path, inputs, "acceptance file")
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False))


def _fail(where: str, msg: str, fld: str) -> None:
    raise TraceFormatError(where, msg, field=fld)


def source_from_dict(doc: Any, where: str) -> AcceptanceSource:
    """A validated AcceptanceSource; errors name the file and field."""
    if not isinstance(doc, dict):
        _fail(where, "expected a mapping", "")
    unknown = set(doc) - SOURCE_KEYS
    if unknown:
        _fail(where, f"unknown key(s) {sorted(unknown)}; expected some of {sorted(SOURCE_KEYS)}", sorted(unknown)[0])
    k = doc.get("measured_k")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFT_TOKENS:
        _fail(where, f"expected the k the acceptance was measured at (an integer in [1, {MAX_DRAFT_TOKENS}]), "
                     f"got {shorten(k)}", "measured_k")
    mean = doc.get("mean_length")
    if mean is not None and (isinstance(mean, bool) or not isinstance(mean, (int, float)) or not 1 <= mean <= k + 1):
        _fail(where, f"expected a number in [1, measured_k + 1 = {k + 1}], got {shorten(mean)}", "mean_length")
    pp = doc.get("per_position")
    if pp is not None:
        if not isinstance(pp, list) or len(pp) != k or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in pp):
            _fail(where, f"expected a list of measured_k = {k} probabilities", "per_position")
        try:
            conditional_rates(pp)
        except ValueError as e:
            _fail(where, str(e), "per_position")
    rate = doc.get("proposal_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1):
        _fail(where, f"expected the fraction of decode steps that proposed, in (0, 1], got {rate!r}", "proposal_rate")
    reqs = []
    for i, r in enumerate(doc.get("requests") or []):
        f = f"requests[{i}]"
        if not isinstance(r, dict) or set(r) != {"id", "k", "histogram"}:
            _fail(where, "expected a mapping with id, k, histogram", f)
        h = r["histogram"]
        if not isinstance(r["k"], int) or r["k"] != k or not isinstance(h, list) or len(h) != k + 1 or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in h):
            _fail(where, f"expected k = measured_k = {k} and a histogram of {k + 1} counts >= 0", f)
        reqs.append(RequestHistogram(str(r["id"]), k, h))
    if mean is None and pp is None and not reqs:
        _fail(where, "no acceptance: give mean_length, per_position or requests", "mean_length")
    src = doc.get("source") or {}
    return AcceptanceSource(k, None if mean is None else float(mean), None if pp is None else [float(x) for x in pp],
                            reqs, doc.get("target"), doc.get("dataset"), doc.get("drafter_kind"),
                            src if isinstance(src, dict) else {"note": str(src)},
                            None if rate is None else float(rate))


def load_source(path: str | Path) -> AcceptanceSource:
    return source_from_dict(load_yaml_file(path), str(path))


def source_from_vllm_counters(num_drafts: float, num_accepted: float, accepted_per_pos: list[float] | None,
                              k: int | None, origin: dict[str, Any], proposal: ProposalRate | None = None
                              ) -> AcceptanceSource:
    """vLLM's spec-decode counters (Prometheus totals or `vllm bench serve` deltas) -> levels 1 and 2, with the
    proposal rate when the source recorded the output tokens to derive it (else unknown, and the source says so)."""
    if num_drafts <= 0:
        raise ValueError("no drafts counted: speculative decoding did not run")
    per_pos = [a / num_drafts for a in accepted_per_pos] if accepted_per_pos else None
    k = k or (len(per_pos) if per_pos else None)
    if k is None:
        raise ValueError("the served k is unknown: give --k (num_speculative_tokens)")
    if per_pos is not None and len(per_pos) != k:
        raise ValueError(f"{len(per_pos)} per-position counters but k = {k}")
    origin = dict(origin)
    if proposal is None:
        origin["proposal_rate"] = "unknown: the source has no output token count; replayed as proposing every step"
    else:
        origin["proposal_rate"] = {"decode_steps": proposal.decode_steps, "drafts": proposal.drafts,
                                   "rate_low": proposal.rate_low,
                                   "rule": "drafts / (output tokens - requests - accepted tokens)"}
    return AcceptanceSource(k, 1.0 + num_accepted / num_drafts, per_pos, source=origin,
                            proposal_rate=None if proposal is None else proposal.rate)


def source_from_per_request(path: str | Path) -> AcceptanceSource:
    """JSONL of vLLM responses (or their `metrics.speculative_decoding` objects), one request a line -> level 3
    (and levels 1-2 from the summed counts)."""
    where = str(path)
    reqs: list[RequestHistogram] = []
    outs: list[int | None] = []
    for line, doc in iter_jsonl(path):
        sd = doc.get("metrics", {}).get("speculative_decoding") if isinstance(doc, dict) and "metrics" in doc else doc
        if not isinstance(sd, dict):
            raise TraceFormatError(where, "expected metrics.speculative_decoding (start vLLM with "
                                   "--per-request-spec-decode-metrics summary|detailed)", line=line,
                                   field="metrics.speculative_decoding")
        for key in ("acceptance_histogram", "num_spec_tokens", "num_spec_steps"):
            if key not in sd:
                raise TraceFormatError(where, "missing", line=line, field=key)
        h, k = sd["acceptance_histogram"], sd["num_spec_tokens"]
        if not isinstance(k, int) or k < 1 or not isinstance(h, list) or len(h) != k + 1 or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in h):
            raise TraceFormatError(where, "expected num_spec_tokens k >= 1 and k + 1 counts", line=line,
                                   field="acceptance_histogram")
        if sum(h) != sd["num_spec_steps"]:
            raise TraceFormatError(where, f"histogram sums to {sum(h)}, num_spec_steps is {sd['num_spec_steps']}",
                                   line=line, field="acceptance_histogram")
        if reqs and k != reqs[0].k:
            raise TraceFormatError(where, f"k = {k} differs from the first request's {reqs[0].k}", line=line,
                                   field="num_spec_tokens")
        reqs.append(RequestHistogram(str(doc.get("id", line)), k, h))
        outs.append(_output_tokens(doc))
    if not reqs:
        raise TraceFormatError(where, "no requests")
    k = reqs[0].k
    tot = np.sum([r.histogram for r in reqs], axis=0).astype(float)
    steps = tot.sum()
    per_pos = [float(tot[i + 1:].sum() / steps) for i in range(k)]
    origin: dict[str, Any] = {"format": "vLLM per-request metrics.speculative_decoding", "file": where}
    proposal = None
    if all(o is not None for o in outs):
        accepted = float(sum(j * c for j, c in enumerate(tot)))
        try:
            proposal = proposal_rate_from_counts(float(sum(outs)), len(outs), float(steps), accepted, k, where)
        except ValueError as e:
            raise TraceFormatError(where, str(e), field="usage.completion_tokens") from None
        origin["proposal_rate"] = {"decode_steps": proposal.decode_steps, "drafts": proposal.drafts,
                                   "rate_low": proposal.rate_low,
                                   "rule": "drafts / (output tokens - requests - accepted tokens)"}
    else:
        origin["proposal_rate"] = "unknown: the lines have no usage.completion_tokens; replayed as proposing every step"
    return AcceptanceSource(k, 1.0 + float(sum(per_pos)), per_pos, reqs, source=origin,
                            proposal_rate=None if proposal is None else proposal.rate)


def _output_tokens(doc: Any) -> int | None:
    """A response line's output token count (`usage.completion_tokens`, or `output_token_ids`), when present."""
    if not isinstance(doc, dict):
        return None
    usage = doc.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if n is None and isinstance(doc.get("output_token_ids"), list):
        n = len(doc["output_token_ids"])
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


class DrafterLevel(StrictModel):
    """One drafter's entry of `traces: {acceptance: {base, drafters: {NAME: ...}}}`, typed when the config loads:
    a source file or an inline level (mean_length at k, or per_position), checked against each other and the base
    bundle when it is loaded (`resolve_levels`)."""

    level: Literal[LEVELS] | None = Field(None, description="the level replayed (default: the source's highest)")
    file: str | None = Field(None, description="an acceptance source file (acceptance.yaml: draftsim import ...)")
    mean_length: float | None = Field(None, description="level 1: tokens per verify step at k")
    per_position: list[float] | None = Field(None, description="level 2: P(drafts 0..i all accepted), i < k")
    k: int | None = Field(None, description="the k it was measured at (default: per_position's length)")
    proposal_rate: float | None = Field(None, description="the share of decode steps that proposed (default: all)")
    kind: str | None = Field(None, description="a drafter the base bundle lacks: its kind")
    cost_model: str | None = Field(None, description="a drafter the base bundle lacks: its cost model")
    extrapolate: Literal[EXTRAPOLATIONS] = Field("geometric", description="past the measured k: geometric, or none "
                                                                         "(capped at it)")


def resolve_levels(bundle: TraceBundle, drafters: dict[str, DrafterLevel | dict[str, Any]], seed: int,
                   where: str = "traces.acceptance") -> TraceBundle:
    """Apply `{drafter: DrafterLevel}` (a mapping is parsed into one) to a bundle (a file's own proposal rate, or
    the inline one: the share of decode steps that propose), warning about implausible or borrowed acceptance and
    about the extrapolation past the measured k (`extrapolate: geometric`, the default; `none` caps at it)."""
    if not isinstance(drafters, dict) or not drafters:
        raise ValueError(f"{where}.drafters: expected a mapping drafter -> acceptance level")
    for j, (name, p) in enumerate(drafters.items()):
        f = f"{where}.drafters.{name}"
        if not isinstance(p, DrafterLevel):
            p = validate_model(DrafterLevel, p, f)
        if p.file is not None:
            src = load_source(p.file)
        else:
            k = p.k if p.k is not None else (len(p.per_position) if p.per_position is not None else None)
            src = source_from_dict({"measured_k": k, "mean_length": p.mean_length, "per_position": p.per_position,
                                    "proposal_rate": p.proposal_rate}, f)
        level = p.level or src.levels()[-1]
        spec = None
        if name not in bundle.meta.drafters:
            if p.kind is None or p.cost_model is None:
                raise ValueError(f"{f}: {name!r} is not in the base bundle; give kind and cost_model")
            spec = DrafterSpec(name, p.kind, p.cost_model)
        kind = spec.kind if spec else bundle.meta.drafters[name].kind
        extrapolate = p.extrapolate
        notes = plausibility(src, kind, bundle.meta.target, bundle.meta.dataset)
        if level != "per_request" and extrapolate == "geometric":
            notes.append(extrapolation_note(name, extrapolation(level, src)))
        warn([f"{f}: {m}" for m in notes])
        bundle = with_level(bundle, name, src, level, int(np.random.SeedSequence([seed, j]).generate_state(1)[0]),
                            spec, extrapolate if level != "per_request" else "none")
    return bundle


__all__ = ["AcceptanceSource", "ProposalRate", "proposal_rate_from_counts", "RequestHistogram", "AcceptanceWarning", "LEVELS", "iid_rate", "conditional_rates",
           "survival", "with_level", "check_k", "plausibility", "source_from_bundle", "save_source", "load_source",
           "source_from_dict", "source_from_vllm_counters", "source_from_per_request", "resolve_levels", "DrafterLevel",
           "EXTRAPOLATIONS", "EXTRAPOLATION_RULE", "Extrapolation", "tail_rate", "extrapolation", "extrapolated_survival",
           "extrapolated_mean_length", "extrapolation_note"]
