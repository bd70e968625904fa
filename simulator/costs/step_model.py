"""Structured step-time model: a target step priced by what it holds (decode, verify and prefill work apart).

One linear profile `a*kv + b*tokens + c*seqs + d` prices a batched-prompt calibration step and a load step
where one prompt joins seven decodes with the same per-token price; on vLLM they differ (prefill tokens run
in bulk, a decode token costs a whole sequence's pass, verify steps add the rejection sampler). The
structured model prices each part of a step with its own term:

    t = const + num_seqs*c_seq + draft_tokens*c_draft + decode_kv*c_kv                  (decode / verify)
          + prefill_tokens*c_pre + prefill_seqs*c_pseq + prefill_attn*c_attn            (prompt chunks)
          + prefill_step*c_pstep + verify_step*c_vstep                                  (per-step extras)

`roofline` form: the step's weight and KV read (`const + decode_kv*c_kv`) and its compute
(`(num_seqs + draft_tokens + prefill_tokens)*c_flop`) overlap, so the step costs the larger of the two plus
the other terms (compute-bound large prefills, memory-bound decodes). Both are fitted by least squares on
absolute error with non-negative coefficients (unbiased step totals, as latency means need).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from simulator.costs.profile_records import MAX_COEFFICIENT_S, Measurement, Provenance, check_coefficients

LINEAR_TERMS = ("const", "num_seqs", "draft_tokens", "decode_kv", "prefill_tokens", "prefill_seqs",
                "prefill_attn", "prefill_step", "verify_step")
ROOFLINE_TERMS = LINEAR_TERMS + ("flop_tokens",)
FORMS = ("linear", "roofline")
PHASES = ("decode", "verify", "prefill")


@dataclass(frozen=True)
class StepShape:
    """What one target step computes: its decoding sequences (decode or verify) and its prompt chunks."""

    decode_seqs: int  # sequences past their prompt: one sampled token each, plus their drafts
    draft_tokens: int  # draft tokens verified in the step (query tokens beyond one per decoding sequence)
    decode_kv: int  # context tokens the decoding sequences attend over (the KV read)
    prefill_seqs: int = 0  # sequences with a prompt (or recompute) chunk in the step
    prefill_tokens: int = 0  # tokens of those chunks
    prefill_kv: int = 0  # context of the chunks (cached before plus the chunk)
    prefill_attn: int = 0  # sum over chunks of chunk * (cached + chunk): attention's token pairs

    @classmethod
    def uniform(cls, num_seqs: int, batched_tokens: int, kv_tokens: int) -> "StepShape":
        """The three-number batch (sequences, tokens, KV) read as all decoding (uniform_batch): what a caller that
        knows no more asks for (a draft cost's profile)."""
        return cls(*uniform_batch(num_seqs, batched_tokens, kv_tokens))

    @property
    def num_seqs(self) -> int:
        return self.decode_seqs + self.prefill_seqs

    @property
    def phase(self) -> str:
        """prefill if any prompt chunk, else verify if any drafts, else decode (the step records' rule)."""
        if self.prefill_tokens:
            return "prefill"
        return "verify" if self.draft_tokens else "decode"

    def features(self) -> dict[str, float]:
        """The value of every term for this step."""
        return dict(zip(ROOFLINE_TERMS, shape_features(self.decode_seqs, self.draft_tokens, self.decode_kv,
                                                       self.prefill_seqs, self.prefill_tokens, self.prefill_attn)))


def shape_of(m: Measurement, where: str = "measurement") -> StepShape:
    """The step shape a measurement carries in `extra["shape"]` (as the vLLM step reader stores it)."""
    doc = m.extra.get("shape")
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: no step shape (extra.shape); fit the structured model on step records "
                         "(calibration/vllm_steps/fit.py target_measurements)")
    return StepShape(**doc)


