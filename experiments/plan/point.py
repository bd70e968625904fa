"""One simulation of the plan: a candidate at one rate and seed (search, curve and crossover runs, with the early
stop) or its saturated service probe, and the record it returns (steady-state window, attainment batches)."""
from __future__ import annotations

import contextlib
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from experiments.plan.search import BATCHES, BELOW_SERVICE, MAX_UTILIZATION
from experiments.sweep.experiment import json_ready
from experiments.sweep.runner import Point
from simulator.measure.metrics import round_sig
from simulator.measure.steady_state import SATURATED_TRIM_FRACTION
from experiments.plan.point_config import point_experiment
from experiments.plan.candidates import Candidate, concurrent_sequences
from experiments.plan.traffic import TrafficModel


EVALUATOR = "plan-point/3"  # bump when what a point returns changes (invalidates caches)


POINT_METRICS = ("steady_throughput_tok_s", "steady_requests_per_s", "steady_ttft_p99_s", "steady_tpot_p99_s",
                 "steady_e2e_p99_s", "steady_slo_attainment", "overloaded", "mean_acceptance_length",
                 "throughput_tok_s")  # throughput_tok_s: whole run (warm-up and drain included), for reference


def evaluate_plan_point(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: simulate one candidate at one rate and seed; its steady-state window counts, SLO
    attainment batch means and figures (simulator/measure/steady_state.py, the one window rule). With `stop` in the payload
    the run ends once its verdict is decided (experiments/plan/early_stop.py) and says so under `stopped`; a
    `probe` payload is the saturated service-rate run (SERVICE_PROBE_RULE)."""
    from traces.workload import load_arrival_times

    doc = payload["config"]
    replay = payload.get("replay")
    with tempfile.TemporaryDirectory(prefix="draftsim-plan-") if replay else contextlib.nullcontext() as tmp:
        if replay:  # the scaled arrival times as a file the config's replay arrivals read
            times = load_arrival_times(replay["file"])[: replay["num_requests"]] * replay["scale"]
            path = Path(tmp) / "arrivals.txt"
            path.write_text("".join(f"{t!r}\n" for t in times.tolist()), encoding="utf-8")
            doc = {**doc, "workload": {**doc["workload"], "arrival": {"kind": "replay", "file": str(path)}}}
        if payload.get("probe"):
            return _probe_point(doc, payload["probe"])
        if payload.get("stop"):
            return _stopping_point(doc, payload["slo"], payload["stop"])
        from experiments.run import run_experiment

        res = run_experiment(point_experiment(doc))
    (summary,) = res.summary.values()
    if not summary.get("fits", True):
        return {"fits": False, "reason": str(summary.get("does_not_fit"))}
    return _point_figures(res.requests, payload["slo"], summary)


def _point_figures(req, slo: dict[str, Any], summary: dict[str, Any], stopped: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """A point's record from its requests table: window counts, attainment batch means and figures; a stopped run
    (`stopped`) keeps only the figures its stop rule leaves exact (experiments/plan/early_stop.py)."""
    from simulator.measure.metrics import goodput_mask, steady_figures, validate_slo
    from simulator.measure.steady_state import batch_means, measure

    cols = {c: np.asarray(req[c]) for c in ("arrival_time", "finish_time", "output_len", "ttft", "tpot", "e2e")}
    arrival = cols["arrival_time"].astype(float)
    ok = goodput_mask(cols, validate_slo(slo))
    ss = measure(arrival, cols["finish_time"].astype(float), cols["output_len"], ok)
    out: dict[str, Any] = {"fits": True}
    if ss is None:
        out.update(window_arrivals=0, window_departures=0, window_length_s=0.0, attainment_batches=[])
    else:
        order = np.argsort(arrival[ss.in_window], kind="stable")
        e2e, tpot = cols["e2e"].astype(float)[ss.in_window], cols["tpot"].astype(float)[ss.in_window]
        out.update(window_arrivals=ss.arrivals, window_departures=ss.departures,
                   window_length_s=round_sig(ss.length_s),
                   attainment_batches=[round_sig(x) for x in batch_means(ok[ss.in_window][order], BATCHES)],
                   e2e_batches=[round_sig(x) for x in batch_means(e2e[order], BATCHES)],
                   steady_e2e_mean_s=round_sig(float(np.nanmean(e2e))),
                   steady_tpot_mean_s=round_sig(float(np.nanmean(tpot))))
    out.update({m: summary.get(m) for m in POINT_METRICS})
    out.update({k: v for k, v in steady_figures(cols, ok, ss).items() if k in POINT_METRICS})
    if stopped is None:
        return json_ready(out)
    out["stopped"] = {k: (round_sig(v) if isinstance(v, float) else v) for k, v in stopped.items()}
    rule = stopped["rule"]
    if rule != "window complete":  # the window's latencies and attainment are not all known
        for k in ("steady_e2e_mean_s", "steady_tpot_mean_s", "steady_ttft_p99_s", "steady_tpot_p99_s",
                  "steady_e2e_p99_s", "steady_slo_attainment"):
            out[k] = None
        out["attainment_batches"], out["e2e_batches"] = [], []
    if rule == "strict fail":  # departures not final; the batches of the most favourable completion
        out.update(window_final=False, overloaded=None, steady_throughput_tok_s=None, steady_requests_per_s=None,
                   attainment_batches=stopped["attainment_batches"])
        out["stopped"].pop("attainment_batches")
        out["stopped"]["attainment_batches_are"] = "the most favourable completion of the window (an upper bound)"
    return json_ready(out)


def _prepared(doc: dict[str, Any]):
    """(scenario, inputs) of a one-run point config, as experiments.run.run_experiment prepares them."""
    from experiments.run import experiment_inputs, prepare
    from simulator.scenario import check_inputs

    cfg = point_experiment(doc)
    (sc,) = prepare(cfg)
    if not sc.fits:
        return cfg, sc, None
    inputs = experiment_inputs(cfg, need_acceptance=sc.mode != "ar")
    check_inputs(sc, inputs)
    return cfg, sc, inputs


def _whole_run(sim) -> tuple[Any, dict[str, Any]]:
    """A run that completed without its stop deciding: its requests table and the whole-run figures a point
    reports besides the window's (simulator.measure.metrics, as the run's summary computes them)."""
    from simulator.measure.metrics import RunTotals, acceptance_lengths

    req = sim.requests_table()
    totals = RunTotals.of(req)
    mean_length, _ = acceptance_lengths(totals.finished)
    return req, {"throughput_tok_s": totals.per_s(totals.output_tokens), "mean_acceptance_length": mean_length}


def _stopping_point(doc: dict[str, Any], slo: dict[str, Any], stop: dict[str, Any]) -> dict[str, Any]:
    """A search or curve run that ends once its verdict is decided (experiments/plan/early_stop.py)."""
    from experiments.plan.early_stop import PlanStop
    from simulator.measure.early_stop import StopMonitor, progress_columns, run_until_decided
    from simulator.scenario import simulation

    cfg, sc, inputs = _prepared(doc)
    if inputs is None:
        return {"fits": False, "reason": str(sc.info.get("does_not_fit"))}
    rule = PlanStop(inputs.workload.arrival, slo, float(stop["target"]), stop["level"], float(stop["rate"]))
    monitor = StopMonitor(None, None, len(inputs.workload), rule, rule.every(), rule.check_from())
    sim = simulation(sc, inputs, on_step=monitor)  # the monitor itself: a compiled run asks it at its checks too
    progress = run_until_decided(sim, monitor.bind(sim))
    if progress is None:
        req, whole = _whole_run(sim)
        return _point_figures(req, slo, whole)
    stopped = {**rule.decision, "requests_finished": progress.finished, "of": len(inputs.workload)}
    return _point_figures(progress_columns(progress), slo, {}, stopped)


PROBE_CLIENTS = 1.25  # x the concurrent sequences: a queue always waits (as under overload)


PROBE_REQUESTS_PER_CLIENT = 5


SERVICE_PROBE_RULE = (f"service rate from one saturated run per candidate (first seed, reused by every seed and rate): "
                      f"a closed loop of {PROBE_CLIENTS:g} x the sequences the candidate runs at once (so a queue "
                      f"always waits), at least {PROBE_REQUESTS_PER_CLIENT} requests per client; output tokens per "
                      "second inside the saturated window (simulator/measure/steady_state.py saturated_window: the first and "
                      f"last max({SATURATED_TRIM_FRACTION:.0%}, concurrent sequences) finishes dropped) over the workload's "
                      "mean output length (whatever the size of the search runs: one overloaded small search "
                      "run measures it more noisily); no rate above "
                      f"{MAX_UTILIZATION:g} x it is tested or passes, and the search starts at most at "
                      f"{BELOW_SERVICE:g} x it")


def _probe_point(doc: dict[str, Any], probe: dict[str, Any]) -> dict[str, Any]:
    """The saturated probe run of SERVICE_PROBE_RULE: output tokens/s in its saturated window."""
    from simulator.scenario import simulate
    from simulator.measure.steady_state import saturated_window

    cfg, sc, inputs = _prepared(doc)
    if inputs is None:
        return {"fits": False, "reason": str(sc.info.get("does_not_fit"))}
    res = simulate(sc, inputs)
    got = saturated_window(res.requests, res.steps, int(probe["trim"]))
    if got is None:
        return {"fits": True, "tok_s": None}
    return json_ready({"fits": True, "tok_s": round_sig(got[0]), "e2e_mean_s": round_sig(got[1]),
                       "requests": int(len(res.requests)), "trim": int(probe["trim"])})


def search_point(c: Candidate, workload: dict[str, Any], seed: int, slo: dict[str, Any],
                 replay: dict[str, Any] | None, stop: dict[str, Any] | None = None) -> Point:
    """One simulation; `stop` (experiments/plan/early_stop.py: level, target, rate) lets it end once decided."""
    payload = {"evaluator": EVALUATOR, "config": {**c.config, "workload": workload, "seed": seed},
               "slo": slo, "replay": replay}
    if stop is not None:  # a key only when given: points without it hash as before
        payload["stop"] = stop
    return Point(payload)


def probe_point(c: Candidate, traffic: "TrafficModel", seed: int, slo: dict[str, Any]) -> Point:
    """The saturated probe of SERVICE_PROBE_RULE: a closed loop of PROBE_CLIENTS x the candidate's concurrent
    sequences, at least PROBE_REQUESTS_PER_CLIENT requests per client (and the curve runs' size)."""
    seqs = concurrent_sequences(c)
    clients = math.ceil(PROBE_CLIENTS * seqs)
    n = max(c.curve_requests, PROBE_REQUESTS_PER_CLIENT * clients)
    trim = max(math.ceil(SATURATED_TRIM_FRACTION * n), seqs)  # the drain: the last seqs finishes
    workload = traffic.workload({"kind": "closed_loop", "clients": clients, "think_time": 0.0}, n)
    return Point({"evaluator": EVALUATOR, "config": {**c.config, "workload": workload, "seed": seed},
                  "slo": slo, "replay": None, "probe": {"trim": trim, "clients": clients}})
