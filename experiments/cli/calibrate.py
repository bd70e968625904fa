"""`draftsim calibrate ...`: measure acceptance traces and latency profiles on real models, import others'."""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure acceptance traces / latency profiles on real models")
    sub = p.add_subparsers(dest="calibrate_command", metavar="WHAT")
    _register_acceptance(sub)
    _register_latency(sub)
    _register_suffix_cost(sub)
    _register_check(sub)
    _register_pool_report(sub)
    _register_vllm(sub)
    _register_live(sub)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


# ---------------------------------------------------------------- acceptance


def _register_acceptance(sub) -> None:
    a = sub.add_parser("acceptance", help="collect a trace bundle (target generates, drafters teacher-forced)")
    a.add_argument("--workload", required=True, help="chat, code, code-edit, math or summarization")
    a.add_argument("--out", required=True, help="bundle folder to write (resumes if a partial run is there)")
    a.add_argument("--target", default="smollm2-135m-instruct", help="packaged model name or transformers folder")
    a.add_argument("--drafters", default="int8,layers:24,layers:20,ngram",
                   help="comma list of int8, layers:N, ngram[:min_n:max_n:max_proposal], model:PATH")
    a.add_argument("--requests", type=int, default=80)
    a.add_argument("--max-new-tokens", type=int, default=160)
    a.add_argument("--min-new-tokens", type=int, default=128, help="EOS is forbidden before this many tokens")
    a.add_argument("--temperature", type=float, default=0.0)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--batch-size", type=int, default=8)
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--device", default="cpu")
    a.add_argument("--dtype", default="float32")
    a.add_argument("--cost-model-prefix", default="", help="drafters' cost_model = PREFIX + drafter name")
    a.add_argument("--tree-top-k", type=int, default=None,
                   help="with --tree-depth: per position and depth, the rank of the target's token among each "
                        "drafter's top K candidates (tree_rank; greedy only; n-gram has one candidate)")
    a.add_argument("--tree-depth", type=int, default=None, help="draft depths per position of tree_rank")
    a.add_argument("--no-compress", action="store_true", help="write requests.jsonl instead of .jsonl.gz")
    a.add_argument("--no-progress", action="store_true")
    a.set_defaults(func=_run_acceptance)


def _run_acceptance(args: argparse.Namespace) -> int:
    from calibration.collect import AcceptanceConfig, collect_acceptance

    cfg = AcceptanceConfig(workload=args.workload, out=args.out, target=args.target,
                           drafters=[s.strip() for s in args.drafters.split(",") if s.strip()],
                           num_requests=args.requests, max_new_tokens=args.max_new_tokens,
                           min_new_tokens=args.min_new_tokens, temperature=args.temperature, seed=args.seed,
                           batch_size=args.batch_size, threads=args.threads, device=args.device, dtype=args.dtype,
                           compress=not args.no_compress, cost_model_prefix=args.cost_model_prefix,
                           tree_top_k=args.tree_top_k, tree_depth=args.tree_depth)
    try:
        path = collect_acceptance(cfg, progress=not args.no_progress)
    except KeyboardInterrupt:
        return 130
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- latency


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected a comma list of integers, got {text!r}") from None


def _register_latency(sub) -> None:
    a = sub.add_parser("latency", help="time target verify steps and drafter steps; fit and write profiles")
    a.add_argument("--target", default="smollm2-135m-instruct", help="packaged model name or transformers folder")
    a.add_argument("--drafters", default="int8,layers:24,layers:20,ngram", help="comma list (see acceptance)")
    a.add_argument("--out-dir", required=True, help="folder for the profile YAML files")
    a.add_argument("--name", default=None, help="profile name of the target (drafters get NAME-<drafter>)")
    a.add_argument("--batch-sizes", default="1,2,4,8")
    a.add_argument("--query-tokens", default="1,2,4,6", help="tokens per sequence in a verify step (1..k+1; "
                   "a tree verify: its N + 1 tokens, up to 64 and beyond)")
    a.add_argument("--verify-mask", choices=["causal", "tree"], default="causal",
                   help="tree: the target's query tokens form a draft tree verified with a 4-D tree-attention mask "
                        "(built per step); drafters are timed at one token either way")
    a.add_argument("--context-lens", default="64,256,512")
    a.add_argument("--warmup", type=int, default=2)
    a.add_argument("--repeats", type=int, default=5)
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--device", default="cpu")
    a.add_argument("--dtype", default="float32")
    a.add_argument("--no-progress", action="store_true")
    a.set_defaults(func=_run_latency)