def shape_features(decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens, prefill_attn):
    """Every term's value for a step of this shape, as floats in ROOFLINE_TERMS order (the engine compiles it)."""
    num_seqs = decode_seqs + prefill_seqs
    return (1.0, float(num_seqs), float(draft_tokens), float(decode_kv), float(prefill_tokens), float(prefill_seqs),
            float(prefill_attn), 1.0 if prefill_tokens > 0 else 0.0, 1.0 if draft_tokens > 0 else 0.0,
            float(num_seqs + draft_tokens + prefill_tokens))


_MEMORY = (0, 3)  # roofline form: const and decode_kv, the read side of max(read, compute)
_REST = (1, 2, 4, 5, 6, 7, 8)  # the other linear terms, added to max(read, compute)


def structured_time(c, roofline, f):
    """Seconds of a step with term values `f` (shape_features) under coefficients `c` (ROOFLINE_TERMS order, an
    absent term 0): the linear form sums the linear terms in order; the roofline form takes the larger of the read
    (const + decode_kv) and the compute (flop_tokens), then adds the rest in order. The kernels compile these lines;
    a profile priced in Python runs them as they are."""
    if not roofline:
        t = 0.0
        for j in range(9):
            t += c[j] * f[j]
        return t
    read = 0.0
    for j in _MEMORY:
        read += c[j] * f[j]
    compute = c[9] * f[9]
    rest = 0.0
    for j in _REST:
        rest += c[j] * f[j]
    return (read if read >= compute else compute) + rest


def uniform_batch(num_seqs, batched_tokens, kv_tokens):
    """(decode_seqs, draft_tokens, decode_kv) of a plain batch read as all decoding: every sequence decodes, the
    tokens beyond one each are drafts."""
    return num_seqs, max(0, batched_tokens - num_seqs), kv_tokens


def structured_batch_time(c, roofline, num_seqs, batched_tokens, kv_tokens):
    """`structured_time` of a plain three-number batch read as all decoding (uniform_batch): what a caller that
    knows no more asks for (a drafter's profile; target steps are priced by their whole shape,
    rules/pricing.target_time)."""
    decode_seqs, draft_tokens, decode_kv = uniform_batch(num_seqs, batched_tokens, kv_tokens)
    return structured_time(c, roofline, shape_features(decode_seqs, draft_tokens, decode_kv, 0, 0, 0))


def coefficient_vector(coef: dict[str, float]) -> np.ndarray:
    """`coef` as structured_time reads it: one float per ROOFLINE_TERMS entry, 0.0 where absent."""
    return np.array([float(coef.get(t, 0.0)) for t in ROOFLINE_TERMS], dtype=np.float64)


@dataclass
class StructuredProfile:
    """A target profile priced by step shape (see the module doc); `step_time` reads a plain batch as decoding."""

    name: str
    coefficients: dict[str, float]
    form: Literal["linear", "roofline"] = "linear"
    model: str = ""
    provenance: Provenance = field(default_factory=lambda: Provenance("unknown"))
    measurements: list[Measurement] = field(default_factory=list)
    fit: dict[str, Any] = field(default_factory=dict)
    kind: str = "structured"
    by_shape = True  # priced by a step's whole shape (rules/pricing.target_time)

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"structured profile {self.name!r}: form {self.form!r}; expected one of {FORMS}")
        allowed = ROOFLINE_TERMS if self.form == "roofline" else LINEAR_TERMS
        unknown = set(self.coefficients) - set(allowed)
        if unknown:
            raise ValueError(f"structured profile {self.name!r}: unknown coefficient(s) {sorted(unknown)}; "
                             f"expected some of {allowed}")
        check_coefficients(f"structured profile {self.name!r}", self.coefficients)

    @property
    def vector(self) -> np.ndarray:
        """The coefficients as structured_time reads them (coefficient_vector)."""
        return coefficient_vector(self.coefficients)

    def shape_seconds(self, decode_seqs: int, draft_tokens: int, decode_kv: int, prefill_seqs: int,
                      prefill_tokens: int, prefill_attn: int) -> float:
        """A step's seconds from its shape's numbers (rules/pricing.target_time asks this)."""
        return structured_time(self.vector, self.form == "roofline",
                               shape_features(decode_seqs, draft_tokens, decode_kv, prefill_seqs, prefill_tokens,
                                              prefill_attn))

    def shape_time(self, shape: StepShape) -> float:
        return self.shape_seconds(shape.decode_seqs, shape.draft_tokens, shape.decode_kv, shape.prefill_seqs,
                                  shape.prefill_tokens, shape.prefill_attn)

    def step_time(self, num_seqs: int, batched_tokens: int, kv_tokens: int) -> float:
        return structured_batch_time(self.vector, self.form == "roofline", num_seqs, batched_tokens, kv_tokens)


