"""`draftsim validate` analysis: join vLLM's client results with its step records, fit profiles, simulate the
same arrivals through simulator/scenario.py two ways and tabulate measured vs predicted.

- replay: target and drafter profiles fitted on the load run's own engine steps (all levels of the mode)
  and acceptance from the run's own vLLM-measured bundle: tests draftsim's scheduler and step timing.
- predictive: profiles and acceptance from the calibration groups (disjoint prompts, same engine): how a
  capacity planner is used. Each load request replays the acceptance of a calibration request drawn with
  the run's seed, repeated to the load request's output length.
Both simulate the server with `scheduler: vllm-v1`, vLLM's max_num_seqs, token budget, block size and KV
blocks (from the step-record header and steps), the clients' send times, prompt and output lengths.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibration.vllm_steps.acceptance import ClientRequest, build_bundle, join_ids
from calibration.vllm_steps.backend import PLAN_FILE, RUN_FILE, STEPS_FILE
from calibration.vllm_steps.calibrate import WARMUP, Mode, _provenance
from calibration.vllm_steps.fit import busy_gaps, engine_groups, fit_drafter, fit_target, phase, step_overhead, \
    target_measurements
from calibration.vllm_steps.records import StepLog, load_steps
from simulator.costs.draft_cost import DraftCost
from simulator.costs.latency import LatencyProfile
from simulator.costs.step_model import phase_bias, phase_mape
from simulator.measure.metrics import percentile_summary
from traces.bundle import DrafterTrace, RequestTrace
from calibration.vllm_steps.record_files import read_json_record, read_run_result, require_engine_settings
from traces.errors import TraceFormatError

KINDS = ("replay", "predictive")


@dataclass
class ClientRow:
    """One request as the client saw it (wall-clock seconds)."""

    id: str
    send_time: float
    first_token_time: float
    finish_time: float
    prompt_len: int
    output_len: int
    chunks: int  # streamed outputs (one per engine step that emitted tokens for it)


@dataclass
class Latencies:
    """Per-request latencies of one level, measured or simulated; the one place metrics are computed from."""

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    output_len: np.ndarray
    start: float  # first send / arrival
    end: float  # last finish
    itl: np.ndarray | None = None  # gaps between streamed chunks, pooled over requests (None: not recorded)

    def metrics(self, p99: bool = False) -> dict[str, float | None]:
        """Mean/p50/p90 (and p99 when asked: a few dozen requests cannot resolve it) of TTFT, TPOT, ITL when
        recorded, E2E, and output tokens per second from the first send to the last finish."""
        out: dict[str, float | None] = {}
        for name in ("ttft", "tpot", "itl", "e2e"):
            if getattr(self, name) is None:
                continue
            s = percentile_summary(getattr(self, name), name)
            out.update({k: v for k, v in s.items() if p99 or "_p99_" not in k})
        span = self.end - self.start
        out["throughput_tok_s"] = float(self.output_len.sum() / span) if span > 0 else None
        return out


def latencies(send: np.ndarray, first: np.ndarray, finish: np.ndarray, output_len: np.ndarray,
              itl: np.ndarray | None = None) -> Latencies:
    """TTFT = first token - send, E2E = finish - send, TPOT = (finish - first) / (output_len - 1) (NaN at 1)."""
    out = np.asarray(output_len, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    return Latencies(first - send, tpot, finish - send, np.asarray(output_len), float(send.min()), float(finish.max()),
                     itl)


def client_rows(level: dict[str, Any], where: str) -> list[ClientRow]:
    """The client rows of one load level; a request without streamed tokens is an error, not dropped."""
    rows = []
    for q in level["requests"]:
        if not q["chunk_times"] or len(q["output_token_ids"]) < 1:
            raise TraceFormatError(where, f"request {q['id']!r} got no output tokens", field="requests")
        rows.append(ClientRow(q["id"], q["send_time"], q["chunk_times"][0], q["chunk_times"][-1],
                              len(q["prompt_token_ids"]), len(q["output_token_ids"]), len(q["chunk_times"])))
    return rows


def measured_latencies(rows: list[ClientRow]) -> Latencies:
    return latencies(np.array([r.send_time for r in rows]), np.array([r.first_token_time for r in rows]),
                     np.array([r.finish_time for r in rows]), np.array([r.output_len for r in rows]))


def _clients(requests: list[dict[str, Any]]) -> list[ClientRequest]:
    return [ClientRequest(str(q["id"]), q["prompt_token_ids"], q["output_token_ids"], q.get("spec_decode_metrics"))
            for q in requests]


def sub_log(log: StepLog, engine_ids: set[str]) -> StepLog:
    """The steps that scheduled any of `engine_ids` (calibration and load phases are separated by idle time)."""
    return StepLog(log.header, [s for s in log.steps if any(r.id in engine_ids for r in s.requests)])


@dataclass
class ModeData:
    """One mode's vLLM run, split into calibration and load levels, joined to the engine's requests."""

    mode: Mode
    folder: Path
    log: StepLog
    result: dict[str, Any]
    calibration: list[ClientRequest]
    cal_log: StepLog
    levels: list[dict[str, Any]]
    level_logs: list[StepLog]
    load_log: StepLog  # all levels
    categories: dict[str, str] = field(default_factory=dict)  # request id -> workload (from the plan)

    @property
    def kv_capacity_tokens(self) -> int:
        totals = {s.kv_blocks_total for s in self.log.steps if s.kv_blocks_total}
        if len(totals) != 1:
            raise TraceFormatError(str(self.folder / STEPS_FILE), f"expected one KV pool size, got {sorted(totals)}",
                                   field="kv_blocks_total")
        return totals.pop() * int(self.log.header["block_size"])


def load_mode(folder: Path, mode: Mode) -> ModeData:
    """Read a mode's result.json and step records and join every client request to one engine request."""
    where = str(folder / STEPS_FILE)
    log = load_steps(folder / STEPS_FILE)
    require_engine_settings(log.header, where)
    result = read_run_result(folder / RUN_FILE)
    if result.get("calibration") is None or result.get("levels") is None:
        raise TraceFormatError(str(folder / RUN_FILE), "expected the load generator's `calibration` and `levels` "
                               "(a `draftsim validate` run)", field="levels")
    cal = _clients([q for g in result["calibration"] if g["name"] != WARMUP for q in g["requests"]])
    per_level = [_clients(lv["requests"]) for lv in result["levels"]]
    engine_ids = sorted({r.id for s in log.steps for r in s.requests})
    ids = join_ids([c.id for c in cal] + [c.id for lv in per_level for c in lv], engine_ids, where)
    level_logs = [sub_log(log, {ids[c.id] for c in lv}) for lv in per_level]
    load_ids = {ids[c.id] for lv in per_level for c in lv}
    return ModeData(mode, folder, log, result, cal, sub_log(log, {ids[c.id] for c in cal}), result["levels"],
                    level_logs, sub_log(log, load_ids), plan_categories(folder / PLAN_FILE, result))


