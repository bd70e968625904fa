"""`draftsim calibrate ...`: measure acceptance traces and latency profiles on real models, import others'."""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure acceptance traces / latency profiles on real models")
    sub = p.add_subparsers(dest="calibrate_command", metavar="WHAT")
    _register_acceptance(sub)
    _register_latency(sub)
    _register_check(sub)
    _register_imports(sub)
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
                           compress=not args.no_compress, cost_model_prefix=args.cost_model_prefix)
    try:
        path = collect_acceptance(cfg, progress=not args.no_progress)
    except KeyboardInterrupt:
        return 130
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- placeholders filled below


def _register_latency(sub) -> None:
    pass


def _register_check(sub) -> None:
    pass


def _register_imports(sub) -> None:
    pass


def _fail(msg: str) -> int:
    print(f"draftsim: error: {msg}", file=sys.stderr)
    return 2
