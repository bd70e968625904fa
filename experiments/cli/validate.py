"""`draftsim validate CONFIG`: drive vLLM under Poisson load per mode, simulate the same arrivals with
draftsim (replay and predictive) and report measured vs predicted TTFT, TPOT, E2E and throughput."""
from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    a = sub.add_parser("validate", help="run vLLM under load (AR, n-gram, draft model) and compare draftsim's "
                       "predictions of the same arrivals with what vLLM measured")
    a.add_argument("config", help="validate YAML (see experiments/validation/validate-vllm-cpu.yaml)")
    a.add_argument("--out", required=True, help="folder for the vLLM runs, validation.json, the report and plots")
    a.add_argument("--analyse-only", action="store_true", help="skip vLLM; recompute from the runs in --out")
    a.add_argument("--repeats", type=int, default=3, help="seeds of the predictive simulation per level, for its "
                   "interval (the calibration request each load request borrows is redrawn; 1: no interval)")
    a.add_argument("--profiles-from", default=None, help="predictive step profiles and overhead from a `draftsim "
                   "calibrate vllm` folder instead of the run's own calibration groups (acceptance stays the run's)")
    a.add_argument("--bootstrap", action="store_true", help="each predictive repeat after the first is also priced "
                   "by the calibration profile refit on a resample of its steps (and the overhead of its busy gaps): "
                   "the interval spans the fit's own uncertainty")
    a.add_argument("--drift", action="store_true", help="each predictive repeat after the first also has its target "
                   "step prices scaled by a speed factor drawn from the spread between the run's own calibration "
                   "groups (calibration/vllm_steps/drift.py): the interval spans the machine's speed drift too")
    a.add_argument("--modes", default=None, help="comma list: only these of the config's modes (e.g. ar,ngram:4)")
    a.add_argument("--step-model", default=None, choices=("structured", "linear"),
                   help="target step-time model (default: the config's step_model)")
    a.set_defaults(func=_run)


def _prompts(cfg, lm) -> tuple[list[list[int]], list[str]]:
    """The configured workloads' prompts interleaved, as many as the plan uses, tokenised for the target,
    and their workload categories."""
    from calibration.models.hf_backend import encode_prompt
    from calibration.prompts import workload_prompts
    from calibration.vllm_steps.validate_run import interleaved, plan_prompt_count

    texts = interleaved([workload_prompts(w, seed=cfg.seed) for w in cfg.workloads])[:plan_prompt_count(cfg)]
    return [encode_prompt(lm, p.text) for p in texts], [p.category for p in texts]


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from calibration.vllm_steps.validate_compare import validate_all
    from experiments.validate_report import failures, format_table, write_outputs
    from calibration.vllm_steps.validate_run import load_config, run_mode

    try:
        cfg = load_config(args.config)
    except (ValueError, OSError) as e:
        print(f"draftsim: error: {e}", file=sys.stderr)
        return 2
    if args.step_model:
        cfg = cfg.model_copy(update={"step_model": args.step_model})
    if args.modes:
        chosen = [m.strip() for m in args.modes.split(",") if m.strip()]
        unknown = [m for m in chosen if m not in cfg.modes]
        if unknown or not chosen:
            print(f"draftsim: error: --modes: {unknown or chosen} not among the config's modes {cfg.modes}",
                  file=sys.stderr)
            return 2
        cfg = cfg.model_copy(update={"modes": chosen})
    out = Path(args.out)
    if not args.analyse_only:
        from calibration.models.hf_backend import converted_folder
        from calibration.models.loading import load_target, with_drafter_folder
        from calibration.models.packaged import PACKAGED_MODELS

        lm = load_target(cfg.target).lm
        folder = str(converted_folder(cfg.target)) if cfg.target in PACKAGED_MODELS else cfg.target
        prompts, categories = _prompts(cfg, lm)
        for mode in cfg.parsed_modes():
            mode = with_drafter_folder(mode, lm)
            print(f"vLLM {mode.label}: calibration groups {cfg.calibration.batch_sizes}, then "
                  f"{len(cfg.load.fractions)} Poisson levels x {cfg.load.requests} requests", flush=True)
            run_mode(cfg, mode, folder, prompts, out, categories=categories)
    report = validate_all(cfg, out, repeats=max(1, args.repeats), profiles_from=args.profiles_from,
                          bootstrap=args.bootstrap, drift=args.drift)
    write_outputs(report, out, args.config, cfg.tolerances)
    print(format_table(report))
    bad = failures(report.rows, cfg.tolerances)
    for line in bad:
        print(f"over tolerance: {line}", file=sys.stderr)
    print(f"wrote {out}/validation.json, {out}/validation.md and CDF plots")
    return 1 if bad else 0