def _design(shapes: list[StepShape], terms: tuple[str, ...]) -> np.ndarray:
    feats = [s.features() for s in shapes]
    return np.array([[f[t] for t in terms] for f in feats], dtype=float)


def fit_structured(name: str, measurements: list[Measurement], form: Literal["linear", "roofline"] = "linear", *,
                   model: str = "", provenance: Provenance | None = None,
                   weighting: Literal["absolute", "relative"] = "absolute") -> StructuredProfile:
    """Least squares, non-negative coefficients; `roofline` starts from the linear fit. `absolute` error keeps
    noisy measured step totals unbiased; `relative` makes a 6 ms decode step count as much as a 90 ms prefill
    (for noiseless step prices, e.g. calibration/op_profile.py's grid)."""
    from scipy.optimize import least_squares, nnls

    if len(measurements) < 2:
        raise ValueError(f"cannot fit structured profile {name!r}: {len(measurements)} measurement(s), need >= 2")
    if form not in FORMS:
        raise ValueError(f"form: expected one of {FORMS}, got {form!r}")
    shapes = [shape_of(m, f"{name}: measurement {i}") for i, m in enumerate(measurements)]
    if weighting not in ("absolute", "relative"):
        raise ValueError(f"weighting: expected 'absolute' or 'relative', got {weighting!r}")
    y = np.array([m.seconds for m in measurements], dtype=float)
    w = 1.0 / np.maximum(y, 1e-12) if weighting == "relative" else np.ones_like(y)
    X = _design(shapes, LINEAR_TERMS)
    lin, _ = nnls(X * w[:, None], y * w)
    coef = dict(zip(LINEAR_TERMS, lin.tolist()))
    if form == "roofline":
        feats = [s.features() for s in shapes]
        terms = ROOFLINE_TERMS
        scale = np.array([max(np.abs([f[t] for f in feats]).max(), 1e-12) for t in terms])
        rows = [tuple(f.values()) for f in feats]

        def resid(x: np.ndarray) -> np.ndarray:
            c = (x / scale).tolist()
            return (np.array([structured_time(c, True, f) for f in rows]) - y) * w

        # two starts: the linear fit (compute never binding) and one where compute binds at the larger steps
        flops = np.array([f["flop_tokens"] for f in feats])
        starts = [dict(coef, flop_tokens=0.0),
                  dict(coef, flop_tokens=coef["const"] / max(float(np.percentile(flops, 75)), 1.0))]
        best = None
        for c0 in starts:
            res = least_squares(resid, np.array([c0.get(t, 0.0) for t in terms]) * scale, bounds=(0.0, np.inf),
                                method="trf")
            if best is None or res.cost < best.cost:
                best = res
        coef = dict(zip(terms, (best.x / scale).tolist()))
    coef = {t: float(min(max(v, 0.0), MAX_COEFFICIENT_S)) for t, v in coef.items()}
    prof = StructuredProfile(name, coef, form, model=model, provenance=provenance or Provenance("measured"),
                             measurements=list(measurements))
    prof.fit = {"method": f"structured {form}, least squares on {weighting} error, non-negative",
                "mape_percent": phase_mape(prof, measurements)["all"], "steps": len(measurements)}
    return prof


