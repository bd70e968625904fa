"""`draftsim compare MEASURED CONFIG`: simulate a measured run's own workload (its send times and lengths) with
the config's server, profiles, drafters and acceptance, and report measured vs predicted TTFT, TPOT, ITL, E2E
(mean, p50, p90, p99) and throughput in `draftsim validate`'s table format, with intervals from repeated seeds.

Acceptance: a measured request that names the trace it replayed (a draftsim run's own export) replays that
trace; any other request borrows the acceptance of a config-bundle request drawn with the seed, repeated to
its output length. Each repeat redraws those borrowings and reseeds the policies, so the interval covers both
the acceptance resampling and the policies' randomness; a fixed policy on named traces repeats exactly.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

import numpy as np

DEFAULT_REPEATS = 5
MAX_REPEATS = 1000  # seeds per prediction (each repeat simulates every run once)


def register(sub) -> None:
    a = sub.add_parser("compare", help="simulate a measured run (draftsim import vllm-bench|guidellm) with a "
                       "config and report measured vs predicted, with intervals")
    a.add_argument("measured", help="measured-run folder written by `draftsim import vllm-bench|guidellm`")
    a.add_argument("config", help="experiment YAML (its server, drafters, traces and runs; its workload is "
                                  "replaced by the measured one)")
    a.add_argument("--out", default=None, help="folder for comparison.json, comparison.md and CDF plots")
    a.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, as for `draftsim run`")
    a.add_argument("--runs", default=None, help="comma-separated run names to compare (default: all)")
    a.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help=f"seeds per prediction for the interval (default {DEFAULT_REPEATS}; 1: no interval)")
    a.add_argument("--bootstrap", action="store_true", help="price each repeat after the first with the runs' "
                   "target profile refit on a resample of the steps it was fitted on (profiles that keep their "
                   "measurements: `calibrate vllm`'s): the interval spans the calibration's own uncertainty")
    a.add_argument("--drift", action="store_true", help="also scale each repeat after the first's target step "
                   "prices by a speed factor drawn from the drift between its profile's calibration cells (the "
                   "calibration groups its steps ran in, split by batch size; profiles from `calibrate vllm` or "
                   "--from-server of this version record the groups)")
    a.set_defaults(func=_run)


def measured_latencies(run):
    """The measured run's latencies, in the one Latencies type validate uses."""
    from calibration.vllm_steps.validate_compare import latencies

    a = run.arrays()
    return latencies(a["send"], a["send"] + a["ttft"], a["send"] + a["e2e"], a["output_len"], a["itl"])


def measured_traces(run, bundle, rng: np.random.Generator) -> list:
    """One acceptance trace per measured request: its own (trace_id) or a borrowed one resized to its length."""
    from traces.bundle import DrafterTrace, RequestTrace

    index = {r.id: r for r in bundle.requests}
    out = []
    for q in run.requests:
        src = index.get(q.trace_id) if q.trace_id is not None else None
        if src is not None and src.output_len == q.output_len:
            out.append(dataclasses.replace(src, id=q.id, prompt_len=q.prompt_len, arrival_time=q.send_time))
            continue
        src = bundle.requests[int(rng.integers(len(bundle.requests)))]
        n = q.output_len
        drafters = {d: DrafterTrace(acc_len=np.resize(t.acc_len, n).astype(np.int32),
                                    tv=None if t.tv is None else np.resize(t.tv, n),
                                    proposal_len=None if t.proposal_len is None
                                    else np.resize(t.proposal_len, n).astype(np.int32))
                    for d, t in src.drafters.items()}
        out.append(RequestTrace(q.id, q.prompt_len, n, drafters, category=src.category, arrival_time=q.send_time))
    return out