def plan_categories(plan_path: Path, result: dict[str, Any]) -> dict[str, str]:
    """Request id -> workload category, from the plan's per-prompt categories (empty when the plan has none)."""
    if not plan_path.is_file():
        return {}
    plan = read_json_record(plan_path, "run plan")
    out = {}
    for g, rg in zip(plan["calibration"], result["calibration"]):
        out.update({q["id"]: c for q, c in zip(rg["requests"], g.get("categories", []))})
    for cats, lv in zip(plan["load"].get("categories", []), result["levels"]):
        out.update({q["id"]: c for q, c in zip(lv["requests"], cats)})
    return out


@dataclass
class Profiles:
    """The target's step profile, the mode's drafter cost (None for AR) and the engine's time between steps."""

    target: LatencyProfile
    drafter: DraftCost | None
    step_overhead_s: float
    report: dict[str, Any] = field(default_factory=dict)


def fit_mode_profiles(data: ModeData, log: StepLog, name: str, model_name: str,
                      step_model: str = "structured", group_of: dict[str, str] | None = None) -> Profiles:
    """Target profile (engine step minus drafting, `fit_target`; with `group_of`, each kept step records its
    client group), the drafter's propose cost per step (SD) and the mean gap between busy steps."""
    mode = data.mode
    ms = target_measurements(log, mode.label, group_of=group_of)
    loads = [m.load for m in ms if m.load is not None]
    target, target_report = fit_target(ms, name, model_name,
                                       _provenance(log.header, loads, "target step", data.result), step_model)
    overhead, n_gaps = step_overhead(log)
    report = {"target": target_report, "step_overhead_s": overhead, "busy_gaps": n_gaps}
    drafter = None
    if mode.method is not None:
        prof, report["drafter"] = fit_drafter(log, mode.label, f"{name}-{mode.label}", model_name,
                                              _provenance(log.header, loads, "drafter propose call", data.result),
                                              str(data.folder / STEPS_FILE))
        drafter = DraftCost("engine_step", prof)  # fitted per engine step, as vLLM's proposer runs
    return Profiles(target, drafter, overhead, report)


