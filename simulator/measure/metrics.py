"""Summary metrics of one simulated run, computed from the engine's per-request and per-step tables.

`summarize` returns a flat dict of JSON-ready values (int, float rounded to 7 significant digits, or
None where a metric is undefined), always with the same keys in the same order, so the same run gives
a byte-identical `summary.json`. Times are seconds of simulated time.

Whole-run figures (throughput_tok_s, requests_per_s, goodput_req_s, the percentiles) span first arrival to last
finish, warm-up and drain included; the `steady_*` figures and the `overloaded` flag follow the one window rule
of simulator/measure/steady_state.py and are the ones to compare across runs.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.engine.records import REQUEST_COLUMNS, STEP_COLUMNS
from simulator.measure.quantiles import percentiles
from simulator.measure.steady_state import SATURATED_TRIM_FRACTION, SteadyState, saturated_window

SIGNIFICANT_DIGITS = 7
PERCENTILES = (50, 90, 99)
STEP_PHASES = ("prefill", "decode", "draft", "draft_prefill", "verify", "mixed", "sync")
SLO_KEYS = ("ttft_s", "tpot_s", "e2e_s")

_REQUEST_NEEDS = (
    "arrival_time", "output_len", "finish_time", "ttft", "tpot", "e2e", "queue_delay",
    "decode_steps", "proposed_tokens", "accepted_tokens", "preemptions",
)
_STEP_NEEDS = ("step", "device", "phase", "start", "end", "num_seqs", "kv_blocks_used")


def round_sig(x: float, digits: int = SIGNIFICANT_DIGITS) -> float | None:
    """Round to `digits` significant digits; NaN/inf become None (JSON null)."""
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def percentile_summary(values: np.ndarray, prefix: str, unit: str = "_s") -> dict[str, float | None]:
    """Mean and p50/p90/p99 of the finite entries of `values` (linear interpolation), keyed `prefix_<stat><unit>`.
    `values` is left as it is and not copied when all finite (a run's ITLs are tens of millions of values: a copy
    costs more than the percentiles, simulator/measure/quantiles.py)."""
    v = np.asarray(values, dtype=float).reshape(-1)
    finite = np.isfinite(v)
    if not finite.all():
        v = v[finite]
    out: dict[str, float | None] = {}
    out[f"{prefix}_mean{unit}"] = round_sig(v.mean()) if v.size else None
    pcts = percentiles(v, PERCENTILES) if v.size else [math.nan] * len(PERCENTILES)
    for p, val in zip(PERCENTILES, pcts):
        out[f"{prefix}_p{p}{unit}"] = round_sig(val)
    return out


def str_values(col: pd.Series) -> np.ndarray:
    """A text column's values as `col.astype(str).to_numpy()` gives them (an object array of str), without pandas'
    round trip through its string dtype when every value already is a str (the engine's tables: a 100,000-request
    run's steps table has half a million rows). The array may be the column's own: read it, do not write it."""
    values = col.to_numpy()
    if values.dtype == object and pd.api.types.infer_dtype(values, skipna=False) == "string":
        return values
    return col.astype(str).to_numpy()


def union_length(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Total length of the union of intervals [start, end), clipped to [lo, hi]."""
    s = np.clip(np.asarray(starts, dtype=float), lo, hi)
    e = np.clip(np.asarray(ends, dtype=float), lo, hi)
    if s.size == 0:
        return 0.0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    # Each interval adds what lies beyond the furthest end seen before it.
    prev_max_end = np.concatenate(([lo], np.maximum.accumulate(e)[:-1]))
    return float(np.maximum(0.0, e - np.maximum(s, prev_max_end)).sum())


def goodput_mask(requests_df: "pd.DataFrame | Mapping[str, np.ndarray]",
                 slo: Mapping[str, float | None]) -> np.ndarray:
    """Boolean per request: finished and within every SLO bound given (a missing or None bound is no bound).
    `requests_df`: the requests table, or its columns as arrays (simulator.measure.early_stop.progress_columns).

    TPOT is undefined for one-token outputs; such a request meets any TPOT bound.
    """
    ok = np.isfinite(np.asarray(requests_df["finish_time"], dtype=float))
    for key, column in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2e")):
        bound = slo.get(key)
        if bound is None:
            continue
        vals = np.asarray(requests_df[column], dtype=float)
        if column == "tpot":
            ok &= np.isnan(vals) | (vals <= bound)
        else:
            ok &= vals <= bound
    return ok


def validate_slo(slo: Mapping[str, float | None] | None) -> dict[str, float | None]:
    """Check SLO keys and values; return a dict with every key of SLO_KEYS (None = unconstrained)."""
    slo = dict(slo or {})
    unknown = sorted(set(slo) - set(SLO_KEYS))
    if unknown:
        raise ValueError(f"slo: unknown key(s) {unknown}; expected some of {list(SLO_KEYS)}")
    out: dict[str, float | None] = {}
    for key in SLO_KEYS:
        val = slo.get(key)
        if val is not None:
            if isinstance(val, bool) or not isinstance(val, (int, float)) or not val > 0 or not math.isfinite(val):
                raise ValueError(f"slo.{key}: expected a positive finite number of seconds, got {val!r}")
            val = float(val)
        out[key] = val
    return out


def _require_columns(df: pd.DataFrame, needed: Sequence[str], table: str, schema: Mapping) -> None:
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ValueError(
            f"{table} table lacks column(s) {missing}; expected the schema of simulator/engine/records.py "
            f"({', '.join(schema)})"
        )


def _busy_seconds(rows: pd.DataFrame, t0: float, t1: float) -> float:
    """Union of the slices' time within [t0, t1], taken per replica (a cluster's steps table) and summed."""
    if "replica" not in rows.columns:
        return union_length(rows["start"].to_numpy(), rows["end"].to_numpy(), t0, t1)
    return sum(union_length(g["start"].to_numpy(), g["end"].to_numpy(), t0, t1)
               for _, g in rows.groupby("replica", sort=True))


def _device_busy(steps_df: pd.DataFrame, t0: float, t1: float, num_draft_gpus: int,
                 replicas: int = 1) -> dict[str, float | None]:
    """Busy fraction per device: union of its slices over the makespan (a cluster: the mean over its
    replicas); None for a device the run lacks."""
    span = t1 - t0
    present = set(pd.unique(str_values(steps_df["device"])))
    out: dict[str, float | None] = {}
    for dev in ["target", "drafter"] + sorted(present - {"target", "drafter"}):
        exists = dev == "target" or dev in present or (dev == "drafter" and num_draft_gpus > 0)
        if not exists or not span > 0:
            out[f"busy_fraction_{dev}"] = None
            continue
        busy = _busy_seconds(steps_df[steps_df["device"] == dev], t0, t1)
        out[f"busy_fraction_{dev}"] = round_sig(busy / (span * replicas))
    return out


def _target_phase_shares(steps_df: pd.DataFrame) -> dict[str, float | None]:
    """Share of the target's slice time spent in each phase (verify_share, draft_share, ...)."""
    tgt = steps_df[steps_df["device"] == "target"]
    dur = (tgt["end"] - tgt["start"]).to_numpy(dtype=float)
    total = float(dur.sum())
    phases = str_values(tgt["phase"])
    unknown = sorted(set(phases) - set(STEP_PHASES))
    if unknown:
        raise ValueError(f"steps table: unknown phase(s) {unknown}; expected one of {list(STEP_PHASES)}")
    return {
        f"{ph}_share": (round_sig(dur[phases == ph].sum() / total) if total > 0 else None)
        for ph in ("verify", "draft", "draft_prefill", "prefill", "decode", "mixed")
    }


@dataclass(frozen=True)
class RunTotals:
    """A run's whole-run counts (warm-up and drain included): its requests, the finished ones and their output
    tokens, and the span from the first arrival to the last finish that the whole-run rates divide by."""

    finished: pd.DataFrame
    requests: int
    done: int
    output_tokens: int
    t0: float
    t1: float

    @classmethod
    def of(cls, requests_df: pd.DataFrame) -> "RunTotals":
        finish = requests_df["finish_time"].to_numpy(dtype=float)
        done = np.isfinite(finish)
        fin = requests_df[done]
        n_done = int(done.sum())
        t0 = float(requests_df["arrival_time"].min()) if n_done else math.nan
        t1 = float(finish[done].max()) if n_done else math.nan
        return cls(fin, int(len(requests_df)), n_done, int(fin["output_len"].sum()), t0, t1)

    @property
    def span(self) -> float:
        return self.t1 - self.t0

    def per_s(self, x: float) -> float | None:
        """A whole-run rate (`throughput_tok_s`, `requests_per_s`, ...): x over the span; None without one."""
        return round_sig(x / self.span) if self.span > 0 else None


def acceptance_lengths(finished: pd.DataFrame) -> tuple[float | None, float | None]:
    """(mean, pooled) tokens per verify/decode step of the finished requests that had such a step: the mean of each
    request's own figure, and all their tokens over all their steps."""
    steps_per_req, decode_tokens = decode_tokens_and_steps(finished)
    has_steps = steps_per_req > 0
    if not has_steps.any():
        return None, None
    return (round_sig((decode_tokens[has_steps] / steps_per_req[has_steps]).mean()),
            round_sig(decode_tokens[has_steps].sum() / steps_per_req[has_steps].sum()))


def summarize(
    requests_df: pd.DataFrame,
    steps_df: pd.DataFrame,
    itl: np.ndarray,
    *,
    slo: Mapping[str, float | None] | None,
    num_target_gpus: int = 1,
    num_draft_gpus: int = 0,
    extras: Mapping | None = None,
) -> dict[str, int | float | None]:
    """Summary metrics of one run (see module docstring); raises ValueError on missing columns or bad args.

    `extras` is the engine's SimResult.extras: when given, `kv_peak_blocks` is the KV pool's true peak
    (including growth within a step) instead of the largest after-step value in the steps table, and
    `kv_capacity_blocks`, `kv_peak_fraction` and `psd_fallback_steps` are filled (None otherwise).
    A cluster's tables carry a `replica` column and its extras `replicas` (N): steps are counted per replica,
    device busy fractions are the mean over the N replicas, and the KV figures are the replicas' sums.
    """
    _require_columns(requests_df, _REQUEST_NEEDS, "requests", REQUEST_COLUMNS)
    _require_columns(steps_df, _STEP_NEEDS, "steps", STEP_COLUMNS)
    for name, val, least in (("num_target_gpus", num_target_gpus, 1), ("num_draft_gpus", num_draft_gpus, 0)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {val!r}")
    slo_b = validate_slo(slo)
    num_gpus = int(num_target_gpus + num_draft_gpus)

    req = requests_df
    totals = RunTotals.of(req)
    fin, n_req, n_done, out_tokens = totals.finished, totals.requests, totals.done, totals.output_tokens
    t0, t1, per_s = totals.t0, totals.t1, totals.per_s

    s: dict[str, int | float | None] = {
        "num_requests": n_req,
        "num_finished": n_done,
        "makespan_s": round_sig(totals.span),
        "output_tokens": out_tokens,
        "throughput_tok_s": per_s(out_tokens),
        "requests_per_s": per_s(n_done),
        "num_gpus": num_gpus,
        "throughput_tok_s_per_gpu": per_s(out_tokens / num_gpus),
    }
    s.update(percentile_summary(fin["ttft"].to_numpy(), "ttft"))
    s.update(percentile_summary(fin["tpot"].to_numpy(), "tpot"))
    s.update(percentile_summary(np.asarray(itl, dtype=float), "itl"))
    s.update(percentile_summary(fin["e2e"].to_numpy(), "e2e"))
    s.update(percentile_summary(fin["queue_delay"].to_numpy(), "queue_delay"))

    good = int(goodput_mask(req, slo_b).sum())
    s["slo_ttft_s"] = slo_b["ttft_s"]
    s["slo_tpot_s"] = slo_b["tpot_s"]
    s["slo_e2e_s"] = slo_b["e2e_s"]
    s["goodput_req_s"] = per_s(good)
    s["goodput_fraction"] = round_sig(good / n_req) if n_req else None

    s["mean_acceptance_length"], s["pooled_acceptance_length"] = acceptance_lengths(fin)
    proposed = int(req["proposed_tokens"].sum())
    accepted = int(req["accepted_tokens"].sum())
    s["proposed_tokens"] = proposed
    s["accepted_tokens"] = accepted
    s["acceptance_rate"] = round_sig(accepted / proposed) if proposed else None

    extras = extras or {}
    s.update(_device_busy(steps_df, t0, t1, num_draft_gpus, int(extras.get("replicas", 1))))
    s.update(_target_phase_shares(steps_df))

    # Mean seconds of one drafting phase (any device) and of one target verify/decode forward: the t and V of
    # the PSD pipeline bounds (oracle/bounds.py), None when the run has no such slice.
    draft_s = mean_slice_seconds(steps_df, ["draft"])
    verify_s = mean_slice_seconds(steps_df, ["verify", "mixed"], device="target")
    s["draft_phase_mean_s"] = round_sig(draft_s) if math.isfinite(draft_s) else None
    s["verify_step_mean_s"] = round_sig(verify_s) if math.isfinite(verify_s) else None

    # saturated closed loops (the PSD bound studies): warm-up and drain finishes deleted (steady_state.py)
    saturated = saturated_window(req, steps_df, int(SATURATED_TRIM_FRACTION * n_done))
    s["saturated_throughput_tok_s"] = None if saturated is None else round_sig(saturated[0])
    s["saturated_e2e_mean_s"] = None if saturated is None else round_sig(saturated[1])

    tgt = steps_df[steps_df["device"] == "target"]
    after_step_peak = int(tgt["kv_blocks_used"].max()) if len(tgt) else 0
    s["kv_peak_blocks"] = int(extras.get("kv_peak_blocks", after_step_peak))
    total_blocks = extras.get("kv_total_blocks")
    s["kv_capacity_blocks"] = None if total_blocks is None else int(total_blocks)
    s["kv_peak_fraction"] = round_sig(s["kv_peak_blocks"] / total_blocks) if total_blocks else None
    s["preemptions"] = int(req["preemptions"].sum())
    s["preempted_requests"] = int((req["preemptions"] > 0).sum())
    step_keys = ["replica", "step"] if "replica" in steps_df.columns else ["step"]
    s["num_steps"] = int(len(steps_df[step_keys].drop_duplicates()))
    fallback = extras.get("psd_fallback_steps")
    s["psd_fallback_steps"] = None if fallback is None else int(fallback)
    # Sequences per decode/verify forward (prefill-only and draft slices excluded), weighted by duration.
    work = tgt[tgt["phase"].isin(["decode", "verify", "mixed"])]
    dur = (work["end"] - work["start"]).to_numpy(dtype=float)
    s["mean_batch_size"] = (
        round_sig((work["num_seqs"].to_numpy(dtype=float) * dur).sum() / dur.sum()) if dur.sum() > 0 else None
    )
    s.update(steady_state_summary(req, slo_b, num_gpus))
    return s


STEADY_KEYS = ("steady_window_start_s", "steady_window_end_s", "steady_requests", "steady_arrival_rate_req_s", "steady_requests_per_s",
               "steady_throughput_tok_s", "steady_throughput_tok_s_per_gpu", "steady_goodput_req_s",
               "steady_slo_attainment", "steady_ttft_p99_s",
               "steady_tpot_p99_s", "steady_e2e_p99_s", "backlog_growth", "overloaded")


def steady_state_summary(requests_df: "pd.DataFrame | Mapping[str, np.ndarray]", slo: Mapping[str, float | None],
                         num_gpus: int = 1) -> dict[str, int | float | bool | None]:
    """The steady-state figures of a run (simulator/measure/steady_state.py's window rule and overload flag); every
    key None when the run has no steady-state window (e.g. an offline batch: every request at t = 0).
    `requests_df`: the requests table, or its columns as arrays (goodput_mask's columns and output_len).

    The whole-run figures of `summarize` (throughput_tok_s, goodput_req_s, ...) include warm-up and drain."""
    from simulator.measure.steady_state import measure

    good = goodput_mask(requests_df, validate_slo(slo))
    ss = measure(np.asarray(requests_df["arrival_time"], dtype=float),
                 np.asarray(requests_df["finish_time"], dtype=float), np.asarray(requests_df["output_len"]), good)
    return steady_figures(requests_df, good, ss, num_gpus)


def steady_figures(requests_df: "pd.DataFrame | Mapping[str, np.ndarray]", good: np.ndarray, ss: "SteadyState | None",
                   num_gpus: int = 1) -> dict[str, int | float | bool | None]:
    """`steady_state_summary` from its goodput mask and measured window (`steady_state.measure`), for a caller that
    has them already."""
    if ss is None:
        return dict.fromkeys(STEADY_KEYS)
    fin = ss.in_window & np.isfinite(np.asarray(requests_df["finish_time"], dtype=float))

    def p99(col: str) -> float | None:
        v = np.asarray(requests_df[col], dtype=float)[fin]
        v = v[np.isfinite(v)]
        return round_sig(np.percentile(v, 99)) if v.size else None

    per_s = 1.0 / ss.length_s
    return {
        "steady_window_start_s": round_sig(ss.start_s),
        "steady_window_end_s": round_sig(ss.end_s),
        "steady_requests": ss.arrivals,
        "steady_arrival_rate_req_s": round_sig(ss.arrival_rate),
        "steady_requests_per_s": round_sig(ss.departure_rate),
        "steady_throughput_tok_s": round_sig(ss.output_tokens * per_s),
        "steady_throughput_tok_s_per_gpu": round_sig(ss.output_tokens * per_s / num_gpus),
        "steady_goodput_req_s": round_sig(ss.good_departures * per_s),
        # the share of the window's arrivals that finished within the SLO (the table's goodput fraction); the
        # good departure rate over the arrival rate is no share: above 1 while the window drains warm-up's queue
        "steady_slo_attainment": round_sig(float(good[ss.in_window].mean())),
        "steady_ttft_p99_s": p99("ttft"),
        "steady_tpot_p99_s": p99("tpot"),
        "steady_e2e_p99_s": p99("e2e"),
        "backlog_growth": round_sig(ss.backlog_growth),
        "overloaded": bool(ss.overloaded),
    }


def decode_tokens_and_steps(requests_df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per request: output tokens emitted by verify/decode steps, and the number of such steps.

    Every completed prefill emits one token: the first one, and one more after each preemption's
    recompute (the engine's rule), so decode tokens = output_len - 1 - preemptions (>= 0). A request
    preempted in the middle of a chunked prefill is the one case this undercounts by one per such preemption.
    """
    steps = requests_df["decode_steps"].to_numpy(dtype=float)
    tokens = requests_df["output_len"].to_numpy(dtype=float) - 1.0 - requests_df["preemptions"].to_numpy(dtype=float)
    return steps, np.maximum(tokens, 0.0)


def per_request_acceptance_length(requests_df: pd.DataFrame) -> np.ndarray:
    """Tokens emitted per verify/decode step for each finished request with at least one such step."""
    fin = requests_df[np.isfinite(requests_df["finish_time"].to_numpy(dtype=float))]
    steps, tokens = decode_tokens_and_steps(fin)
    keep = steps > 0
    return tokens[keep] / steps[keep]


def mean_slice_seconds(steps_df: pd.DataFrame, phases: Sequence[str], device: str | None = None) -> float:
    """Mean duration of the step slices in `phases` (on `device` when given); NaN when there are none."""
    sel = steps_df["phase"].isin(list(phases))
    if device is not None:
        sel &= steps_df["device"] == device
    rows = steps_df[sel]
    return float((rows["end"] - rows["start"]).mean()) if len(rows) else math.nan
