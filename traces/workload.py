"""Workloads: which traces are replayed, in what order, arriving when (open loop) or by N clients (closed loop).

The YAML config's `workload:` section is a `WorkloadSpec`. `build_workload` turns a bundle and a spec into a
`Workload`; with parametric lengths the acceptance traces must have those lengths, so
`workload_and_bundle` first draws a synthetic bundle fitted to the given one and replays that. Fitting and
drawing acceptance take seconds, so a caller whose runs never draft (AR only) passes need_acceptance=False:
the requests, lengths, categories and arrivals are the same, and reading their acceptance raises.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Iterator, Literal, Mapping, NoReturn, Union

import numpy as np
from pydantic import Field, model_validator

from traces.bundle import BundleMeta, DrafterTrace, RequestTrace, TraceBundle
from traces.errors import TraceFormatError, shorten
from traces.lengths import LengthDist
from traces.limits import MAX_NUM_REQUESTS
from traces.synthetic.fit_cache import fit_synth_spec_cached
from traces.synthetic.spec import (CategoryLengths, category_weight, draw_shapes, make_synthetic_bundle,
                                   split_by_category, synth_request_ids)


@dataclass(frozen=True)
class WorkloadRequest:
    """One request to simulate: replays trace `trace_id`; arrival_time is None in a closed loop."""

    request_id: str
    trace_id: str
    arrival_time: float | None
    prompt_len: int
    output_len: int
    category: str | None = None


@dataclass(frozen=True)
class ClosedLoop:
    """`clients` users; each sends its next request `think_time` s after its previous one finishes."""

    clients: int
    think_time: float


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests in issue order, one column per attribute (no object per request: a plan builds millions);
    open loop when closed_loop is None (every arrival set). `requests` gives them one object each."""

    request_ids: tuple[str, ...]
    trace_ids: tuple[str, ...]
    arrival: np.ndarray | None  # float64 seconds, read-only; None in a closed loop
    prompt_len: np.ndarray  # int64, read-only
    output_len: np.ndarray  # int64, read-only
    categories: tuple[str | None, ...]
    closed_loop: ClosedLoop | None = None

    def __len__(self) -> int:
        return len(self.request_ids)

    @cached_property
    def requests(self) -> list[WorkloadRequest]:
        arrivals = self.arrival.tolist() if self.arrival is not None else [None] * len(self)
        return [WorkloadRequest(i, t, a, p, o, c) for i, t, a, p, o, c in
                zip(self.request_ids, self.trace_ids, arrivals, self.prompt_len.tolist(), self.output_len.tolist(),
                    self.categories)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Workload):
            return NotImplemented
        return self.closed_loop == other.closed_loop and self.requests == other.requests


# ---------------------------------------------------------------- the config section


from traces.config_base import StrictModel as _Strict  # noqa: E402


class PoissonArrivals(_Strict):
    """Exponential inter-arrival times, `rate` requests per second."""

    kind: Literal["poisson"]
    rate: float = Field(ge=1e-6, le=1e9, description="requests per second")


class GammaArrivals(_Strict):
    """Gamma inter-arrival times with mean 1/rate and coefficient of variation `cv` (cv = 1 is Poisson)."""

    kind: Literal["gamma"]
    rate: float = Field(ge=1e-6, le=1e9, description="requests per second")
    cv: float = Field(ge=1e-3, le=1e3)


class ClosedLoopArrivals(_Strict):
    """N clients, each with at most one request in flight, waiting `think_time` s between requests."""

    kind: Literal["closed_loop"]
    clients: int = Field(ge=1, le=MAX_NUM_REQUESTS)
    think_time: float = Field(0.0, ge=0, le=1e9)


class ReplayArrivals(_Strict):
    """Recorded arrival times: the bundle's own `arrival_time`s, or a text file with one time (s) per line."""

    kind: Literal["replay"]
    file: str | None = None