def replay_traces(data: ModeData, level: int, model_name: str) -> list[RequestTrace]:
    """The level's requests with the acceptance vLLM measured on them (AR: lengths only)."""
    reqs = data.levels[level]["requests"]
    if data.mode.method is None:
        return [RequestTrace(q["id"], len(q["prompt_token_ids"]), len(q["output_token_ids"]), {}) for q in reqs]
    bundle, _ = _bundle(data, data.level_logs[level], _clients(reqs), model_name)
    return bundle.requests


def _bundle(data: ModeData, log: StepLog, clients: list[ClientRequest], model_name: str):
    m = data.mode
    return build_bundle(log, clients, drafter=m.label, kind=m.method, cost_model=m.label, params={"k": m.k},
                        target=model_name, dataset="validate", source={"backend": "vllm"},
                        where=str(data.folder / STEPS_FILE))


def predictive_traces(data: ModeData, level: int, model_name: str, rng: np.random.Generator) -> list[RequestTrace]:
    """The level's lengths with acceptance borrowed from calibration requests of the same workload (chat,
    code, code-edit; any calibration request when none shares it), drawn with `rng` and repeated to each
    request's output length: what a planner knows before serving these prompts."""
    reqs = data.levels[level]["requests"]
    if data.mode.method is None:
        return replay_traces(data, level, model_name)
    cal = _bundle(data, data.cal_log, data.calibration, model_name)[0].requests
    out = []
    for q in reqs:
        cat = data.categories.get(q["id"], "")
        pool = [t for t in cal if data.categories.get(t.id, "") == cat] or cal
        src = pool[int(rng.integers(0, len(pool)))].drafters[data.mode.label]
        n = len(q["output_token_ids"])
        tr = DrafterTrace(acc_len=np.resize(src.acc_len, n).astype(np.int32),
                          proposal_len=None if src.proposal_len is None else np.resize(src.proposal_len, n).astype(np.int32))
        out.append(RequestTrace(q["id"], len(q["prompt_token_ids"]), n, {data.mode.label: tr}, category=cat or None))
    return out


def simulate_level(data: ModeData, level: int, traces: list[RequestTrace], profiles: Profiles, seed: int | np.random.SeedSequence):
    """draftsim's run of the level's arrivals (client send times), prompts and output lengths."""
    from simulator.scenario import inputs_from_traces, make_scenario, simulate
    from simulator.server_config import RunSpec, ServerConfig

    mode, header = data.mode, data.log.header
    reqs = data.levels[level]["requests"]
    send = np.array([q["send_time"] for q in reqs])
    sd = mode.method is not None
    inputs = inputs_from_traces(traces, (mode.label,) if sd else (), arrival=send - send.min(),
                                request_ids=[q["id"] for q in reqs], categories=[""] * len(reqs),
                                with_acceptance=sd)
    server = ServerConfig(target_profile=profiles.target, scheduler="vllm-v1",
                          max_num_seqs=int(header["max_num_seqs"]),
                          max_num_batched_tokens=int(header["max_num_batched_tokens"]),
                          block_size=int(header["block_size"]), kv_capacity_tokens=data.kv_capacity_tokens,
                          step_overhead_s=profiles.step_overhead_s)
    run = RunSpec(name=mode.label, mode="sd" if sd else "ar",
                  policy={"name": "fixed", "drafter": mode.label, "k": mode.k} if sd else None)
    costs = {mode.label: profiles.drafter} if sd else {}
    return simulate(make_scenario(run, server, costs, seed), inputs)


def simulated_latencies(res) -> Latencies:
    r = res.requests
    arrival = r.arrival_time.to_numpy(float)
    return latencies(arrival, arrival + r.ttft.to_numpy(float), r.finish_time.to_numpy(float),
                     r.output_len.to_numpy(), np.asarray(res.itl, dtype=float))


@dataclass
class LevelResult:
    """One mode x load level: what vLLM's clients measured and what each kind of simulation predicted."""

    mode: str
    fraction: float
    rate: float  # requests/s the client aimed for
    load: tuple[float, float] | None  # 1-minute load average before and after the level (None: not recorded)
    measured: Latencies
    predicted: dict[str, Latencies]