def _run_latency(args: argparse.Namespace) -> int:
    from calibration.latency_sweep import SweepConfig, calibrate_latency
    from calibration.models.loading import split_specs
    from experiments.config import check_plain_name

    if args.name is not None:  # profiles are named <name>[-<drafter>].yaml inside --out-dir
        check_plain_name(args.name, "--name")
    cfg = SweepConfig(batch_sizes=_ints(args.batch_sizes), query_tokens=_ints(args.query_tokens),
                      context_lens=_ints(args.context_lens), warmup=args.warmup, repeats=args.repeats,
                      threads=args.threads, verify_mask=args.verify_mask)
    rows = calibrate_latency(args.target, split_specs(args.drafters), cfg, args.out_dir, args.name, dtype=args.dtype,
                             device=args.device, progress=not args.no_progress)
    print(f"{'profile':40s} {'points':>6s} {'MAPE%':>7s}  coefficients (s)  [MAPE% without term]")
    for prof_name, f in rows:
        coef = " ".join(f"{k}={v:.3g}" for k, v in f.linear.coefficients.items())
        print(f"{prof_name:40s} {f.report['points']:6d} {f.report['mape_percent']:7.2f}  {coef}  "
              f"{f.report['mape_percent_without_term']}  load/core~{f.report['median_load_per_core']:.2f}")
    return 0


def _register_suffix_cost(sub) -> None:
    a = sub.add_parser("suffix-cost", help="time the suffix-decoding proposer per step; fit and write its profile")
    a.add_argument("--out", required=True, help="profile YAML to write")
    a.add_argument("--name", default="suffix-cpu", help="profile name (default suffix-cpu)")
    a.add_argument("--batch-sizes", default="1,2,4,8")
    a.add_argument("--context-lens", default="64,256,512,1024")
    a.add_argument("--warmup", type=int, default=2)
    a.add_argument("--repeats", type=int, default=5)
    a.add_argument("--max-tree-depth", type=int, default=24)
    a.add_argument("--num-speculative-tokens", type=int, default=None)
    a.add_argument("--backend", default="python", choices=("python", "arctic"),
                   help="time this project's pass (python) or ArcticInference's SuffixDecodingCache (arctic, what "
                        "vLLM runs; needs arctic_inference importable)")
    a.set_defaults(func=_run_suffix_cost)


def _run_suffix_cost(args: argparse.Namespace) -> int:
    from calibration.latency_sweep import SweepConfig
    from calibration.suffix_cost import calibrate_suffix_cost
    from traces.suffix_decoding import SuffixConfig

    try:
        cfg = SweepConfig(batch_sizes=_ints(args.batch_sizes), context_lens=_ints(args.context_lens),
                          warmup=args.warmup, repeats=args.repeats)
        scfg = SuffixConfig(max_tree_depth=args.max_tree_depth, num_speculative_tokens=args.num_speculative_tokens)
        path, report = calibrate_suffix_cost(cfg, scfg, args.out, args.name, backend=args.backend)
    except ValueError as e:
        print(f"draftsim calibrate suffix-cost: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {report['points']} points, MAPE {report['mape_percent']:.2f}%, "
          f"load/core~{report['median_load_per_core']:.2f}")
    return 0


# ---------------------------------------------------------------- checks