def simulate_measured(cfg, run, seed: int, names: list[str] | None = None,
                      refit: np.random.SeedSequence | None = None,
                      speed: dict[str, float] | None = None, whole: bool = False) -> dict[str, Any]:
    """Every config run on the measured workload with `seed` (the config's seed reproduces `draftsim run`):
    run name -> Latencies (`whole`: the simulation's result, its requests table included), or the reason it could
    not run. With `refit`, each run's target profile is first refit on a resample of its own measurements
    (calibration/vllm_steps/bootstrap.py), run i from child i of `refit`; with `speed` (run name -> factor), a run's
    target step prices are then scaled by its factor."""
    from calibration.vllm_steps.validate_compare import simulated_latencies
    from experiments.run import prepare, resolve_bundle
    from simulator.scenario import check_inputs, drafter_kinds, inputs_from_traces, simulate
    from simulator.seeds import ExperimentSeeds, child
    from traces.acceptance_levels import check_k

    cfg = cfg.model_copy(update={"seed": seed})
    tree = ExperimentSeeds.of(cfg.seed)  # the pool from its own child, as `draftsim run` draws it
    bundle = resolve_bundle(cfg.traces, tree.pool)
    traces = measured_traces(run, bundle, np.random.default_rng(tree.workload))
    scenarios = prepare(cfg)
    inputs = inputs_from_traces(traces, bundle.drafter_names,
                                arrival=np.array([q.send_time for q in run.requests], dtype=np.float64),
                                request_ids=[q.id for q in run.requests],
                                with_acceptance=any(sc.mode != "ar" for sc in scenarios), kinds=drafter_kinds(bundle))
    out: dict[str, Any] = {}
    specs = {r.name: r for r in cfg.runs}
    for i, sc in enumerate(scenarios):
        if names and sc.name not in names:
            continue
        if refit is not None:
            sc = _refit_scenario(sc, np.random.default_rng(child(refit, i)))
        if speed is not None and sc.name in speed:
            from calibration.vllm_steps.drift import scaled_profile

            sc = dataclasses.replace(sc, target=scaled_profile(sc.target, speed[sc.name]))
        drafter, k = _fixed_drafter_k(specs[sc.name])
        if sc.mode != "ar" and drafter is not None:
            check_k(bundle, drafter, k, f"runs[{sc.name}]")
        check_inputs(sc, inputs)
        res = simulate(sc, inputs)
        out[sc.name] = res if isinstance(res, dict) or whole else simulated_latencies(res)
    return out


def _fixed_drafter_k(run) -> tuple[str | None, int]:
    """The drafter and k a run's policy sets (both given, as the fixed policy does), else (None, 0)."""
    given = run.policy.given() if run.policy is not None else {}
    if "drafter" in given and "k" in given:
        return given["drafter"], int(given["k"])
    return None, 0


def _refit_scenario(sc, rng: np.random.Generator):
    """The scenario priced by its target profile refit on a bootstrap resample of the profile's measurements."""
    from calibration.vllm_steps.bootstrap import refit_target

    if not hasattr(sc, "target"):
        raise ValueError(f"--bootstrap: run {sc.name} is a cluster run; bootstrap one server's profile at a time")
    try:
        return dataclasses.replace(sc, target=refit_target(sc.target, rng))
    except ValueError as e:
        raise ValueError(f"--bootstrap: run {sc.name}: {e} (a profile from `calibrate vllm` keeps its steps)") from None


def run_drifts(cfg, names: list[str] | None) -> dict[str, Any]:
    """Run name -> the speed drift between the calibration cells of its target profile's kept steps
    (calibration/vllm_steps/drift.py `profile_drift`); errors name the profile file."""
    from calibration.vllm_steps.drift import profile_drift
    from experiments.run import prepare
    from traces.errors import TraceFormatError

    out = {}
    for sc in prepare(cfg):
        if names and sc.name not in names:
            continue
        if not hasattr(sc, "target"):
            raise ValueError(f"--drift: run {sc.name} is a cluster run; the drift scales one server's profile")
        ref = sc.server.target_profile
        where = ref if isinstance(ref, str) else f"runs[{sc.name}].server.target_profile"
        try:
            out[sc.name] = profile_drift(sc.target, where)
        except TraceFormatError:
            raise
        except ValueError as e:
            raise TraceFormatError(where, f"--drift: run {sc.name}: {e}", field="measurements") from None
    return out