@dataclass
class ValidationReport:
    rows: list[dict[str, Any]]
    levels: list[LevelResult]
    info: dict[str, Any]


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured in percent; None when either is missing or measured is 0."""
    if predicted is None or measured is None or measured == 0:
        return None
    return round(100.0 * (predicted - measured) / measured, 2)


def level_rows(lv: LevelResult, p99: bool = False,
               repeats: dict[str, list[Latencies]] | None = None) -> list[dict[str, Any]]:
    """validation.json rows: one per kind and metric; with `repeats` (a kind's predictions under other seeds)
    each row adds `interval`, the range over the point prediction and its repeats, and `inside`."""
    meas = lv.measured.metrics(p99)
    rows = []
    for kind, lat in lv.predicted.items():
        pred = lat.metrics(p99)
        others = [r.metrics(p99) for r in (repeats or {}).get(kind, [])]
        for metric, m in meas.items():
            row = {"mode": lv.mode, "rate": round(lv.rate, 4), "fraction": lv.fraction, "metric": metric,
                   "measured": m, "predicted": pred.get(metric), "error_pct": error_pct(pred.get(metric), m),
                   "kind": kind, "load_1min": None if lv.load is None else [round(x, 2) for x in lv.load]}
            if others:
                vals = [v for v in [pred.get(metric)] + [o.get(metric) for o in others] if v is not None]
                lo, hi = (min(vals), max(vals)) if vals else (None, None)
                row["interval"] = [lo, hi]
                row["inside"] = None if lo is None or m is None else bool(lo <= m <= hi)
                row["repeats"] = len(vals)
            rows.append(row)
    return rows


def interval_coverage(rows: list[dict[str, Any]], kind: str = "predictive") -> dict[str, dict[str, Any]]:
    """Per mode: how many of `kind`'s rows with an interval hold the measured value, in all, per metric and per
    load level ({"inside", "rows"} each)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["kind"] != kind or r.get("inside") is None:
            continue
        m = out.setdefault(r["mode"], {"inside": 0, "rows": 0, "by_metric": {}, "by_level": {}})
        for part in (m, m["by_metric"].setdefault(r["metric"], {"inside": 0, "rows": 0}),
                     m["by_level"].setdefault(r["fraction"], {"inside": 0, "rows": 0})):
            part["inside"] += bool(r["inside"])
            part["rows"] += 1
    return out


HEADLINE_METRICS = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "throughput_tok_s")


def headline_errors(pred: Latencies, meas: Latencies, fraction: float) -> dict[str, Any]:
    """% error of each headline metric (means and throughput) of one level."""
    p, m = pred.metrics(), meas.metrics()
    return {"fraction": fraction, **{k: error_pct(p.get(k), m.get(k)) for k in HEADLINE_METRICS}}


def same_shape_ratio(cal: StepLog, level: StepLog, min_steps: int = 5) -> tuple[float | None, int]:
    """Median target time (step minus drafting) of the level's decode/verify steps over the calibration's median
    for the same phase and batch size, step-weighted over the shapes both have `min_steps` of, minus one, in
    percent; and the steps compared. Model-free: how much faster (<0) or slower the engine ran the same shapes
    than during calibration (the machine's speed drifting between them, which no calibration can foresee)."""
    def groups(log: StepLog) -> dict[tuple[str, int], list[float]]:
        out: dict[tuple[str, int], list[float]] = {}
        for st in log.steps:
            ph = phase(st)
            if ph != "prefill":
                out.setdefault((ph, len(st.requests)), []).append(st.duration - (st.draft_seconds or 0.0))
        return out

    a, b = groups(cal), groups(level)
    num = den = 0.0
    n = 0
    for key, times in b.items():
        if len(times) >= min_steps and len(a.get(key, ())) >= min_steps:
            w = len(times)
            num += w * float(np.median(times)) / float(np.median(a[key]))
            den += w
            n += w
    return (round(100.0 * (num / den - 1.0), 2) if den else None), n


def level_drift(profile, cal: StepLog, level: StepLog, label: str, fraction: float) -> dict[str, Any]:
    """One load level: the calibration fit's bias per phase on the level's steps, and the same-shape ratio."""
    ratio, n = same_shape_ratio(cal, level)
    return {"fraction": fraction, "bias_percent": phase_bias(profile, target_measurements(level, label)),
            "same_shape_time_percent": ratio, "same_shape_steps": n}