def _register_check(sub) -> None:
    a = sub.add_parser("check", help="trace consistency, and real SD on the real models vs the trace")
    a.add_argument("bundle", help="bundle folder")
    a.add_argument("--drafter", default="int8", help="drafter spec to run for real (int8, layers:N, ngram...)")
    a.add_argument("--k", type=int, default=4)
    a.add_argument("--requests", type=int, default=2)
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--device", default="cpu")
    a.add_argument("--count-mismatches", action="store_true",
                   help="list steps whose accepted count differs from the trace instead of stopping at the first")
    a.set_defaults(func=_run_check)


def require_calibration_extra(command: str) -> None:
    """A clear error, not a ModuleNotFoundError, when a command that runs real models lacks torch/transformers."""
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"{command} runs the real models and needs {' and '.join(missing)}: install the "
                         "calibration extra, pip install 'draftsim[calibration]' (see the README's install section)")


def _run_check(args: argparse.Namespace) -> int:
    for flag, v, lo, hi in (("--k", args.k, 1, 64), ("--requests", args.requests, 0, 10**6),
                            ("--threads", args.threads, 1, 1024)):
        if not lo <= v <= hi:
            raise ValueError(f"{flag}: expected an integer in [{lo}, {hi}], got {v}")
    if args.requests > 0:
        require_calibration_extra("calibrate check")
    from calibration.checks import CalibrationCheckError, check_bundle
    from traces.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    try:
        res = check_bundle(bundle, args.drafter, args.k, num_requests=args.requests, threads=args.threads,
                           device=args.device, strict=not args.count_mismatches)
    except CalibrationCheckError as e:
        return _fail(str(e))
    print(f"{args.bundle}: trace consistency OK ({len(bundle.requests)} requests)")
    if res is not None:
        bad = res["count_mismatches"]
        print(f"real SD emitted exactly the target's greedy tokens; {res['steps']} steps, "
              f"{len(bad)} with a different accepted count than the trace: {res}")
        if bad:
            return 1
    return 0


# ---------------------------------------------------------------- pool report


def _register_pool_report(sub) -> None:
    a = sub.add_parser("pool-report", help="best drafter per workload: tokens per step and cost-aware speedup")
    a.add_argument("bundles", nargs="+", help="bundle folders (one workload each)")
    a.add_argument("--cost", default="", help="drafter=ratio list, e.g. int8=0.5,layers24=0.8 (draft step / target "
                   "step); n-gram drafters default to 0")
    a.add_argument("--target-profile", default=None,
                   help="use measured profiles: the target's profile (name or file); drafters' profiles are found "
                   "by their cost_model name (built-in or in --profile-dir)")
    a.add_argument("--profile-dir", default=None, help="folder of profile YAML files named <cost_model>.yaml")
    a.set_defaults(func=_run_pool_report)


MAX_COST_RATIO = 1000.0  # a draft step 1000x the target step is a typo, not a drafter


def parse_cost_ratios(text: str) -> dict[str, float]:
    """`--cost d=0.5,e=0.8` as {drafter: ratio}; each ratio a finite number in [0, MAX_COST_RATIO], each drafter once."""
    import math

    cost: dict[str, float] = {}
    for item in [x for x in text.split(",") if x.strip()]:
        name, sep, val = item.partition("=")
        name = name.strip()
        try:
            ratio = float(val)
        except ValueError:
            ratio = math.nan
        if not sep or not name or not math.isfinite(ratio) or not 0 <= ratio <= MAX_COST_RATIO:
            raise ValueError(f"--cost: expected DRAFTER=RATIO with a ratio in [0, {MAX_COST_RATIO:g}] (draft step / "
                             f"target step), got {item[:60]!r}")
        if name in cost:
            raise ValueError(f"--cost: drafter {name!r} given twice")
        cost[name] = ratio
    return cost