Arrivals = Annotated[Union[PoissonArrivals, GammaArrivals, ClosedLoopArrivals, ReplayArrivals],
                     Field(discriminator="kind")]


class BundleLengths(_Strict):
    """Each request keeps the prompt and output length of the trace it replays."""

    source: Literal["bundle"] = "bundle"


class ParametricLengths(_Strict):
    """Lengths drawn from distributions; acceptance traces of those lengths come from generators fitted to the bundle."""

    source: Literal["parametric"]
    prompt: LengthDist
    output: LengthDist
    acceptance_model: Literal["auto", "iid", "positional", "bursty"] = "auto"


Lengths = Annotated[Union[BundleLengths, ParametricLengths], Field(discriminator="source")]


class Sampling(_Strict):
    """How traces are picked: without replacement (each at most once) unless with_replacement; `repeat` replays
    them in whole passes (each trace once per pass, a fresh order per pass when shuffle), so every trace is used
    equally often, up to the last pass, which stops at num_requests."""

    with_replacement: bool = False
    shuffle: bool = True
    repeat: bool = False

    @model_validator(mode="after")
    def _one_reuse_rule(self):
        if self.repeat and self.with_replacement:
            raise ValueError("repeat (whole passes over the traces) and with_replacement (independent "
                             "draws) are two ways to reuse traces; set one")
        return self


class WorkloadSpec(_Strict):
    """The `workload:` section of an experiment config. num_requests None = one per trace (or per replayed time);
    `categories` keeps only the bundle's requests of those categories (e.g. [chat]) before anything is picked."""

    num_requests: int | None = Field(None, ge=1, le=MAX_NUM_REQUESTS)
    arrival: Arrivals
    lengths: Lengths = BundleLengths()
    sample: Sampling = Sampling()
    categories: list[Annotated[str, Field(min_length=1)]] | None = Field(None, min_length=1)


def select_categories(bundle: TraceBundle, categories: list[str] | None) -> TraceBundle:
    """The bundle with only the requests of `categories` (all when None); unknown names are an error listing
    the bundle's categories."""
    if categories is None:
        return bundle
    present = sorted({r.category for r in bundle.requests if r.category})
    unknown = [c for c in categories if c not in present]
    if unknown:
        import difflib

        hints = [f"{c!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(c, present, n=1)) else repr(c)
                 for c in unknown]
        have = f"its categories are {present}" if present else "its requests carry no category"
        raise ValueError(f"workload.categories: the bundle has no requests of category {', '.join(hints)}; {have}")
    keep = set(categories)
    if all(r.category in keep for r in bundle.requests):
        return bundle
    return TraceBundle(bundle.meta, [r for r in bundle.requests if r.category in keep])


# ---------------------------------------------------------------- arrivals


def poisson_arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process (first arrival after one gap)."""
    return np.cumsum(rng.exponential(1.0 / rate, size=n))


def gamma_arrivals(n: int, rate: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times with gamma gaps: shape 1/cv^2, mean 1/rate."""
    shape = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))


def load_arrival_times(path: str | Path) -> np.ndarray:
    """A text file of arrival times, one finite non-negative number per line, non-decreasing."""
    from traces.parsing import read_text

    path = str(path)
    text = read_text(path)  # regular file, size limit, UTF-8: errors name the file
    times: list[float] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        try:
            t = float(s)
        except ValueError:
            raise TraceFormatError(path, f"expected one arrival time in seconds, got {shorten(s)}", line=line_no) from None
        if not math.isfinite(t) or t < 0:
            raise TraceFormatError(path, f"expected a finite time >= 0, got {s}", line=line_no)
        if times and t < times[-1]:
            raise TraceFormatError(path, f"times must not decrease ({t} after {times[-1]})", line=line_no)
        times.append(t)
    if not times:
        raise TraceFormatError(path, "contains no arrival times")
    return np.asarray(times)


# ---------------------------------------------------------------- building