def calibrated_profiles(folder: str | Path, mode: Mode) -> Profiles:
    """A `draftsim calibrate vllm` folder's target and drafter profiles and step overhead for `mode` (its
    profiles/NAME-<mode>.yaml, NAME-<mode>-drafter.yaml and calibration.json)."""
    from simulator.costs.latency import load_profile

    folder = Path(folder)
    doc = read_json_record(folder / "calibration.json", "calibration summary")
    if mode.label not in doc.get("modes", {}):
        raise TraceFormatError(str(folder / "calibration.json"), f"no mode {mode.label!r} (has "
                               f"{sorted(doc.get('modes', {}))})", field="modes")
    found = [p for p in sorted((folder / "profiles").glob(f"*-{mode.label}.yaml"))]
    if len(found) != 1:
        raise TraceFormatError(str(folder / "profiles"), f"expected one *-{mode.label}.yaml, found {len(found)}")
    rep = doc["modes"][mode.label]
    drafter = None
    if mode.method is not None:
        drafter = DraftCost("engine_step", load_profile(found[0].with_name(found[0].stem + "-drafter.yaml")))
    return Profiles(load_profile(found[0]), drafter, float(rep["step_overhead_s"]),
                    {"from": str(folder), "target": rep["target"], "step_overhead_s": rep["step_overhead_s"]})


def interval_source(bootstrap: bool, drift: bool) -> str:
    """What a predictive interval spans, as `validate` and `compare` print it beside the interval."""
    return "seeds" + (" + refit" if bootstrap else "") + (" + drift" if drift else "")


def calibration_group_of(data: ModeData) -> dict[str, str]:
    """Engine request id -> the calibration group (result.json's `calibration`, warm-up left out) that sent it."""
    return engine_groups(data.cal_log, data.result["calibration"], str(data.folder / RUN_FILE), (WARMUP,))


def mode_drift(data: ModeData, profile):
    """The speed drift between the cells of the mode's own calibration groups (calibration/vllm_steps/drift.py),
    `profile` the predictive target fitted on them (its kept steps record their group)."""
    from calibration.vllm_steps.drift import profile_drift

    where = str(data.folder / RUN_FILE)
    try:
        return profile_drift(profile, where)
    except ValueError as e:
        raise TraceFormatError(where, f"--drift: {e}", field="calibration") from None