def compare(measured_path: str, config: str, overrides: list[str] = (), repeats: int = DEFAULT_REPEATS,
            names: list[str] | None = None, bootstrap: bool = False, drift: bool = False):
    """The ValidationReport of one measured run against every (named) run of the config; with `bootstrap`, repeats
    after the first are also priced by refit target profiles, with `drift` scaled by speed factors drawn per run
    from its calibration cells' drift (the first repeat is the config's own prediction)."""
    from calibration.vllm_steps.validate_compare import LevelResult, ValidationReport, interval_source, level_rows
    from experiments.cli.import_measured import nominal_text
    from experiments.config import load_config
    from simulator.seeds import child, seed_int
    from traces.measured_run import load_measured

    if not 1 <= repeats <= MAX_REPEATS:
        raise ValueError(f"repeats: expected an integer in [1, {MAX_REPEATS}], got {repeats:,}")
    if drift and repeats < 2:
        raise ValueError("--drift: the speed factors price repeats 2..N around the point prediction; expected "
                         f"--repeats >= 2, got {repeats}")
    run = load_measured(measured_path)
    cfg = load_config(config, list(overrides))
    measured = measured_latencies(run)
    root = np.random.SeedSequence(cfg.seed)  # repeat j: an experiment seed from its own child
    seeds = [cfg.seed] + [seed_int(child(root, j)) for j in range(max(0, repeats - 1))]
    boot = child(np.random.SeedSequence([cfg.seed, 2]), 0) if bootstrap else None
    drifts = run_drifts(cfg, names) if drift else {}
    drift_root = np.random.SeedSequence([cfg.seed, 3])  # its own stream: the other draws are unchanged
    index = {r.name: i for i, r in enumerate(cfg.runs)}  # run i's draws from child i, whichever runs are compared
    factors = {name: d.draws(repeats - 1, np.random.default_rng(child(drift_root, index[name])))
               for name, d in drifts.items()}
    sims = [simulate_measured(cfg, run, s, names, child(boot, j) if boot is not None and j else None,
                              {n: float(f[j - 1]) for n, f in factors.items()} if drift and j else None)
            for j, s in enumerate(seeds)]
    delivered = run.delivered_rate()
    nominal = run.info.get("request_rate")
    rate = delivered if delivered is not None else (float(nominal) if isinstance(nominal, (int, float)) else 0.0)
    levels, rows, skipped = [], [], {}
    for name, lat in sims[0].items():
        if isinstance(lat, dict):
            skipped[name] = lat.get("does_not_fit", "did not run")
            continue
        lv = LevelResult(name, None, rate, None, measured, {"predicted": lat})
        levels.append(lv)
        rows += level_rows(lv, p99=True, repeats={"predicted": [s[name] for s in sims[1:]]} if repeats > 1 else None)
    if run.info.get("itl_percentiles") is False:  # per-request means only: the pooled mean is exact, percentiles not
        rows = [r for r in rows if not r["metric"].startswith("itl_p")]
    notes = [f"measured: {measured_path} ({len(run.requests)} requests; {run.info.get('source', {}).get('format')})",
             f"predicted: {config} with seed {cfg.seed}; interval = range over {len(seeds)} seeds (borrowed "
             "acceptance redrawn, policies reseeded" + ("; target profiles refit on resampled calibration steps"
                                                         if bootstrap else "") +
             ("; target step prices scaled by speed factors drawn from the calibration cells' drift)" if drift
              else ")"),
             "throughput = output tokens / (last finish - first send), the same for both sides",
             f"req/s = the rate the client delivered ((requests - 1) / (last send - first send)); nominal "
             f"{nominal_text(nominal)}",
             "TPOT = (finish - first token) / (output tokens - 1) on both sides (vLLM's definition)"]
    if run.info.get("itl"):
        notes.append(f"measured ITL: {run.info['itl']}")
    for who, t in (run.info.get("tpot_mean_s") or {}).items():
        if who != "draftsim" and t is not None:
            notes.append(f"the source's own TPOT ({who}: {run.info['tpot_definitions'][who]}) has mean "
                         f"{1e3 * t:.2f} ms; not the TPOT compared here")
    notes += [f"warning: {w}" for w in run.info.get("arrival_warnings", []) + [run.info.get("cold_first_request")]
              if w]
    notes += acceptance_notes(cfg, run, [lv.mode for lv in levels])
    notes += [drift_note(name, d) for name, d in drifts.items()]
    notes += [f"run {k} not simulated: {v}" for k, v in skipped.items()]
    info = {"notes": notes, "measured": run.info, "seeds": seeds}
    if repeats > 1:
        info["interval_source"] = interval_source(bootstrap, drift)
    if drifts:
        info["speed_drift"] = {n: {**d.summary(), "factors": [round(float(x), 4) for x in factors[n]]}
                               for n, d in drifts.items()}
    return ValidationReport(rows, levels, info)


def step_count(n: int) -> str:
    """'1 step', '2 steps'."""
    return f"{n} step{'s' if n != 1 else ''}"


def drift_note(name: str, d) -> str:
    """One line per run: its calibration cells' lowest and highest speed factors and the 5-95% range of the
    factors drawn from."""
    lo, hi = d.summary()["factor_5_95"]
    slow, fast = max(d.groups, key=lambda g: g.factor), min(d.groups, key=lambda g: g.factor)
    n = len({g.name.rsplit(":", 1)[0] for g in d.groups})
    groups = f"{n} group{'s' if n != 1 else ''}"
    left = (f"; {step_count(d.left_out_steps)} of several groups and {step_count(d.lone_steps)} alone in their "
            "cell left out" if d.left_out_steps or d.lone_steps else "")
    return (f"{name}: speed drift between its {len(d.groups)} calibration cells ({groups} x batch sizes; "
            f"measured / priced {fast.factor:.3f} ({fast.name}) to {slow.factor:.3f} ({slow.name}){left}): factors "
            f"drawn from a Student t with {d.df} df, 5-95% {lo:.3f}-{hi:.3f}")


