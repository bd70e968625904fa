"""Where a shipped `draftsim validate` run's predicted TTFT differs from vLLM's, request by request.

Per mode and load level: the measured TTFT split into queue, engine and output path
(calibration/vllm_steps/first_token.py) against the same split of validate's simulations (replay, predictive, and
replay with the level's own step prices, same profiles and seeds as validate), separately for requests that
arrived at an idle engine and at a busy one; then the candidate causes of a first-token bias measured on the
steps: the proposer's time in the first-token step, requests passed over or prefilled in several chunks, the loop
gap a busy arrival waits, the output path, the price of the first-token step by arrival kind, the predictive
run with the level's own acceptance instead of the borrowed one, and how much longer a prefill step is after the
engine was idle than its shape says.

Run from the repository root: `python -m benchmarks.bench_first_token [--folder
experiments/validation/vllm-cpu-smollm2-quiet] [--modes ar,ngram:4] [--json OUT]`; for a served run (`vllm serve` with
the recorder, `vllm bench serve` results) `--served STEP_LOG RESULT.json... --config RUN.yaml --run NAME` splits each
client run's TTFT against that config's prediction (served_report). Simulated and recorded figures (no timing);
asserts nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MS = 1000.0


def _split_ms(s) -> dict[str, Any]:
    return {"n": s.requests, "ttft": round(s.ttft * MS, 1), "queue": round(s.queue * MS, 1),
            "engine": round(s.engine * MS, 1), "out": round(s.out * MS, 1)}


def _diff(sim, meas) -> dict[str, float]:
    """Simulated minus measured mean, ms, per part (their sum is the TTFT difference)."""
    return {k: round((getattr(sim, k) - getattr(meas, k)) * MS, 1) for k in ("ttft", "queue", "engine", "out")}


def mode_report(data, cfg) -> dict[str, Any]:
    from calibration.vllm_steps.acceptance import join_ids
    from calibration.vllm_steps.first_token import measured_first_tokens, measured_split, simulated_split
    from calibration.vllm_steps.validate_compare import (fit_mode_profiles, predictive_traces, replay_traces,
                                                         simulate_level)
    from simulator.seeds import child

    name, model = f"{cfg.target}-vllm-{cfg.dtype}", cfg.target
    profiles = {"replay": fit_mode_profiles(data, data.load_log, f"{name}-load", model),
                "predictive": fit_mode_profiles(data, data.cal_log, f"{name}-calibration", model)}
    engine_ids = sorted({r.id for s in data.log.steps for r in s.requests})
    root = np.random.SeedSequence(cfg.seed)
    levels = []
    for i, lv in enumerate(data.levels):
        clients = [(q["id"], q["send_time"], q["chunk_times"][0]) for q in lv["requests"]]
        rows = measured_first_tokens(data.log, clients, join_ids([c for c, _, _ in clients], engine_ids, "steps"),
                                     str(data.folder))
        idle = {r.id: r.idle_at_send for r in rows}
        groups = {"all": rows, "idle": [r for r in rows if r.idle_at_send],
                  "busy": [r for r in rows if not r.idle_at_send]}
        level = child(root, i)  # validate_mode's seed tree: 0 draws the borrowed traces, 1 the simulation
        traces = {"replay": replay_traces(data, i, model),
                  "predictive": predictive_traces(data, i, model, np.random.default_rng(child(level, 0)))}
        own = fit_mode_profiles(data, data.level_logs[i], f"{name}-level{i}", model)
        runs = {"replay": (traces["replay"], profiles["replay"]),
                "predictive": (traces["predictive"], profiles["predictive"]),
                "level-fitted": (traces["replay"], own),
                "predictive, own acceptance": (traces["replay"], profiles["predictive"])}
        out: dict[str, Any] = {"fraction": float(lv["fraction"]), "idle_arrivals": len(groups["idle"]),
                               "measured": {g: _split_ms(measured_split(rs)) for g, rs in groups.items() if rs}}
        out["simulated"] = {}
        for kind, (tr, prof) in runs.items():
            req = simulate_level(data, i, tr, prof, child(level, 1)).requests
            out["simulated"][kind] = {g: {**_split_ms(simulated_split(req, [r.id for r in rs], idle)),
                                          "minus_measured": _diff(simulated_split(req, [r.id for r in rs]),
                                                                  measured_split(rs))}
                                      for g, rs in groups.items() if rs}
        busy = groups["busy"]
        prev_end = {r.id: _previous_end(data.log, r.admitted) for r in busy}
        out["causes"] = {
            "proposer_in_first_token_step_ms": round(float(np.mean([r.draft_seconds for r in rows])) * MS, 2),
            "proposer_in_idle_arrivals_step_ms": round(float(np.mean([r.draft_seconds for r in groups["idle"]]))
                                                       * MS, 2) if groups["idle"] else None,
            "passed_over_or_chunked": sum(r.steps_passed > 0 or r.prefill_chunks > 1 for r in rows),
            "busy_arrival_loop_gap_ms": round(float(np.mean([r.admitted - prev_end[r.id] for r in busy])) * MS, 2)
            if busy else None,
            "step_overhead_ms": {k: round(p.step_overhead_s * MS, 2) for k, p in profiles.items()},
            "output_path_ms": round(float(np.mean([r.out for r in rows])) * MS, 2),
            "idle_arrival_pickup_ms": round(float(np.mean([r.queue for r in groups["idle"]])) * MS, 2)
            if groups["idle"] else None,
        }
        levels.append(out)
    return {"mode": data.mode.label, "levels": levels, "after_idle_prefill": after_idle_effect(data)}


AFTER_IDLE_TERMS = ("const", "prefill_tokens", "prefill_attn", "decode_seqs", "draft_tokens", "decode_kv")


def after_idle_effect(data) -> dict[str, Any]:
    """Least squares of the load levels' prefill steps' target time (step minus drafting) on their shape and an
    after-idle indicator (no request of the step ran in the step before it: the engine had been idle): the
    indicator's coefficient and standard error, ms (terms that never vary are left out)."""
    from calibration.vllm_steps.fit import phase, step_shape

    load = {s.step for lg in data.level_logs for s in lg.steps}
    rows, y = [], []
    for prev, st in zip([None] + data.log.steps[:-1], data.log.steps):
        if st.step not in load or phase(st) != "prefill":
            continue
        sh = step_shape(st)
        f = {"const": 1.0, "prefill_tokens": sh.prefill_tokens, "prefill_attn": sh.prefill_attn / 1e3,
             "decode_seqs": sh.decode_seqs, "draft_tokens": sh.draft_tokens, "decode_kv": sh.decode_kv / 1e3}
        idle = prev is None or not ({r.id for r in st.requests} & {r.id for r in prev.requests})
        rows.append([f[t] for t in AFTER_IDLE_TERMS] + [float(idle)])
        y.append(st.duration - (st.draft_seconds or 0.0))
    X, yv = np.array(rows, dtype=float), np.array(y)
    keep = [j for j in range(X.shape[1]) if j == 0 or np.ptp(X[:, j]) > 0]
    X = X[:, keep]
    coef = np.linalg.lstsq(X, yv, rcond=None)[0]
    resid = yv - X @ coef
    cov = np.linalg.pinv(X.T @ X) * float(resid @ resid) / max(len(yv) - X.shape[1], 1)
    return {"prefill_steps": len(yv), "after_idle_steps": int(X[:, -1].sum()),
            "after_idle_ms": round(float(coef[-1]) * MS, 1), "standard_error_ms": round(float(np.sqrt(cov[-1, -1])) * MS, 1)}