def _run_pool_report(args: argparse.Namespace) -> int:
    from calibration.pool_report import markdown_table, pool_report_rows

    from traces.bundle import load_bundle

    cost = parse_cost_ratios(args.cost)
    known = {d for path in args.bundles for d in load_bundle(path).meta.drafters}
    unknown = sorted(set(cost) - known)
    if unknown:
        raise ValueError(f"--cost: no drafter {unknown} in the bundles (their drafters: {sorted(known)})")
    print(markdown_table(pool_report_rows(args.bundles, cost, args.target_profile, args.profile_dir)))
    return 0


# ---------------------------------------------------------------- vLLM


def _register_vllm(sub) -> None:
    a = sub.add_parser("vllm", help="run vLLM (AR, n-gram, draft model) over batched and staggered calibration "
                       "groups with the step recorder; fit one target profile per mode, the step overhead and "
                       "acceptance bundles, and write a ready `draftsim run` config (OUT/run.yaml)")
    a.add_argument("--out", required=True, help="folder for the runs, bundles, profiles, run.yaml, calibration.json")
    a.add_argument("--prompts", default=None, help="JSONL of prompts (`prompt` text or `prompt_token_ids`, "
                   "optional `category`; vLLM bench's custom dataset format) or a measured-run folder from "
                   "`draftsim import vllm-bench` (its prompt lengths); default: --workload's built-in prompts")
    a.add_argument("--workload", default="chat", help="built-in prompts when --prompts is not given")
    a.add_argument("--target", default="smollm2-135m-instruct", help="packaged model name or transformers folder")
    a.add_argument("--modes", default="ar,ngram:4", help="comma list of ar, ngram:K, draft_model:K:PATH "
                   "(PATH layers:N = the target's first N layers, saved once as a folder vLLM loads)")
    a.add_argument("--batch-sizes", default="1,2,4,8", help="requests submitted together, one group each")
    a.add_argument("--staggered", default="8,8", help="staggered group sizes (one request every gap)")
    a.add_argument("--gaps", default="0.25,0.6", help="seconds between sends, one per staggered group")
    a.add_argument("--gap-steps", default=None, help="gaps instead in units of the batch-1 group's seconds per "
                   "token, one per staggered group (they scale with the machine's speed), e.g. 6,20")
    a.add_argument("--max-tokens", type=int, default=32, help="tokens every request emits (EOS forbidden before)")
    a.add_argument("--max-num-seqs", type=int, default=None, help="vLLM max_num_seqs (default: the largest group)")
    a.add_argument("--max-num-batched-tokens", type=int, default=2048)
    a.add_argument("--step-model", default="structured", choices=("structured", "linear"),
                   help="target step-time model (the same fit `draftsim validate` uses)")
    a.add_argument("--dtype", default="float32")
    a.add_argument("--name", default=None, help="profile name prefix (NAME-<mode>); default <target>-vllm-<dtype>")
    a.add_argument("--analyse-only", action="store_true", help="skip running vLLM; refit from the records in --out")
    a.add_argument("--from-server", nargs="+", default=None, metavar="FILE",
                   help="STEP_LOG MEASURED...: calibrate from a `vllm serve` you already ran with the step recorder "
                   "(DRAFTSIM_VLLM_STEPS=STEP_LOG) and its clients' results (`vllm bench serve --save-result "
                   "--save-detailed` JSON or a GuideLLM report); runs nothing, loads no model; writes --out's "
                   "profiles, bundle, calibration.json and run.yaml")
    a.add_argument("--seed", type=int, default=0)
    a.set_defaults(func=_run_vllm)


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected a comma list of numbers, got {text!r}") from None