def acceptance_notes(cfg, run, names: list[str]) -> list[str]:
    """The measured run's acceptance (vLLM's counters) beside the config's at each fixed-k run, and warnings when
    the config's acceptance is implausible or from another target: a gap here explains a TPOT gap."""
    from experiments.cli.import_measured import describe
    from experiments.run import resolve_bundle
    from traces.acceptance_levels import AcceptanceSource, plausibility, same_model, source_from_bundle

    sd = run.info.get("spec_decode")
    runs = {r.name: r for r in cfg.runs}
    out = []
    bundle = None
    for name in names:
        drafter, k = _fixed_drafter_k(runs[name])
        if runs[name].mode == "ar" or drafter is None:
            continue
        bundle = bundle or resolve_bundle(cfg.traces, cfg.seed)
        ours = source_from_bundle(bundle, drafter, k)
        line = f"{name}: the config's acceptance: {describe(ours)}"
        if sd:
            line += f"; the measured run's vLLM counters: {describe(_measured_source(sd, k))}"
        out.append(line)
        # vllm bench's model_id is the served name (--served-model-name may be any alias); its tokenizer_id is
        # usually the model's path: the target is another model only when neither names it
        names_ = [m for m in (run.info.get("model_id"), run.info.get("tokenizer_id")) if m]
        model = None if any(same_model(m, bundle.meta.target) for m in names_) or not names_ else names_[0]
        measured = AcceptanceSource(k, target=bundle.meta.target, dataset=bundle.meta.dataset)
        out += [f"{name}: warning: {m}" for m in plausibility(measured, bundle.meta.drafters[drafter].kind,
                                                               model, None)]
    return out


def _measured_source(sd: dict, k: int):
    """The measured run's counters as an acceptance source (mean length per proposing step, proposal rate)."""
    from traces.acceptance_levels import AcceptanceSource
    from traces.importers.vllm_bench import proposal_of

    p = proposal_of(sd)
    return AcceptanceSource(k, sd["acceptance_length"], proposal_rate=None if p is None else p.rate)


def _run(args: argparse.Namespace) -> int:
    from experiments.validate_report import format_table, write_outputs

    from experiments.report import check_results_target, staged_results_folder

    names = [n.strip() for n in args.runs.split(",")] if args.runs else None
    if not 1 <= args.repeats <= MAX_REPEATS:  # before anything is read or allocated
        raise ValueError(f"--repeats: expected an integer in [1, {MAX_REPEATS}], got {args.repeats:,}")
    if args.out is not None:
        check_results_target(args.out, None, [args.measured, args.config])  # before anything is simulated
    report = compare(args.measured, args.config, args.overrides, args.repeats, names, args.bootstrap, args.drift)
    if not report.rows:
        print("draftsim: error: no config run could be simulated: " + "; ".join(report.info["notes"][3:]),
              file=sys.stderr)
        return 2
    print(format_table(report))
    for n in report.info["notes"]:
        print(n)
    if args.out is not None:  # written into a temp folder, renamed into place only when complete
        check_results_target(args.out, None, [args.measured, args.config])  # again: after the simulations
        with staged_results_folder(args.out, None) as tmp:
            write_outputs(report, tmp, args.config, {}, stem="comparison", command_name="compare",
                          title="draftsim compare: measured vs draftsim predicted",
                          plot_metrics=("ttft", "tpot", "itl", "e2e"), measured_label="measured")
        print(f"wrote {os.path.join(args.out, 'comparison.json')}, comparison.md and CDF plots")
    return 0


def measured_from_results(results, run_name: str):
    """A draftsim run's own output as a measured run (trace ids kept, pooled ITLs): feeding it back to
    `compare` with the same config must reproduce the run's numbers exactly."""
    from traces.measured_run import MeasuredRequest, MeasuredRun

    r = results.requests[results.requests.run == run_name]
    reqs = [MeasuredRequest(str(q.request_id), float(q.arrival_time), int(q.prompt_len), int(q.output_len),
                            float(q.ttft), float(q.e2e), None, str(q.trace_id)) for q in r.itertuples()]
    return MeasuredRun(run_name, reqs, {"source": {"format": "draftsim run", "run": run_name}},
                       np.asarray(results.itl[run_name], dtype=float))