def validate_mode(data: ModeData, model_name: str, name: str, seed: int,
                  repeats: int = 1, step_model: str = "structured", profiles_from: str | Path | None = None,
                  bootstrap: bool = False, drift: bool = False
                  ) -> tuple[list[LevelResult], dict[str, Any], list[dict[str, list[Latencies]]]]:
    """Both simulations of every load level of one mode; with repeats > 1 the predictive one again under
    repeats - 1 more seeds (other calibration requests borrowed), for its interval (replay has no random input
    under a fixed policy); with `bootstrap`, repeat j is also priced by the predictive profile refit on a resample
    of its calibration steps and busy gaps (calibration/vllm_steps/bootstrap.py), the same refit at every level;
    with `drift`, repeat j's target prices are also scaled by a speed factor drawn per level from the drift
    between the calibration cells (calibration/vllm_steps/drift.py; repeat 0 stays the point prediction)."""
    from simulator.seeds import child

    if drift and profiles_from is not None:
        raise ValueError("--drift: the speed drift is measured between the run's own calibration groups; it does "
                         "not apply to profiles from --profiles-from")

    profiles = {"replay": fit_mode_profiles(data, data.load_log, f"{name}-load", model_name, step_model),
                "predictive": fit_mode_profiles(data, data.cal_log, f"{name}-calibration", model_name, step_model,
                                                calibration_group_of(data))
                if profiles_from is None else calibrated_profiles(profiles_from, data.mode)}
    load_ms = target_measurements(data.load_log, data.mode.label)
    carry = {"mape_percent": phase_mape(profiles["predictive"].target, load_ms),
             "bias_percent": phase_bias(profiles["predictive"].target, load_ms), "steps": len(load_ms),
             "by_level": [level_drift(profiles["predictive"].target, data.cal_log, log, data.mode.label,
                                      float(lv["fraction"])) for lv, log in zip(data.levels, data.level_logs)]}
    out, again, level_fitted = [], [], []
    root = np.random.SeedSequence(seed)
    refits = [profiles["predictive"]] * repeats
    if bootstrap and repeats > 1:
        from calibration.vllm_steps.bootstrap import bootstrap_profiles

        gaps = busy_gaps(data.cal_log) if profiles_from is None else np.zeros(0)
        boot = child(np.random.SeedSequence([seed, 1]), 0)  # its own stream: the other draws are unchanged
        refits = [profiles["predictive"]] + [bootstrap_profiles(profiles["predictive"], gaps,
                                                                np.random.default_rng(child(boot, j)))
                                             for j in range(1, repeats)]
    speed = mode_drift(data, profiles["predictive"].target) if drift and repeats > 1 else None
    drift_root = np.random.SeedSequence([seed, 3])  # its own stream: the other draws are unchanged
    level_factors = []
    for i, lv in enumerate(data.levels):
        rows = client_rows(lv, str(data.folder / RUN_FILE))
        level = child(root, i)  # per level: the predictive traces' draws and the simulation, one stream each
        rng = np.random.default_rng(child(level, 0))
        traces = {"replay": replay_traces(data, i, model_name),
                  "predictive": predictive_traces(data, i, model_name, rng)}
        predicted = {k: simulated_latencies(simulate_level(data, i, traces[k], profiles[k], child(level, 1)))
                     for k in KINDS}
        extra = []
        priced = refits
        if speed is not None:
            from calibration.vllm_steps.drift import drifted

            factors = speed.draws(repeats - 1, np.random.default_rng(child(drift_root, i)))
            level_factors.append({"fraction": float(lv["fraction"]), "factors": [round(float(f), 4) for f in factors]})
            priced = [refits[0]] + [drifted(refits[j], float(factors[j - 1])) for j in range(1, repeats)]
        for j in range(1, repeats):  # repeat j: its own borrowed traces and simulation stream
            again_node = child(level, 1 + j)
            tr = predictive_traces(data, i, model_name, np.random.default_rng(child(again_node, 0)))
            extra.append(simulated_latencies(simulate_level(data, i, tr, priced[j], child(again_node, 1))))
        again.append({"predictive": extra} if extra else {})
        own = fit_mode_profiles(data, data.level_logs[i], f"{name}-level{i}", model_name, step_model)
        own_lat = simulated_latencies(simulate_level(data, i, traces["replay"], own, child(level, 1)))
        level_fitted.append(headline_errors(own_lat, measured_latencies(rows), float(lv["fraction"])))
        out.append(LevelResult(data.mode.label, float(lv["fraction"]), float(lv["rate"]),
                               (float(lv["load_before"]), float(lv["load_after"])), measured_latencies(rows),
                               predicted))
    info = {"capacity_req_s": data.result["capacity_req_s"], "capacity_by_group": data.result["capacity_by_group"],
            "engine_steps": len(data.log.steps), "kv_capacity_tokens": data.kv_capacity_tokens,
            "block_size": data.log.header.get("block_size"), "vllm_version": data.log.header.get("vllm_version"),
            "dtype": data.result.get("dtype"), "torch_threads": data.log.header.get("torch_threads"),
            "fits": {k: p.report for k, p in profiles.items()}, "calibration_fit_on_load_steps": carry,
            "level_fitted_replay": level_fitted}
    if speed is not None:
        info["speed_drift"] = {**speed.summary(), "draws_by_level": level_factors}
    return out, info, again


def validate_all(cfg, out: str | Path, model_name: str | None = None, repeats: int = 1,
                 profiles_from: str | Path | None = None, bootstrap: bool = False,
                 drift: bool = False) -> ValidationReport:
    """Every configured mode's runs in OUT, compared with both simulations (the predictive one with an interval
    over `repeats` seeds when repeats > 1, also over refits with `bootstrap` and speed factors with `drift`)."""
    out = Path(out)
    model_name = model_name or cfg.target
    levels, again, info = [], [], {"modes": {}}
    for mode in cfg.parsed_modes():
        folder = _mode_folder(out, mode)
        data = load_mode(folder, dataclasses.replace(mode, label=folder.name))
        lv, mi, ag = validate_mode(data, model_name, f"{model_name}-vllm-{cfg.dtype}", cfg.seed, repeats,
                                   getattr(cfg, "step_model", "structured"), profiles_from, bootstrap, drift)
        levels += lv
        again += ag
        info["modes"][data.mode.label] = mi
    rows = [r for lv, ag in zip(levels, again) for r in level_rows(lv, repeats=ag or None)]
    if repeats > 1:
        info["interval_source"] = interval_source(bootstrap, drift)
    return ValidationReport(rows, levels, info)


def _mode_folder(out: Path, mode: Mode) -> Path:
    """OUT/<label>; draft_model:K:layers:N runs are stored under layersN-kK."""
    if mode.method == "draft_model" and mode.draft_model.startswith("layers"):
        return out / f"layers{int(mode.draft_model[len('layers'):].lstrip(':'))}-k{mode.k}"
    return out / mode.label