def pick_traces(num_traces: int, n: int, sample: Sampling, rng: np.random.Generator) -> np.ndarray:
    """Indices of the traces the n requests replay."""
    if sample.with_replacement:
        return rng.integers(0, num_traces, size=n)
    if sample.repeat and num_traces:
        passes = [rng.permutation(num_traces) if sample.shuffle else np.arange(num_traces)
                  for _ in range(-(-n // num_traces))]
        return np.concatenate(passes)[:n]
    if n > num_traces:
        raise ValueError(f"workload.num_requests = {n} but the bundle has {num_traces} traces; "
                         "set workload.sample.with_replacement: true (independent draws) or repeat: true (whole "
                         "passes) to reuse traces")
    return rng.permutation(num_traces)[:n] if sample.shuffle else np.arange(n)


def request_ids(trace_ids: list[str]) -> list[str]:
    """The first use of a trace keeps its id; the n-th reuse is `<trace_id>#<n>`."""
    if len(set(trace_ids)) == len(trace_ids):  # no trace reused (a parametric workload's): every id is its trace's
        return list(trace_ids)
    uses: dict[str, int] = {}
    out = []
    for t in trace_ids:
        n = uses.get(t, 0)
        uses[t] = n + 1
        out.append(t if n == 0 else f"{t}#{n}")
    if len(set(out)) != len(out):
        raise ValueError("request ids collide: a bundle trace id already has the form '<id>#<n>'")
    return out


@dataclass(frozen=True)
class RequestDraw:
    """The rate-independent part of a workload: which traces the requests replay (indices into the bundle after
    `categories`), their ids, lengths and categories, and the generator's state after the picks (arrival times are
    drawn from there on). Read-only: shared by every workload built from the same draw."""

    picks: np.ndarray
    request_ids: tuple[str, ...]
    trace_ids: tuple[str, ...]
    prompt_len: np.ndarray
    output_len: np.ndarray
    categories: tuple[str | None, ...]
    rng_state: dict


DRAW_MEMO_MAX_REQUESTS = 500_000  # requests held by the per-process memo of draws (oldest dropped first)
_draws: "OrderedDict[tuple, RequestDraw]" = OrderedDict()


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def draw_requests(bundle: TraceBundle, n: int, sample: Sampling, seed: int) -> RequestDraw:
    """The traces n requests replay, picked from `seed`'s generator, with their ids (`request_ids`).

    A plan or sweep draws the same requests at many arrival rates (common random numbers), so draws are kept
    per process, keyed by what they depend on: the bundle's request ids, lengths and categories, n, the sampling
    rule and the seed. A kept draw is the same draw (the generator's state after it included), so a workload
    built from it is identical to one built afresh."""
    reqs = bundle.requests
    key = (tuple(map(attrgetter("id", "prompt_len", "output_len", "category"), reqs)), n, sample.with_replacement,
           sample.shuffle, sample.repeat, seed)
    got = _draws.get(key)
    if got is not None:
        _draws.move_to_end(key)
        return got
    rng = np.random.default_rng(seed)
    picks = _readonly(np.asarray(pick_traces(len(reqs), n, sample, rng), dtype=np.int64))
    order = picks.tolist()
    ids, prompt_lens, output_lens, cats = zip(*key[0]) if reqs else ((), (), (), ())  # per trace, in bundle order
    trace_ids = tuple(map(ids.__getitem__, order))
    draw = RequestDraw(picks, tuple(request_ids(list(trace_ids))), trace_ids,
                       _readonly(np.array(prompt_lens, dtype=np.int64).reshape(-1)[picks]),
                       _readonly(np.array(output_lens, dtype=np.int64).reshape(-1)[picks]),
                       tuple(map(cats.__getitem__, order)), rng.bit_generator.state)
    _draws[key] = draw
    while sum(len(d.picks) for d in _draws.values()) > DRAW_MEMO_MAX_REQUESTS and len(_draws) > 1:
        _draws.popitem(last=False)
    return draw


def build_workload(bundle: TraceBundle, spec: WorkloadSpec, seed: int) -> Workload:
    """Pick traces (seeded), give each request its id and arrival time (open loop) or a closed loop."""
    if isinstance(spec.lengths, ParametricLengths):
        raise ValueError("parametric lengths need acceptance traces of those lengths: "
                         "use workload_and_bundle(bundle, spec, seed), which draws them")
    bundle = select_categories(bundle, spec.categories)
    arrival = spec.arrival
    times: np.ndarray | None = None
    if isinstance(arrival, ReplayArrivals) and arrival.file is not None:
        times = load_arrival_times(arrival.file)
        n = spec.num_requests or times.shape[0]
        if n > times.shape[0]:
            raise ValueError(f"workload.num_requests = {n} but {arrival.file} has {times.shape[0]} arrival times")
        times = times[:n]
    else:
        n = spec.num_requests or len(bundle.requests)
    draw = draw_requests(bundle, n, spec.sample, seed)
    rng = np.random.default_rng(seed)
    rng.bit_generator.state = draw.rng_state  # the generator as the picks left it
    closed = None
    order = None
    if isinstance(arrival, PoissonArrivals):
        times = poisson_arrivals(n, arrival.rate, rng)
    elif isinstance(arrival, GammaArrivals):
        times = gamma_arrivals(n, arrival.rate, arrival.cv, rng)
    elif isinstance(arrival, ClosedLoopArrivals):
        closed = ClosedLoop(arrival.clients, arrival.think_time)
    elif times is None:  # replay the bundle's own times, in time order
        recorded = [bundle.requests[i].arrival_time for i in draw.picks.tolist()]
        missing = [t for t, a in zip(draw.trace_ids, recorded) if a is None]
        if missing:
            raise ValueError(f"workload.arrival.kind = replay needs arrival_time on every trace; "
                             f"{len(missing)} lack it (first: {missing[0]!r}); give workload.arrival.file instead")
        times = np.asarray(recorded, dtype=float)
        order = np.argsort(times, kind="stable")
        times = times[order]
    if order is None:
        ids, trace_ids, prompt, output, cats = (draw.request_ids, draw.trace_ids, draw.prompt_len, draw.output_len,
                                                draw.categories)
    else:  # ids follow the time order, as the requests are issued
        olist = order.tolist()
        trace_ids = tuple(draw.trace_ids[i] for i in olist)
        ids = tuple(request_ids(list(trace_ids)))
        prompt, output = _readonly(draw.prompt_len[order]), _readonly(draw.output_len[order])
        cats = tuple(draw.categories[i] for i in olist)
    arrivals = _readonly(np.array(times, dtype=float)) if times is not None else None
    return Workload(ids, trace_ids, arrivals, prompt, output, cats, closed)


class AcceptanceNotDrawnError(RuntimeError):
    """A request's acceptance trace was read, but the workload was built with need_acceptance=False."""


class AcceptanceNotDrawn(Mapping[str, DrafterTrace]):
    """Stands in for `RequestTrace.drafters` when acceptance was not drawn: any read raises, so a run that drafts
    on such a workload fails at once instead of replaying made-up acceptance."""

    def __init__(self, request_id: str):
        self._request_id = request_id

    def _refuse(self) -> NoReturn:
        raise AcceptanceNotDrawnError(
            f"request {self._request_id!r}: its acceptance traces were not drawn (the workload was built with "
            "workload_and_bundle(..., need_acceptance=False)); runs that draft need need_acceptance=True")

    def __getitem__(self, drafter: str) -> DrafterTrace:
        self._refuse()

    def __iter__(self) -> Iterator[str]:
        self._refuse()

    def __len__(self) -> int:
        self._refuse()

    def __repr__(self) -> str:
        return "AcceptanceNotDrawn()"


def _num_parametric_requests(bundle: TraceBundle, spec: WorkloadSpec) -> int:
    if spec.num_requests is not None:
        return spec.num_requests
    if isinstance(spec.arrival, ReplayArrivals):
        return load_arrival_times(spec.arrival.file).shape[0]
    return len(bundle.requests)


def _drawn_bundle(bundle: TraceBundle, lengths: ParametricLengths, n: int, seed: int) -> TraceBundle:
    """Parametric-length requests with acceptance traces drawn from generators fitted to `bundle` (cached)."""
    models = None
    if lengths.acceptance_model != "auto":
        models = {d: lengths.acceptance_model for d in bundle.meta.drafters}
    fitted = fit_synth_spec_cached(split_by_category(bundle), models, dataset=f"{bundle.meta.dataset}-parametric")
    cats = {c: cat.model_copy(update={"prompt": lengths.prompt, "output": lengths.output})
            for c, cat in fitted.categories.items()}
    return make_synthetic_bundle(fitted.model_copy(update={"categories": cats}), seed=seed, num_requests=n)


def _shapes_bundle(bundle: TraceBundle, lengths: ParametricLengths, n: int, seed: int) -> TraceBundle:
    """The same requests as `_drawn_bundle` (ids, categories, lengths: its first random draws) without fitting
    or drawing acceptance; every request's `drafters` refuses to be read."""
    shapes = {c: CategoryLengths(category_weight(b), lengths.prompt, lengths.output)
              for c, b in split_by_category(bundle).items()}
    cats, prompt, output = draw_shapes(shapes, n, np.random.default_rng(seed))
    # positional: RequestTrace(id, prompt_len, output_len, drafters, category), a quarter cheaper per request
    requests = [RequestTrace(rid, pl, ol, AcceptanceNotDrawn(rid), cat)
                for rid, cat, pl, ol in zip(synth_request_ids(n), cats, prompt.tolist(), output.tolist())]
    m = bundle.meta
    meta = BundleMeta(target=m.target, drafters=dict(m.drafters), temperature=m.temperature,
                      dataset=f"{m.dataset}-parametric",
                      source={"generator": "parametric lengths, acceptance not drawn", "seed": seed,
                              "num_requests": n})
    return TraceBundle(meta, requests)


def workload_and_bundle(bundle: TraceBundle, spec: WorkloadSpec, seed: int,
                        need_acceptance: bool = True) -> tuple[Workload, TraceBundle]:
    """The workload and the bundle its trace ids refer to (a synthetic one for parametric lengths).

    need_acceptance=False (no run drafts) skips fitting and drawing acceptance for parametric lengths: same
    workload, but the returned bundle's acceptance cannot be read. Bundle lengths are unaffected (no cost).
    With `categories`, only those categories are replayed (or fitted, for parametric lengths)."""
    bundle = select_categories(bundle, spec.categories)
    if not isinstance(spec.lengths, ParametricLengths):
        return build_workload(bundle, spec, seed), bundle
    if isinstance(spec.arrival, ReplayArrivals) and spec.arrival.file is None:
        raise ValueError("parametric lengths draw new requests, which have no recorded arrival times: "
                         "give workload.arrival.file or another arrival kind")
    n = _num_parametric_requests(bundle, spec)
    make = _drawn_bundle if need_acceptance else _shapes_bundle
    # drawing the requests and sampling the workload from them are two consumers: one child seed each
    draw_seed, sample_seed = (int(c.generate_state(1)[0]) for c in np.random.SeedSequence(seed).spawn(2))
    synth = make(bundle, spec.lengths, n, draw_seed)
    if not any(r.category for r in bundle.requests):
        for r in synth.requests:
            r.category = None
    once = spec.model_copy(update={"lengths": BundleLengths(), "num_requests": n,
                                   "sample": Sampling(with_replacement=False, shuffle=False)})
    return build_workload(synth, once, sample_seed), synth