def _run_from_server(args: argparse.Namespace) -> int:
    from pathlib import Path

    from calibration.vllm_steps.calibrate import RUN_CONFIG
    from calibration.vllm_steps.from_server import calibrate_from_server
    from experiments.config import load_config

    if len(args.from_server) < 2:
        raise ValueError("--from-server: expected the step log and at least one client result file "
                         "(vllm bench serve JSON or GuideLLM report)")
    from experiments.cli.import_measured import nominal_text

    doc = calibrate_from_server(args.from_server[0], args.from_server[1:], args.out, args.name,
                                step_model=args.step_model, seed=args.seed)
    load_config(str(Path(args.out) / RUN_CONFIG))  # the written config loads (profiles, bundle, runs resolve)
    fs = doc["from_server"]
    print(doc["table"])
    for c in fs["clients"]:
        rate = c["delivered_rate_req_s"]
        print(f"{c['file']} {c['run']}: {c['requests']} requests matched; delivered "
              f"{'-' if rate is None else f'{rate:.4g}'} req/s (nominal {nominal_text(c['nominal_rate'])}); "
              f"its steps' calibration group {c['group']!r}")
    several = fs["steps_in_several_groups"]
    print(f"{fs['engine_requests']} engine requests in the step log, {fs['left_out_engine_requests']} served no "
          f"client result given (left out); {fs['steps_fitted']} steps fitted"
          + (f" ({several} served two client runs at once: no group, left out of `compare --drift`)" if several
             else "") + ("; the engine's first step (the server's warm-up) left out of the fits"
                          if fs["left_out_first_step"] else ""))
    for w in fs["warnings"]:
        print(f"warning: {w}")
    print(f"wrote {args.out}/calibration.json, {args.out}/profiles/, {args.out}/{RUN_CONFIG} "
          f"(draftsim run {args.out}/{RUN_CONFIG}; draftsim compare MEASURED {args.out}/{RUN_CONFIG})")
    return 0


def _run_vllm(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.from_server:
        return _run_from_server(args)

    from calibration.models.loading import with_drafter_folder
    from calibration.vllm_steps.calibrate import RUN_CONFIG, VllmCalibration, analyse, parse_mode, run
    from calibration.vllm_steps.targets import vllm_target, vllm_target_prompts
    from experiments.config import check_plain_name, load_config

    if args.name is not None:  # profile files are named <name>-<mode>.yaml: checked before anything is written
        check_plain_name(args.name, "--name")
    staggered = _ints(args.staggered)
    need = sum(_ints(args.batch_sizes)) + sum(staggered) + 1
    if args.prompts:
        model, name, prompts, categories, lm, length_only = vllm_target_prompts(args.target, args.prompts, args.seed)
        dataset = Path(args.prompts).stem or Path(args.prompts).name
        if length_only:
            print(f"{args.prompts}: a measured run keeps prompt lengths, not texts: the calibration prompts are "
                  "built-in chat text cut to those lengths (step shapes are the run's; acceptance is not)")
    else:
        model, name, prompts, lm = vllm_target(args.target, args.workload, need, args.seed)
        categories, dataset = [args.workload] * len(prompts), args.workload
    modes = [with_drafter_folder(parse_mode(m), lm) for m in args.modes.split(",") if m.strip()]
    cal = VllmCalibration(model=model, model_name=name, prompts=prompts, modes=modes,
                          batch_sizes=_ints(args.batch_sizes), staggered=staggered,
                          gaps_s=_floats(args.gaps, "--gaps"),
                          gap_steps=_floats(args.gap_steps, "--gap-steps") if args.gap_steps else None, max_tokens=args.max_tokens, dtype=args.dtype,
                          dataset=dataset, categories=categories, seed=args.seed, max_num_seqs=args.max_num_seqs,
                          max_num_batched_tokens=args.max_num_batched_tokens, step_model=args.step_model)
    profile_name = check_plain_name(args.name or f"{name}-vllm-{args.dtype}", "--name (or <target>-vllm-<dtype>)")
    if not args.analyse_only:
        run(cal, args.out)
    doc = analyse(cal, args.out, profile_name)
    load_config(str(Path(args.out) / RUN_CONFIG))  # the written config loads (profiles, bundle, runs resolve)
    print(doc["table"])
    print(f"wrote {args.out}/calibration.json, {args.out}/profiles/, {args.out}/bundle/ and {args.out}/{RUN_CONFIG} "
          f"(draftsim run {args.out}/{RUN_CONFIG})")
    return 0


# ---------------------------------------------------------------- live


def _register_live(sub) -> None:
    a = sub.add_parser("live", aliases=["live-batched"], help="AR/SD/two-device PSD and policies served on the "
                       "real models with continuous batching (batch 1: --max-num-seqs 1 --clients 1), measured "
                       "against the simulator ('live-batched': the name of the same runner in older runs)")
    a.add_argument("--workload", required=True, help="chat, code, code-edit, math or summarization")
    a.add_argument("--requests", type=int, default=8)
    a.add_argument("--max-new-tokens", type=int, default=48, help="tokens every request emits (EOS forbidden)")
    a.add_argument("--modes", default="ar,sd:int8:2,sd2:int8:2,psd:int8:2",
                   help="comma list of ar, sd:<drafter>:<k> (target's core), sd2:<drafter>:<k> (SD on both cores), "
                   "psd:<drafter>:<k> (drafter process on the draft core)")
    a.add_argument("--policy", action="append", default=[],
                   help="an extra SD mode driven by this policy, YAML, e.g. '{name: ucb, drafters: [int8, ngram], k: 2}'")
    a.add_argument("--drafters", default="int8,ngram", help="drafter specs the --policy modes may choose from")
    a.add_argument("--target", default="smollm2-135m-instruct")
    a.add_argument("--max-num-seqs", type=int, default=4)
    a.add_argument("--clients", type=int, default=4, help="closed-loop clients (0: open loop, give --arrival-rate)")
    a.add_argument("--arrival-rate", type=float, default=0.0, help="open-loop Poisson arrivals, requests/s")
    a.add_argument("--target-core", type=int, default=0)
    a.add_argument("--draft-core", type=int, default=1)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--profile", default=None,
                   help="use these latency profiles instead of measuring them first: target PROFILE, drafters "
                   "PROFILE-<drafter name> (e.g. the packaged smollm2-135m-instruct-cpu, measured at batch 1 on "
                   "one thread); default: measure them with the live forward at the batches this run can form")
    a.add_argument("--int8-kernels", action="store_true",
                   help="draft live with torch's fbgemm int8 copy (what the packaged int8 profile timed; the trace "
                   "keeps the per-token W8A8 copy, so accepted counts may differ); default: the trace's W8A8 copy")
    a.add_argument("--out", required=True, help="folder for report.json, report.md and the measured traces")
    a.set_defaults(func=_run_live)