def _previous_end(log, t: float) -> float:
    """End of the last step that began before wall time `t`."""
    return max(s.wall_start + s.duration for s in log.steps if s.wall_start < t)


def run(folder: Path, modes: list[str]) -> dict[str, Any]:
    from calibration.vllm_steps.validate_compare import _mode_folder, load_mode
    from calibration.vllm_steps.validate_run import load_config

    cfg = load_config(ROOT / "experiments" / "validation" / "validate-vllm-cpu.yaml").model_copy(
        update={"modes": modes})
    out: dict[str, Any] = {"folder": str(folder), "modes": []}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(folder / "raw-runs.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        for mode in cfg.parsed_modes():
            mf = _mode_folder(Path(tmp), mode)
            out["modes"].append(mode_report(load_mode(mf, dataclasses.replace(mode, label=mf.name)), cfg))
    return out


def served_report(step_log: Path, results: list[Path], config: str, run_name: str) -> dict[str, Any]:
    """A served run (`vllm serve` with the recorder, `vllm bench serve` results): per client run, the measured
    TTFT split against `config`'s run `run_name` simulated on the run's send times (`draftsim compare`'s
    simulation), for idle and busy arrivals apart. The bench's send times are its own perf_counter offsets: they
    are placed on the recorder's wall clock by the median of (vLLM's recorded arrival - send) over the run's
    requests, or, in a log recorded before arrivals were, so that the run's quickest pickup (first step - send)
    is 0."""
    from calibration.vllm_steps.first_token import measured_first_tokens, measured_split, simulated_split
    from calibration.vllm_steps.from_server import engine_requests, match_runs, read_measured
    from calibration.vllm_steps.records import load_steps
    from experiments.cli.compare import simulate_measured
    from experiments.config import load_config

    log = load_steps(step_log)
    engine = engine_requests(log)
    arrival = {r.id: r.arrival for st in log.steps for r in st.requests if r.arrival is not None}
    runs = [(str(p), run) for p in results for run in read_measured(p)]
    cfg = load_config(config, [])
    out: dict[str, Any] = {"step_log": str(step_log), "config": config, "run": run_name, "levels": []}
    for (path, run), idx in zip(runs, match_runs(runs, engine)):
        sends = sorted(run.requests, key=lambda q: (q.send_time, q.id))
        recorded = all(engine[i].id in arrival for i in idx)
        # client i <-> engine i in order of arrival at the server (recorded) or of first step (FIFO admission)
        served = sorted((engine[i] for i in idx), key=lambda e: (arrival[e.id] if recorded else e.first_step, e.id))
        ids = {q.id: e.id for q, e in zip(sends, served)}
        if recorded:
            offset, clock = float(np.median([arrival[ids[q.id]] - q.send_time for q in sends])), "recorded arrivals"
        else:
            offset, clock = min(e.first_step - q.send_time for q, e in zip(sends, served)), "quickest pickup = 0"
        rows = measured_first_tokens(log, [(q.id, q.send_time + offset, q.send_time + offset + q.ttft)
                                           for q in sends], ids, path)
        sim = simulate_measured(cfg, run, cfg.seed, [run_name], whole=True)[run_name].requests
        first_sim = sim.set_index("request_id").loc[sends[0].id]
        idle = {r.id: r.idle_at_send for r in rows}
        groups = {"all": rows, "idle": [r for r in rows if r.idle_at_send],
                  "busy": [r for r in rows if not r.idle_at_send]}
        first = sends[0]
        later = [r for r in rows if r.id != first.id]  # a warm server's: the first request pays the warm-up
        out["levels"].append({
            "file": path, "run": run.name, "clock": clock, "delivered_rate_req_s": run.delivered_rate(),
            "idle_arrivals": len(groups["idle"]),
            "measured": {g: _split_ms(measured_split(rs)) for g, rs in groups.items() if rs},
            "simulated": {g: {**_split_ms(simulated_split(sim, [r.id for r in rs], idle)),
                              "minus_measured": _diff(simulated_split(sim, [r.id for r in rs]), measured_split(rs))}
                          for g, rs in groups.items() if rs},
            "first_request": {"measured_engine_ms": round(rows[0].engine * MS, 1),
                              "proposer_ms": round(rows[0].draft_seconds * MS, 1),
                              "simulated_engine_ms": round(float(first_sim.first_token_time
                                                                 - first_sim.first_scheduled_time) * MS, 1)},
            "without_first": {"measured_ttft_ms": round(measured_split(later).ttft * MS, 1),
                              "simulated_ttft_ms": round(simulated_split(sim, [r.id for r in later]).ttft * MS, 1)}})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default=str(ROOT / "experiments" / "validation" / "vllm-cpu-smollm2-quiet"))
    ap.add_argument("--modes", default="ar,ngram:4")
    ap.add_argument("--served", nargs="+", metavar="FILE", default=None,
                    help="STEP_LOG RESULT.json...: a served run instead (vllm serve with the recorder, vllm bench "
                         "serve results), simulated by --config's run --run")
    ap.add_argument("--config", default=None, help="with --served: the draftsim config that predicts it")
    ap.add_argument("--run", default=None, help="with --served: the config's run to simulate")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.served:
        if len(args.served) < 2 or not args.config or not args.run:
            ap.error("--served needs STEP_LOG and at least one RESULT.json, with --config and --run")
        res = served_report(Path(args.served[0]), [Path(p) for p in args.served[1:]], args.config, args.run)
        print("mean ms; sim - measured per part (ttft = queue + engine + out); idle/busy: arrived at an idle/busy "
              "engine")
        for lv in res["levels"]:
            meas = lv["measured"]["all"]
            print(f"\n{lv['run']} ({lv['clock']}): measured TTFT {meas['ttft']} = queue {meas['queue']} + engine "
                  f"{meas['engine']} + out {meas['out']}; idle arrivals {lv['idle_arrivals']}/{meas['n']}")
            diffs = [(g, d["n"], d["minus_measured"]) for g, d in lv["simulated"].items()]
            print("  " + "  ".join(f"{g} n={n}: {m['ttft']:+.1f} (q {m['queue']:+.1f}, e {m['engine']:+.1f}, "
                                   f"o {m['out']:+.1f})" for g, n, m in diffs))
            print(f"  first request: {json.dumps(lv['first_request'])}; the others: {json.dumps(lv['without_first'])}")
        if args.json:
            from traces.atomic import atomic_write_text

            atomic_write_text(Path(args.json), json.dumps(res, indent=1))
        return 0
    res = run(Path(args.folder), [m.strip() for m in args.modes.split(",")])
    print("mean ms; sim - measured per part (ttft = queue + engine + out); idle/busy: arrived at an idle/busy engine")
    for m in res["modes"]:
        for lv in m["levels"]:
            meas = lv["measured"]["all"]
            print(f"\n{m['mode']} {lv['fraction']}x: measured TTFT {meas['ttft']} = queue {meas['queue']} + engine "
                  f"{meas['engine']} + out {meas['out']}; idle arrivals {lv['idle_arrivals']}/{meas['n']}")
            for kind, groups in lv["simulated"].items():
                parts = "  ".join(f"{g} n={d['n']}: {d['minus_measured']['ttft']:+.1f} (q {d['minus_measured']['queue']:+.1f}"
                                  f", e {d['minus_measured']['engine']:+.1f}, o {d['minus_measured']['out']:+.1f})"
                                  for g, d in groups.items())
                print(f"  {kind:27s} {parts}")
            print(f"  causes: {json.dumps(lv['causes'])}")
        print(f"\n{m['mode']} prefill steps, after-idle term over shape: {json.dumps(m['after_idle_prefill'])}")
    if args.json:
        from traces.atomic import atomic_write_text

        atomic_write_text(Path(args.json), json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