def measured_price(profile, m: Measurement, shape: StepShape | None = None) -> float:
    """The profile's price of a measured step: by its shape when the profile prices shapes, else its three-number
    batch (sequences, tokens, KV)."""
    if hasattr(profile, "shape_time"):
        return profile.shape_time(shape if shape is not None else shape_of(m))
    return profile.step_time(m.num_seqs, m.batched_tokens, m.kv_tokens)


def phase_mape(profile, measurements: list[Measurement]) -> dict[str, float]:
    """MAPE (percent) of `profile` on each phase's steps and on all of them; a profile without `shape_time`
    prices the three-number batch."""
    errs: dict[str, list[float]] = {"all": []}
    for i, m in enumerate(measurements):
        if m.seconds <= 0:
            continue
        s = shape_of(m, f"measurement {i}")
        pred = measured_price(profile, m, s)
        e = abs(pred - m.seconds) / m.seconds * 100.0
        errs["all"].append(e)
        errs.setdefault(s.phase, []).append(e)
    return {k: round(float(np.mean(v)), 2) for k, v in errs.items() if v}


def phase_bias(profile, measurements: list[Measurement]) -> dict[str, float]:
    """Total predicted over total measured seconds minus one, in percent, per phase: what means inherit."""
    pred: dict[str, float] = {}
    meas: dict[str, float] = {}
    for i, m in enumerate(measurements):
        s = shape_of(m, f"measurement {i}")
        p = measured_price(profile, m, s)
        for k in (s.phase, "all"):
            pred[k] = pred.get(k, 0.0) + p
            meas[k] = meas.get(k, 0.0) + m.seconds
    return {k: round(100.0 * (pred[k] / meas[k] - 1.0), 2) for k in meas if meas[k] > 0}


def holdout_split(measurements: list[Measurement], fraction: float, seed: int) -> tuple[list[Measurement],
                                                                                       list[Measurement]]:
    """(fit, held back): every step drawn into the held-back part with probability `fraction` from `seed`."""
    if not 0 < fraction < 1:
        raise ValueError(f"held-back fraction: expected a number in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    back = rng.random(len(measurements)) < fraction
    return ([m for m, b in zip(measurements, back) if not b], [m for m, b in zip(measurements, back) if b])


def select_form(name: str, measurements: list[Measurement], *, seed: int = 0, fraction: float = 0.25,
                model: str = "", provenance: Provenance | None = None) -> tuple[StructuredProfile, dict[str, Any]]:
    """Fit both forms on the fit part, keep the one with the lower held-back mean absolute error, refit it on
    every step; the report has each form's held-back MAPE per phase and bias."""
    fit_part, back = holdout_split(measurements, fraction, seed)
    if len(fit_part) < 2 or not back:
        prof = fit_structured(name, measurements, "linear", model=model, provenance=provenance)
        return prof, {"form": "linear", "held_back_steps": 0, "note": "too few steps to hold any back"}
    report: dict[str, Any] = {"held_back_steps": len(back), "fit_steps": len(fit_part), "seed": seed,
                              "forms": {}}
    best, best_err = "linear", np.inf
    for form in FORMS:
        p = fit_structured(name, fit_part, form, model=model, provenance=provenance)
        err = float(np.mean([abs(p.shape_time(shape_of(m)) - m.seconds) for m in back]))
        report["forms"][form] = {"held_back_mape_percent": phase_mape(p, back),
                                 "held_back_bias_percent": phase_bias(p, back), "held_back_mae_s": err}
        if err < best_err - 1e-12:
            best, best_err = form, err
    report["form"] = best
    prof = fit_structured(name, measurements, best, model=model, provenance=provenance)
    prof.fit["held_back"] = report
    return prof, report


def structured_to_dict(p: StructuredProfile) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": p.kind, "name": p.name, "model": p.model, "form": p.form,
                           "provenance": asdict(p.provenance), "coefficients": dict(p.coefficients)}
    if p.fit:
        out["fit"] = p.fit
    out["measurements"] = [asdict(m) for m in p.measurements]
    return out