def _run_live(args: argparse.Namespace) -> int:
    import shlex

    from calibration.live.records import parse_policy_text
    from calibration.live.runner import BatchedLiveConfig, run_batched_live
    from calibration.models.loading import split_specs
    from experiments.studies.live_batched_report import finish_report, markdown, write_batched_report

    cfg = BatchedLiveConfig(workload=args.workload, num_requests=args.requests, max_new_tokens=args.max_new_tokens,
                            modes=[m.strip() for m in args.modes.split(",") if m.strip()],
                            policies=[parse_policy_text(t) for t in args.policy],
                            drafters=split_specs(args.drafters) if args.policy else [],
                            target=args.target, max_num_seqs=args.max_num_seqs, clients=args.clients,
                            arrival_rate=args.arrival_rate, target_core=args.target_core,
                            draft_core=args.draft_core, seed=args.seed, profile=args.profile,
                            int8_kernels=args.int8_kernels)
    report = finish_report(run_batched_live(cfg), shlex.join(["draftsim"] + sys.argv[1:]))
    path = write_batched_report(report, args.out)
    print(markdown({k: v for k, v in report.items() if k != "_bundle"}))
    print(f"wrote {path}")
    if report["drafter_failure"]:
        return _fail(f"drafter process failed: {report['drafter_failure']['error']}")
    bad = [m for m, r in report["modes"].items() if not r["lossless"]]
    if bad:
        return _fail(f"not lossless: {bad} emitted tokens other than the target's greedy output")
    return 0


def _fail(msg: str) -> int:
    print(f"draftsim: error: {msg}", file=sys.stderr)
    return 2
